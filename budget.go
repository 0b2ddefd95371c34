package crewlet

import "time"

// Budget windows (docs/architecture.md, "A turn"): tokens are counted per
// calendar day, ISO week (starting Monday) and month on the company's timezone.
const (
	WindowDay   = "day"
	WindowWeek  = "week"
	WindowMonth = "month"
)

// Budget scopes: a seat's own counters, the company's, and the one replays
// and evals spend (evals.budget), apart from both.
const (
	ScopeSeat    = "seat"
	ScopeCompany = "company"
	ScopeEvals   = "evals"
)

// BudgetCaps are token caps per window; 0 means no cap.
type BudgetCaps struct {
	TokensPerDay   int64 `json:"tokens_per_day,omitempty"`
	TokensPerWeek  int64 `json:"tokens_per_week,omitempty"`
	TokensPerMonth int64 `json:"tokens_per_month,omitempty"`
}

// Cap returns the cap of one window ("day", "week" or "month").
func (c BudgetCaps) Cap(window string) int64 {
	switch window {
	case WindowDay:
		return c.TokensPerDay
	case WindowWeek:
		return c.TokensPerWeek
	case WindowMonth:
		return c.TokensPerMonth
	}
	return 0
}

// UsageWindow is the tokens one scope used in the current window.
type UsageWindow struct {
	Scope  string `json:"scope"`
	Window string `json:"window"`
	// Start and ResetsAt bound the window, on the company's timezone.
	Start    time.Time `json:"start"`
	ResetsAt time.Time `json:"resets_at"`
	Used     int64     `json:"used"`
	// Cap is 0 when the window has none.
	Cap int64 `json:"cap"`
}

// Over reports whether the window's cap is reached.
func (u UsageWindow) Over() bool { return u.Cap > 0 && u.Used >= u.Cap }

// BudgetHold says why a seat's turns are held: the first cap reached, and
// when its window turns.
type BudgetHold struct {
	Scope    string    `json:"scope"`
	Window   string    `json:"window"`
	Cap      int64     `json:"cap"`
	Used     int64     `json:"used"`
	ResetsAt time.Time `json:"resets_at"`
}

// CompanyUsage is the answer to GET /usage: the whole company's tokens
// against company.budget.
type CompanyUsage struct {
	Timezone string        `json:"timezone"`
	Windows  []UsageWindow `json:"windows"`
}

// SeatUsage is the answer to GET /seats/{handle}/usage.
type SeatUsage struct {
	Seat     string        `json:"seat"`
	Timezone string        `json:"timezone"`
	Windows  []UsageWindow `json:"windows"`
	// Hold is the cap that holds the seat's turns now, if any.
	Hold *BudgetHold `json:"hold,omitempty"`
}

// Cost is what model calls cost: the rounds counted, their tokens by
// kind (input counts cached ones too), the tokens no price was found for,
// and the amount in nano-dollars (USD the same in dollars, for reading).
type Cost struct {
	NanoUSD        int64   `json:"nano_usd"`
	USD            float64 `json:"usd"`
	Rounds         int64   `json:"rounds"`
	InputTokens    int64   `json:"input_tokens"`
	OutputTokens   int64   `json:"output_tokens"`
	CachedTokens   int64   `json:"cached_tokens"`
	UnpricedTokens int64   `json:"unpriced_tokens"`
}

// Add adds o's rounds, tokens and amount to c; USD is left to the reader
// to set once the sum is done.
func (c *Cost) Add(o Cost) {
	c.NanoUSD += o.NanoUSD
	c.Rounds += o.Rounds
	c.InputTokens += o.InputTokens
	c.OutputTokens += o.OutputTokens
	c.CachedTokens += o.CachedTokens
	c.UnpricedTokens += o.UnpricedTokens
}

// CostRow is one row of GET /costs: what the model calls of one seat,
// role, model, profile or day cost.
type CostRow struct {
	Key string `json:"key"`
	Cost
}
