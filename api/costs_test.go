package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/prices"
	"github.com/crewlet/crewlet/internal/wire"
)

// GET /costs sums the day's spend on the company's clock by the key asked
// for, the most spent first (by day: every day of the range, oldest
// first), with the total and the versions the receipts were priced at;
// this month so far unless told, and bad input says what to send.
func TestCostsByKeyOnTheCompanyClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.serve(t, testOrg(config.Budget{}, config.Budget{}))
	round := func(seat, role, model string, n int, at time.Time, nano, in, out int64, priced bool) {
		t.Helper()
		version := ""
		if priced {
			version = "v-" + model
		}
		if _, _, err := b.st.RecordRoundAnswer(b.ctx, wire.RoundRow{Seat: seat, WorkKey: "w-" + seat, Round: n, Profile: "local", Role: role,
			Model: model, InputTokens: in, OutputTokens: out, NanoUSD: nano, Priced: priced, PriceVersion: version, RecordedAt: at}, berlin, nil); err != nil {
			t.Fatal(err)
		}
	}
	// 23:30 UTC on the 1st is the 2nd in Berlin.
	round("cto", "lead", "dear", 1, time.Date(2026, 3, 1, 23, 30, 0, 0, time.UTC), 5000, 100, 10, true)
	round("cto", "lead", "cheap", 2, time.Date(2026, 3, 2, 10, 0, 0, 0, berlin), 100, 10, 1, true)
	round("cfo", "engineer", "dear", 1, time.Date(2026, 3, 4, 10, 0, 0, 0, berlin), 7000, 70, 7, true)
	round("cfo", "engineer", "homebrew", 2, time.Date(2026, 3, 4, 11, 0, 0, 0, berlin), 0, 30, 3, false)
	round("cto", "lead", "dear", 3, time.Date(2026, 2, 27, 10, 0, 0, 0, berlin), 1_000_000, 1, 1, true) // last month

	read := func(query string) api.Costs {
		t.Helper()
		var c api.Costs
		if code, eb := get(t, base, "/costs"+query, &c); code != http.StatusOK {
			t.Fatalf("GET /costs%s: %d %+v", query, code, eb)
		}
		return c
	}
	keys := func(c api.Costs) string {
		var out []string
		for _, r := range c.Rows {
			out = append(out, r.Key+"="+strconv.FormatInt(r.NanoUSD, 10))
		}
		return strings.Join(out, " ")
	}

	// This month so far (the clock is March 29th in Berlin) by seat.
	c := read("")
	if c.By != "seat" || c.Since != "2026-03-01" || c.Until != "2026-03-29" || c.Timezone != "Europe/Berlin" || keys(c) != "cfo=7000 cto=5100" {
		t.Errorf("default costs = %s %s..%s %s %q; want by seat, March 1st to 29th, cfo=7000 cto=5100", c.By, c.Since, c.Until, c.Timezone, keys(c))
	}
	if c.Total.NanoUSD != 12100 || c.Total.Rounds != 4 || c.Total.InputTokens != 210 || c.Total.UnpricedTokens != 33 || c.Total.USD != prices.USD(12100) {
		t.Errorf("total = %+v; want 12100 nano-dollars over 4 rounds, 210 tokens in, 33 unpriced", c.Total)
	}
	if strings.Join(c.PriceVersions, ",") != "v-cheap,v-dear" || c.TableVersion != prices.Version {
		t.Errorf("versions = %v, table %s; want v-cheap,v-dear and %s", c.PriceVersions, c.TableVersion, prices.Version)
	}
	if got := keys(read("?by=model")); got != "dear=12000 cheap=100 homebrew=0" {
		t.Errorf("by model: %q", got)
	}
	if got := keys(read("?by=role&since=2026-02-01&until=2026-02-28")); got != "lead=1000000" {
		t.Errorf("by role in February: %q", got)
	}
	if got := keys(read("?by=day&since=2026-03-01&until=2026-03-04")); got != "2026-03-01=0 2026-03-02=5100 2026-03-03=0 2026-03-04=7000" {
		t.Errorf("by day: %q; want every day, the first round on the 2nd (Berlin)", got)
	}

	for _, bad := range []struct{ query, says string }{
		{"?by=week", "by must be one of [day model profile role seat]"},
		{"?since=March", "since must be a day as YYYY-MM-DD"},
		{"?until=2026-13-01", "until must be a day as YYYY-MM-DD"},
		{"?since=2026-03-05&until=2026-03-04", "send since on or before until"},
		{"?since=2025-01-01&until=2026-03-01", "at most 400 days"},
	} {
		code, eb := get(t, base, "/costs"+bad.query, nil)
		if code != http.StatusBadRequest || !strings.Contains(eb.Error+eb.Detail, bad.says) {
			t.Errorf("GET /costs%s: %d %+v; want 400 saying %q", bad.query, code, eb, bad.says)
		}
	}
}
