package config

import (
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/prices"
)

const pricedOrg = `
company: { name: acme }
profiles:
  p: { provider: scripted, model: house-model }
roles:
  eng: { charter: engineers, profile: p }
seats:
  - { handle: cto, role: eng }
`

func TestPricesProblemsNameTheKey(t *testing.T) {
	_, err := Parse([]byte(pricedOrg + `
prices:
  - { model: house-model, input_mtok: 1, output_mtok: 2 }
  - { input_mtok: 1 }
  - { model: house-model, input_mtok: 1 }
  - { model: neg, input_mtok: -1, output_mtok: 20000, cache_read_mtok: -0.5 }
`))
	want := []string{
		`prices[1].model: is empty`,
		`prices[2].model: "house-model" is priced twice (prices[0] too)`,
		`prices[3].input_mtok: is -1; a price is dollars per million tokens, from 0 to 10000`,
		`prices[3].output_mtok: is 20000`,
		`prices[3].cache_read_mtok: is -0.5`,
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("problems lack %q; got:\n%v", w, err)
		}
	}
}

func TestOrgPricesReachThePriceTable(t *testing.T) {
	c, err := Parse([]byte(pricedOrg + `
prices:
  - { model: house-model, input_mtok: 2, output_mtok: 8, cache_read_mtok: 0.5 }
  - { model: llama3, input_mtok: 0, output_mtok: 0 }
`))
	if err != nil {
		t.Fatal(err)
	}
	table, err := c.PriceTable()
	if err != nil {
		t.Fatal(err)
	}
	model := c.Profiles["p"].PricedModel("")
	q := table.Quote(model, "", time.Now(), prices.Usage{Input: 1_000_000, Output: 1_000_000, Cached: 500_000})
	// 0.5M uncached at $2, 0.5M cached at $0.50, 1M out at $8.
	if !q.Priced || q.Provider != "org" || q.NanoUSD != 9_250_000_000 {
		t.Errorf("quote of %s = %+v, want the org's price, $9.25", model, q)
	}
	if q := table.Quote("llama3", "", time.Now(), prices.Usage{Input: 10}); !q.Priced || q.NanoUSD != 0 {
		t.Errorf("a local model at 0 = %+v, want priced at $0", q)
	}
}
