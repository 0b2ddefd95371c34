package config

import (
	"math"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/prices"
)

// TokenBudget is token caps per window; 0 means no cap: what evals.budget
// caps replays by.
type TokenBudget struct {
	TokensPerDay   int64 `mapstructure:"tokens_per_day"`
	TokensPerWeek  int64 `mapstructure:"tokens_per_week"`
	TokensPerMonth int64 `mapstructure:"tokens_per_month"`
}

// Caps returns the budget as the domain type.
func (b TokenBudget) Caps() crewlet.BudgetCaps {
	return crewlet.BudgetCaps{TokensPerDay: b.TokensPerDay, TokensPerWeek: b.TokensPerWeek, TokensPerMonth: b.TokensPerMonth}
}

// Budget is a seat's or the company's token and money caps per window; 0
// means no cap (docs/operations.md, "Budgets in money").
type Budget struct {
	TokensPerDay   int64 `mapstructure:"tokens_per_day"`
	TokensPerWeek  int64 `mapstructure:"tokens_per_week"`
	TokensPerMonth int64 `mapstructure:"tokens_per_month"`
	// Money caps, in dollars.
	USDPerDay   float64 `mapstructure:"usd_per_day"`
	USDPerWeek  float64 `mapstructure:"usd_per_week"`
	USDPerMonth float64 `mapstructure:"usd_per_month"`
	// OnLimit is what a money cap does: hold (the default, "") holds the
	// seat's turns at the cap; ask asks Ask.To at Ask.At of the cap whether
	// the seat may go on to it.
	OnLimit string    `mapstructure:"on_limit"`
	Ask     BudgetAsk `mapstructure:"ask"`
}

// BudgetAsk is whom on_limit: ask asks, and at which share of a money cap.
type BudgetAsk struct {
	To string `mapstructure:"to"`
	// At is the share of the cap, in (0, 1); nil is DefaultAskAt.
	At *float64 `mapstructure:"at"`
}

// DefaultAskAt is budget.ask.at unless set: asked at 80 % of the cap.
const DefaultAskAt = 0.8

// maxBudgetUSD bounds a money cap: far above any company's spend, and low
// enough that its nano-dollars fit an int64.
const maxBudgetUSD = 1_000_000_000

// Caps returns the budget as the domain type, money in nano-dollars.
func (b Budget) Caps() crewlet.BudgetCaps {
	caps := b.tokens().Caps()
	caps.NanoUSDPerDay, caps.NanoUSDPerWeek, caps.NanoUSDPerMonth = nanoUSD(b.USDPerDay), nanoUSD(b.USDPerWeek), nanoUSD(b.USDPerMonth)
	if b.OnLimit == crewlet.OnLimitAsk {
		at := DefaultAskAt
		if b.Ask.At != nil {
			at = *b.Ask.At
		}
		caps.Ask = &crewlet.BudgetAskPolicy{To: b.Ask.To, At: at}
	}
	return caps
}

func (b Budget) tokens() TokenBudget {
	return TokenBudget{TokensPerDay: b.TokensPerDay, TokensPerWeek: b.TokensPerWeek, TokensPerMonth: b.TokensPerMonth}
}

// hasMoneyCap reports whether any window has a money cap.
func (b Budget) hasMoneyCap() bool { return b.USDPerDay > 0 || b.USDPerWeek > 0 || b.USDPerMonth > 0 }

func nanoUSD(usd float64) int64 { return int64(math.Round(usd * prices.NanoPerUSD)) }

// checkBudget checks a role's (role names it) or the company's (role is
// empty) budget: caps not negative, a known on_limit, and an ask that can
// be asked: of a seat of the org that is not held by the same budget.
func checkBudget(add addFunc, base string, b Budget, c *Config, role string) {
	checkTokenBudget(add, base, b.tokens())
	for _, w := range []struct {
		key string
		val float64
	}{
		{"usd_per_day", b.USDPerDay},
		{"usd_per_week", b.USDPerWeek},
		{"usd_per_month", b.USDPerMonth},
	} {
		if math.IsNaN(w.val) || w.val < 0 || w.val > maxBudgetUSD {
			add(base+"."+w.key, "is %v; a money cap is dollars, from 0 (no cap) to %d", w.val, maxBudgetUSD)
		}
	}
	switch b.OnLimit {
	case "", crewlet.OnLimitHold:
		if b.Ask.To != "" {
			add(base+".ask", "is set but on_limit is not ask; set on_limit: ask to ask, or remove ask")
		}
		return
	case crewlet.OnLimitAsk:
	default:
		add(base+".on_limit", "%q is not a limit policy; use hold or ask", b.OnLimit)
		return
	}
	if !b.hasMoneyCap() {
		add(base+".on_limit", "ask asks at a share of a money cap; set usd_per_day, usd_per_week or usd_per_month")
	}
	if at := b.Ask.At; at != nil && (math.IsNaN(*at) || *at <= 0 || *at >= 1) {
		add(base+".ask.at", "is %v; the share of the cap at which to ask is between 0 and 1, e.g. 0.8", *at)
	}
	if b.Ask.To == "" {
		add(base+".ask.to", "required with on_limit: ask; name the seat to ask, a person's human seat or an agent seat")
		return
	}
	seat, ok := c.Seat(b.Ask.To)
	switch {
	case !ok:
		add(base+".ask.to", "no seat %q; name a seat of the org, a person's human seat or an agent seat", b.Ask.To)
	case role == "" && seat.Kind != string(crewlet.SeatHuman):
		// Every agent seat spends from the company's budget: the asked
		// seat could be held by the very cap it is asked about.
		add(base+".ask.to", "%s is an agent seat; the company's budget asks a person's human seat", b.Ask.To)
	case role != "" && seat.Role == role && seat.Kind != string(crewlet.SeatHuman):
		add(base+".ask.to", "%s is a seat of role %s; a seat is not asked about its own spending: name a person or a seat of another role", b.Ask.To, role)
	}
}

// checkTokenBudget checks token caps: none negative.
func checkTokenBudget(add addFunc, base string, b TokenBudget) {
	for _, w := range []struct {
		key string
		val int64
	}{
		{"tokens_per_day", b.TokensPerDay},
		{"tokens_per_week", b.TokensPerWeek},
		{"tokens_per_month", b.TokensPerMonth},
	} {
		if w.val < 0 {
			add(base+"."+w.key, "%d is negative; must be 0 (no cap) or more", w.val)
		}
	}
}
