package main

import (
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/prices"
)

// The text of a quote says the match, the rates and the call's amount; an
// unpriced model says how to price it.
func TestPriceQuoteText(t *testing.T) {
	table, err := prices.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	u := prices.Usage{Input: 2000, Output: 1000}
	q := table.Quote("claude-3-5-sonnet-20241022", "", time.Now(), u)
	if err := printPriceQuote(&b, api.PriceQuote{Tokens: u, Quote: q, TableVersion: prices.Version}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"priced as claude-3-5-sonnet (anthropic)", "input $3, output $15, cached input $0.3", "a call of 2000 input (0 cached) and 1000 output tokens: $0.021000"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("quote text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := printPriceQuote(&b, api.PriceQuote{Quote: table.Quote("my-finetune", "", time.Now(), u)}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "add {model: my-finetune, input_mtok: N, output_mtok: N} to prices:") {
		t.Errorf("an unpriced quote does not say how to price it:\n%s", b.String())
	}
}
