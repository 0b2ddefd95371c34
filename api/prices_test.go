package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/prices"
)

// GET /prices quotes a call from the embedded table, or from the org
// file's own price, and says which version a receipt would name.
func TestPriceQuotes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := testOrg(config.Budget{}, config.Budget{})
	org.Profiles = map[string]config.Profile{
		"claude": {Provider: config.ProviderAnthropic, Model: "claude-3-5-sonnet-20241022", BaseURL: config.AnthropicBaseURL},
		"local":  {Provider: config.ProviderScripted, Model: "house-model"},
	}
	org.Prices = []config.Price{{Model: "house-model", InputMTok: 0.5, OutputMTok: 1.5}}
	base := b.serve(t, org)

	var q api.PriceQuote
	// 2,000 in at $3 and 1,000 out at $15 a million: $0.006 + $0.015.
	if code, eb := get(t, base, "/prices?model=claude-3-5-sonnet-20241022&input_tokens=2000&output_tokens=1000", &q); code != http.StatusOK {
		t.Fatalf("GET /prices: %d %+v", code, eb)
	}
	if !q.Priced || q.Provider != "anthropic" || q.Matched != "claude-3-5-sonnet" || q.NanoUSD != 21_000_000 || q.Version != prices.Version || q.TableVersion != prices.Version {
		t.Errorf("quote = %+v; want anthropic's claude-3-5-sonnet at $0.021, version %s", q, prices.Version)
	}
	q = api.PriceQuote{}
	if code, eb := get(t, base, "/prices?profile=local", &q); code != http.StatusOK {
		t.Fatalf("GET /prices?profile=local: %d %+v", code, eb)
	}
	// The default call: 1,000 tokens each way at $0.50 and $1.50.
	if q.Profile != "local" || q.Model != "house-model" || q.Provider != "org" || q.NanoUSD != 2_000_000 || !strings.HasPrefix(q.Version, "org:") {
		t.Errorf("quote of the local profile = %+v; want the org's price of house-model, $0.002", q)
	}
	q = api.PriceQuote{}
	if code, _ := get(t, base, "/prices?model=nobody-sells-this", &q); code != http.StatusOK || q.Priced || q.NanoUSD != 0 {
		t.Errorf("quote of an unknown model = %d %+v; want 200, unpriced", code, q)
	}

	for _, bad := range []struct{ query, says string }{
		{"", "name a model"},
		{"?model=a&profile=local", "one of the two"},
		{"?profile=nope", `no profile "nope"`},
		{"?model=gpt-4o&input_tokens=-3", "input_tokens must be a count of tokens"},
		{"?model=gpt-4o&output_tokens=2000000000", "output_tokens must be at most"},
		{"?model=gpt-4o&input_tokens=10&cached_tokens=11", "cannot exceed"},
	} {
		code, eb := get(t, base, "/prices"+bad.query, &q)
		if code/100 != 4 || !strings.Contains(eb.Error+eb.Detail, bad.says) {
			t.Errorf("GET /prices%s: %d %+v; want a 4xx saying %q", bad.query, code, eb, bad.says)
		}
	}
}
