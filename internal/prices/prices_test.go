package prices

import (
	"testing"
	"time"
)

func TestQuoteFromTheSnapshot(t *testing.T) {
	table, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	aug := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name              string
		model, baseURL    string
		at                time.Time
		u                 Usage
		provider, matched string
		nano              int64
	}{
		// 1M uncached in at $3, 0.5M out at $15: $3 + $7.5.
		{"anthropic by name", "claude-3-5-sonnet-20241022", "", aug, Usage{Input: 1_000_000, Output: 500_000}, "anthropic", "claude-3-5-sonnet", 10_500_000_000},
		// Cached tokens at the cache-read price: 1,000 × $3 + 1,000 × $0.30 per M.
		{"cached tokens", "claude-3-5-sonnet", "https://api.anthropic.com", aug, Usage{Input: 2000, Cached: 1000}, "anthropic", "claude-3-5-sonnet", 3_300_000},
		// The endpoint picks the provider: Bedrock's price list, not Anthropic's.
		{"endpoint picks provider", "amazon.nova-micro-v1:0", "https://bedrock-runtime.us-east-1.amazonaws.com", aug, Usage{Input: 1_000_000}, "aws", "amazon.nova-micro-v1:0", 35_000_000},
		// A prompt past the tier's start is charged at the tier: $6, not $3.
		{"tier reached", "claude-sonnet-4-5", "", aug, Usage{Input: 250_000}, "anthropic", "claude-sonnet-4-5", 1_500_000_000},
		{"tier not reached", "claude-sonnet-4-5", "", aug, Usage{Input: 100_000}, "anthropic", "claude-sonnet-4-5", 300_000_000},
		// A dated price: claude-sonnet-5 is $2 before 2026-09-01 and $3 from it.
		{"before a dated price", "claude-sonnet-5", "", aug, Usage{Input: 1_000_000}, "anthropic", "claude-sonnet-5", 2_000_000_000},
		{"after a dated price", "claude-sonnet-5", "", time.Date(2026, 9, 2, 0, 0, 0, 0, time.UTC), Usage{Input: 1_000_000}, "anthropic", "claude-sonnet-5", 3_000_000_000},
		// A time-of-day price: deepseek-chat is $0.27 from 00:30 to 16:30 UTC, $0.135 otherwise.
		{"peak hours", "deepseek-chat", "https://api.deepseek.com", aug, Usage{Input: 1_000_000}, "deepseek", "deepseek-chat", 270_000_000},
		{"off-peak hours", "deepseek-chat", "https://api.deepseek.com", time.Date(2026, 8, 1, 20, 0, 0, 0, time.UTC), Usage{Input: 1_000_000}, "deepseek", "deepseek-chat", 135_000_000},
		{"openai", "gpt-4o-mini", "https://api.openai.com/v1", aug, Usage{Input: 1000, Output: 1000}, "openai", "gpt-4o-mini", 750_000},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			q := table.Quote(tt.model, tt.baseURL, tt.at, tt.u)
			if !q.Priced || q.Provider != tt.provider || q.Matched != tt.matched || q.NanoUSD != tt.nano || q.Version != Version {
				t.Errorf("quote = %+v, want %s/%s at %d nano-dollars, version %s", q, tt.provider, tt.matched, tt.nano, Version)
			}
		})
	}
}

func TestUnknownModelIsUnpricedNotFree(t *testing.T) {
	table, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"my-own-finetune", ""} {
		q := table.Quote(model, "http://127.0.0.1:11434/v1", time.Now(), Usage{Input: 100, Output: 100})
		if q.Priced || q.NanoUSD != 0 || q.Version != "" {
			t.Errorf("quote of %q = %+v, want unpriced", model, q)
		}
	}
}

func TestOrgPriceOverridesAndAddsModels(t *testing.T) {
	cache := 0.25
	table, err := New([]Override{
		{Model: "gpt-4o-mini", InputMTok: 0.1, OutputMTok: 0.2},
		{Model: "llama3", InputMTok: 0, OutputMTok: 0},
		{Model: "claude-3-5-sonnet", InputMTok: 2, OutputMTok: 10, CacheReadMTok: &cache},
	})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if q := table.Quote("gpt-4o-mini", "https://api.openai.com/v1", at, Usage{Input: 1_000_000, Output: 1_000_000}); q.Provider != "org" || q.NanoUSD != 300_000_000 {
		t.Errorf("negotiated rate: %+v, want org at $0.30", q)
	}
	local := table.Quote("llama3", "http://127.0.0.1:11434/v1", at, Usage{Input: 5000, Output: 5000})
	if !local.Priced || local.NanoUSD != 0 {
		t.Errorf("a local model at 0: %+v, want priced at 0", local)
	}
	if q := table.Quote("claude-3-5-sonnet", "", at, Usage{Input: 2_000_000, Cached: 1_000_000}); q.NanoUSD != 2_250_000_000 {
		t.Errorf("override with cache price: %+v, want $2.25", q)
	}
	// A changed rate is a new version, so receipts name the rate they were charged at.
	again, err := New([]Override{{Model: "gpt-4o-mini", InputMTok: 0.1, OutputMTok: 0.3}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := table.Quote("gpt-4o-mini", "", at, Usage{}).Version, again.Quote("gpt-4o-mini", "", at, Usage{}).Version; a == b {
		t.Errorf("two rates of one model share the version %q", a)
	}
}

func TestEveryTableEntryReads(t *testing.T) {
	table, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	priced := 0
	for _, p := range table.providers {
		for _, m := range p.Models {
			if _, ok := m.rates(time.Now(), 1000); ok {
				priced++
			}
		}
	}
	// The snapshot lists 1,285 models; a few price only requests or audio.
	if priced < 1200 {
		t.Errorf("only %d models of the snapshot read a token price", priced)
	}
}
