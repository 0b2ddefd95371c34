package wire

import (
	"encoding/json"
	"time"
)

// Bounds of the eval lists.
const (
	// MaxDatasetTurns is the most turns a dataset freezes.
	MaxDatasetTurns = 1000
	// MaxEvalConcurrency is the most replays one eval run keeps going.
	MaxEvalConcurrency = 32
	// DefaultEvalConcurrency is how many it keeps going when not told.
	DefaultEvalConcurrency = 8
	// MaxEvalList is the most datasets or runs a list returns.
	MaxEvalList = 200
)

// Eval run statuses.
const (
	EvalRunning         = "running"
	EvalDone            = "done"
	EvalBudgetExhausted = "budget_exhausted"
)

// Statuses of one turn of an eval run.
const (
	EvalTurnPending = "pending"
	EvalTurnScored  = "scored"
	// EvalTurnFailed: the replay could not run (the turn's seat is gone
	// from the org, the profile failed); Error says why.
	EvalTurnFailed = "failed"
	// EvalTurnRefused: the eval budget was spent before its replay.
	EvalTurnRefused = "refused"
)

// DatasetSelector is how a dataset chooses its turns: a seat's or a role's
// finished turns in a window, or a list of turn ids.
type DatasetSelector struct {
	Seat  string    `json:"seat,omitempty"`
	Role  string    `json:"role,omitempty"`
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Limit keeps the newest Limit turns of the window; 0 is MaxDatasetTurns.
	Limit int      `json:"limit,omitempty"`
	Turns []string `json:"turns,omitempty"`
}

// DatasetRequest is the body of POST /evals/datasets.
type DatasetRequest struct {
	Name string `json:"name"`
	DatasetSelector
}

// Dataset is a frozen set of recorded turns.
type Dataset struct {
	Name      string          `json:"name"`
	Selector  DatasetSelector `json:"selector"`
	CreatedBy string          `json:"created_by"`
	CreatedAt time.Time       `json:"created_at"`
	Size      int             `json:"size"`
	// Turns are the turn ids, oldest first; left out of a list.
	Turns []string `json:"turns,omitempty"`
}

// EvalRun is one eval run: a dataset replayed with a change, scored by
// checks.
type EvalRun struct {
	ID          string          `json:"id"`
	Dataset     string          `json:"dataset"`
	Change      json.RawMessage `json:"change"`
	Checks      json.RawMessage `json:"checks"`
	Concurrency int             `json:"concurrency"`
	Principal   string          `json:"principal"`
	Status      string          `json:"status"`
	CreatedAt   time.Time       `json:"created_at"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
	Totals      EvalTotals      `json:"totals"`
	// Results are the run's turns, in the dataset's order; left out of a
	// list.
	Results []EvalResult `json:"results,omitempty"`
}

// EvalTotals sum a run's turns.
type EvalTotals struct {
	Turns   int `json:"turns"`
	Pending int `json:"pending"`
	Scored  int `json:"scored"`
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Refused int `json:"refused"`
	// PassRate is Passed over Scored, 0 when none is scored.
	PassRate     float64 `json:"pass_rate"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	// Diverged counts the replayed tool calls no recorded call matched.
	Diverged int `json:"diverged"`
	// NanoUSD is what the run spent (its replays and judges, charged to
	// evals.budget) at the prices when each call ran, in nano-dollars;
	// UnpricedTokens are its tokens no price was found for.
	// RecordedNanoUSD is what the recorded turns it scored cost when they
	// ran, from their receipts.
	NanoUSD         int64 `json:"nano_usd"`
	UnpricedTokens  int64 `json:"unpriced_tokens"`
	RecordedNanoUSD int64 `json:"recorded_nano_usd"`
}

// EvalResult is one turn of a run: its replay's report and each check's
// result.
type EvalResult struct {
	Turn         string          `json:"turn"`
	Status       string          `json:"status"`
	Passed       *bool           `json:"passed,omitempty"`
	Recorded     string          `json:"recorded_answer"`
	Replayed     string          `json:"replayed_answer"`
	Checks       []CheckResult   `json:"checks,omitempty"`
	Error        string          `json:"error,omitempty"`
	InputTokens  int64           `json:"input_tokens"`
	OutputTokens int64           `json:"output_tokens"`
	Diverged     int             `json:"diverged"`
	ScoredAt     *time.Time      `json:"scored_at,omitempty"`
	Report       json.RawMessage `json:"report,omitempty"`
}

// CheckResult is one check's verdict on one replay.
type CheckResult struct {
	Check  string `json:"check"`
	Pass   bool   `json:"pass"`
	Reason string `json:"reason,omitempty"`
}
