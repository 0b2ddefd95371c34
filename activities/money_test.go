package activities

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/wire"
)

// swappedOrg is an org source a test changes between turns, as a config
// apply does.
type swappedOrg struct{ cur atomic.Pointer[config.Config] }

func (s *swappedOrg) Now() *config.Config { return s.cur.Load() }

func (s *swappedOrg) set(t *testing.T, yaml string) {
	t.Helper()
	c, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s.cur.Store(c)
}

const moneyOrg = `
company: { name: acme, timezone: Europe/Berlin }
profiles:
  cheap: { provider: scripted, model: cheap-model }
  dear: { provider: scripted, model: dear-model }
  homebrew: { provider: scripted, model: nobody-prices-this }
roles:
  clerk: { charter: keeps the ledger, profile: PROFILE }
seats:
  - { handle: cto, role: clerk }
prices:
  - { model: cheap-model, input_mtok: 1, output_mtok: 2 }
  - { model: dear-model, input_mtok: DEAR_IN, output_mtok: 30 }
`

func moneyOrgWith(profile, dearIn string) string {
	return strings.NewReplacer("PROFILE", profile, "DEAR_IN", dearIn).Replace(moneyOrg)
}

// Every receipt carries its amount at the price of its time: tokens ×
// price, per profile; a price changed in the org file applies to the rounds
// after it and never reprices one before. Usage no price is found for is
// counted as unpriced, not as free.
func TestReceiptsCarryMoneyAtThePriceOfTheirTime(t *testing.T) {
	t.Parallel()
	org := &swappedOrg{}
	org.set(t, moneyOrgWith("cheap", "10"))
	e := setupTurnsSource(t, org, nil)

	turn := func(eventID string) wire.RoundRow {
		t.Helper()
		key := crewlet.WorkKey([]string{eventID})
		e.begin(t, key, e.publish(t, eventID, "what is the ledger at"))
		if _, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: key, Round: 1}); err != nil {
			t.Fatal(err)
		}
		rounds, err := e.store.TurnRounds(e.ctx, "cto", key)
		if err != nil || len(rounds) != 1 {
			t.Fatalf("rounds of %s: %+v, %v; want one", key, rounds, err)
		}
		return rounds[0]
	}
	want := func(r wire.RoundRow, model string, inNano, outNano int64) {
		t.Helper()
		if r.InputTokens == 0 || r.OutputTokens == 0 {
			t.Fatalf("round %+v spent no tokens", r)
		}
		amount := r.InputTokens*inNano + r.OutputTokens*outNano
		if !r.Priced || r.Model != model || r.NanoUSD != amount || r.PriceVersion == "" {
			t.Errorf("receipt %s: priced %t model %q version %q amount %d; want %s at %d (%d in × %d + %d out × %d)",
				r.WorkKey, r.Priced, r.Model, r.PriceVersion, r.NanoUSD, model, amount, r.InputTokens, inNano, r.OutputTokens, outNano)
		}
	}

	// $1 and $2 a million tokens: 1,000 and 2,000 nano-dollars a token.
	cheap := turn("m1")
	want(cheap, "cheap-model", 1000, 2000)

	org.set(t, moneyOrgWith("dear", "10"))
	dear := turn("m2")
	want(dear, "dear-model", 10_000, 30_000)

	org.set(t, moneyOrgWith("dear", "20"))
	dearer := turn("m3")
	want(dearer, "dear-model", 20_000, 30_000)
	if dearer.PriceVersion == dear.PriceVersion {
		t.Errorf("a changed price kept the version %q", dear.PriceVersion)
	}
	again, err := e.store.TurnRounds(e.ctx, "cto", dear.WorkKey)
	if err != nil || len(again) != 1 || again[0].NanoUSD != dear.NanoUSD || again[0].PriceVersion != dear.PriceVersion {
		t.Errorf("the receipt before the price change now reads %+v (%v); want it as charged, %d at %s", again, err, dear.NanoUSD, dear.PriceVersion)
	}

	org.set(t, moneyOrgWith("homebrew", "20"))
	unpriced := turn("m4")
	if unpriced.Priced || unpriced.NanoUSD != 0 || unpriced.Model != "nobody-prices-this" {
		t.Errorf("receipt of a model without a price: %+v; want unpriced at 0", unpriced)
	}

	// The day's counters and spend hold each receipt once.
	conn, err := pgx.Connect(e.ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	total := cheap.NanoUSD + dear.NanoUSD + dearer.NanoUSD
	unpricedTokens := unpriced.InputTokens + unpriced.OutputTokens
	var counted, unpricedCounted, spent, spentUnpriced int64
	if err := conn.QueryRow(e.ctx, `SELECT nano_usd, unpriced_tokens FROM usage_counters WHERE scope = 'seat:cto' AND window_name = 'day'`).Scan(&counted, &unpricedCounted); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(e.ctx, `SELECT sum(nano_usd), sum(unpriced_tokens) FROM spend_daily WHERE seat = 'cto' AND role = 'clerk'`).Scan(&spent, &spentUnpriced); err != nil {
		t.Fatal(err)
	}
	if counted != total || spent != total || unpricedCounted != unpricedTokens || spentUnpriced != unpricedTokens {
		t.Errorf("counted %d (unpriced %d), daily spend %d (unpriced %d); want %d and %d unpriced tokens",
			counted, unpricedCounted, spent, spentUnpriced, total, unpricedTokens)
	}
}
