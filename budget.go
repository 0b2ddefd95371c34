package crewlet

import "time"

// Budget windows (docs/architecture.md, "A turn"): tokens and money are
// counted per calendar day, ISO week (starting Monday) and month on the
// company's timezone.
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

// What a budget cap reached does (budget.on_limit): hold the seat's turns,
// or ask a person or seat first, at a share of the cap, whether the seat
// may go on to it.
const (
	OnLimitHold = "hold"
	OnLimitAsk  = "ask"
)

// BudgetCaps are token and money caps per window; 0 means no cap.
type BudgetCaps struct {
	TokensPerDay   int64 `json:"tokens_per_day,omitempty"`
	TokensPerWeek  int64 `json:"tokens_per_week,omitempty"`
	TokensPerMonth int64 `json:"tokens_per_month,omitempty"`
	// Money caps, in nano-dollars.
	NanoUSDPerDay   int64 `json:"nano_usd_per_day,omitempty"`
	NanoUSDPerWeek  int64 `json:"nano_usd_per_week,omitempty"`
	NanoUSDPerMonth int64 `json:"nano_usd_per_month,omitempty"`
	// Ask, when set, is asked at its share of a money cap whether the seat
	// may go on to the cap (on_limit: ask); nil holds at the cap.
	Ask *BudgetAskPolicy `json:"ask,omitempty"`
}

// BudgetAskPolicy is whom a money budget asks, and at which share of its
// cap.
type BudgetAskPolicy struct {
	// To is the seat asked: a person's human seat or an agent seat.
	To string `json:"to"`
	// At is the share of the cap, in (0, 1), at which it is asked.
	At float64 `json:"at"`
}

// Cap returns the token cap of one window ("day", "week" or "month").
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

// MoneyCap returns the money cap of one window, in nano-dollars.
func (c BudgetCaps) MoneyCap(window string) int64 {
	switch window {
	case WindowDay:
		return c.NanoUSDPerDay
	case WindowWeek:
		return c.NanoUSDPerWeek
	case WindowMonth:
		return c.NanoUSDPerMonth
	}
	return 0
}

// UsageWindow is the tokens and money one scope used in the current window.
type UsageWindow struct {
	Scope  string `json:"scope"`
	Window string `json:"window"`
	// Start and ResetsAt bound the window, on the company's timezone.
	Start    time.Time `json:"start"`
	ResetsAt time.Time `json:"resets_at"`
	Used     int64     `json:"used"`
	// Cap is 0 when the window has none.
	Cap int64 `json:"cap"`
	// UsedNanoUSD is the money the window's priced usage cost; CapNanoUSD
	// its money cap (0: none).
	UsedNanoUSD int64 `json:"used_nano_usd"`
	CapNanoUSD  int64 `json:"cap_nano_usd"`
	// UnpricedTokens are the window's tokens no price was found for: a
	// money cap cannot be proven kept while there are any.
	UnpricedTokens int64 `json:"unpriced_tokens"`
	// UnpricedModels names the models of those tokens, most tokens first;
	// read only for a window with a money cap.
	UnpricedModels []UnpricedModel `json:"unpriced_models,omitempty"`
	// Ask is the window's question whether the seat may go on to its money
	// cap (on_limit: ask), once it was asked.
	Ask *BudgetAsk `json:"ask,omitempty"`
}

// Over reports whether the window's token cap is reached.
func (u UsageWindow) Over() bool { return u.Cap > 0 && u.Used >= u.Cap }

// OverMoney reports whether the window's money cap is reached.
func (u UsageWindow) OverMoney() bool { return u.CapNanoUSD > 0 && u.UsedNanoUSD >= u.CapNanoUSD }

// UnpricedModel is a model whose tokens in a window had no price.
type UnpricedModel struct {
	Model  string `json:"model"`
	Tokens int64  `json:"tokens"`
}

// Budget ask decisions: none yet, go on to the cap, or hold until the
// window turns.
const (
	AskWaiting = "waiting"
	AskYes     = "yes"
	AskNo      = "no"
)

// BudgetAsk is the one question a money window asks (on_limit: ask): a
// ticket whose question waits on the asked seat, and its answer.
type BudgetAsk struct {
	Ticket string `json:"ticket"`
	// To is the seat asked; Seat the seat whose turn crossed the share.
	To      string    `json:"to"`
	Seat    string    `json:"seat"`
	AskedAt time.Time `json:"asked_at"`
	// UsedNanoUSD and CapNanoUSD are what the window had spent of what cap
	// when it asked.
	UsedNanoUSD int64 `json:"used_nano_usd"`
	CapNanoUSD  int64 `json:"cap_nano_usd"`
	// Decision is AskWaiting until answered, then AskYes or AskNo.
	Decision   string     `json:"decision"`
	Answer     string     `json:"answer,omitempty"`
	AnsweredBy string     `json:"answered_by,omitempty"`
	AnsweredAt *time.Time `json:"answered_at,omitempty"`
}

// Budget units: what a hold's Cap and Used count.
const (
	UnitTokens  = "tokens"
	UnitNanoUSD = "nano_usd"
)

// BudgetHold says why a seat's turns are held: the first cap reached, and
// when its window turns.
type BudgetHold struct {
	Scope  string `json:"scope"`
	Window string `json:"window"`
	// Unit is what Cap and Used count: UnitTokens, or UnitNanoUSD for a
	// money cap. Empty in holds recorded before money caps: tokens.
	Unit     string    `json:"unit,omitempty"`
	Cap      int64     `json:"cap"`
	Used     int64     `json:"used"`
	ResetsAt time.Time `json:"resets_at"`
	// Reason says in words what holds the seat and what would release it.
	Reason string `json:"reason,omitempty"`
}

// CompanyUsage is the answer to GET /usage: the whole company's tokens
// and money against company.budget.
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
