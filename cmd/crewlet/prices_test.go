package main

import (
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
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

// A ticket's cost prints as a tree of its chain, with the total; the
// costs view as a table with its total and the unpriced tokens named.
func TestCostTexts(t *testing.T) {
	own := crewlet.Cost{NanoUSD: 1_500_000, Rounds: 2, InputTokens: 300, OutputTokens: 40}
	all := crewlet.Cost{NanoUSD: 4_000_000, Rounds: 5, InputTokens: 900, OutputTokens: 100, UnpricedTokens: 12}
	var b strings.Builder
	err := printTicketCost(&b, api.TicketView{Cost: all, CostChain: []crewlet.TicketLink{
		{Ticket: "t-root", To: "cto", Phase: crewlet.TicketDone, Own: own, Total: all},
		{Ticket: "t-sub", Parent: "t-root", To: "eng-1", Depth: 1, Phase: crewlet.TicketDone, Own: own, Total: own},
		{Ticket: "t-far", Parent: "t-root", To: "a2a:review", Depth: 1, Phase: crewlet.TicketDone, Remote: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"t-root  ", "\n  t-sub  ", "remote (not counted)", "$0.004000+unpriced", "cost: $0.004000 over 5 model calls", "12 tokens unpriced"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ticket cost text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	err = printCosts(&b, api.Costs{By: "model", Since: "2026-11-01", Until: "2026-11-30", Timezone: "Europe/Berlin",
		Rows:  []crewlet.CostRow{{Key: "dear-model", Cost: own}, {Key: "homebrew", Cost: crewlet.Cost{UnpricedTokens: 12, Rounds: 1}}},
		Total: all, PriceVersions: []string{prices.Version}, TableVersion: prices.Version})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"costs by model, 2026-11-01 to 2026-11-30 (Europe/Berlin)", "MODEL ", "dear-model  $0.001500", "total", "12 tokens have no price"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("costs text lacks %q:\n%s", want, b.String())
		}
	}
}

// A seat's usage shows its money beside its tokens, and the question its
// money budget asked.
func TestSeatUsageTextShowsMoney(t *testing.T) {
	resets := time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC)
	var b strings.Builder
	err := printSeatUsage(&b, crewlet.SeatUsage{Seat: "cto", Timezone: "UTC", Windows: []crewlet.UsageWindow{
		{Scope: "seat", Window: "day", Used: 120, ResetsAt: resets, UsedNanoUSD: 16_100_000_000, CapNanoUSD: 20_000_000_000,
			Ask: &crewlet.BudgetAsk{Ticket: "t-1", To: "olga", UsedNanoUSD: 16_100_000_000, CapNanoUSD: 20_000_000_000, Decision: "waiting"}},
		{Scope: "company", Window: "month", Used: 120, ResetsAt: resets, UnpricedTokens: 7},
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, b.String(),
		"SCOPE    WINDOW  USED  CAP  RESETS AT             SPENT       USD CAP     UNPRICED",
		"seat     day     120   -    2026-06-11T00:00:00Z  $16.100000  $20.000000  0",
		"company  month   120   -    2026-06-11T00:00:00Z  $0.000000   -           7",
		"asked olga (ticket t-1) at $16.100000 of the seat day cap of $20.000000: waiting")
}
