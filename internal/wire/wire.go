// Package wire holds the types of the REST answers that are records
// (turns, rounds, seat events, audit rows, summaries) and the bounds of the
// lists that return them: the store reads them, the API writes them, the
// CLI decodes them, and none of the three reaches into another for them.
package wire

import (
	"encoding/json"
	"time"

	"github.com/crewlet/crewlet"
)

// AuditEntry is one row of the audit log.
type AuditEntry struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Role      string    `json:"role"`
	Action    string    `json:"action"`
	Target    string    `json:"target,omitempty"`
	Outcome   string    `json:"outcome"`
	Status    int       `json:"status"`
	Reason    string    `json:"reason,omitempty"`
	RequestID string    `json:"request_id"`
}

// Outcomes of an audited action.
const (
	AuditAllowed = "allowed"
	AuditDenied  = "denied"
	AuditFailed  = "failed"
)

// SeatEvent is one row of a seat's event history.
type SeatEvent struct {
	ID         int64          `json:"id"`
	Seat       string         `json:"seat"`
	Kind       string         `json:"kind"`
	EventID    string         `json:"event_id,omitempty"`
	Detail     map[string]any `json:"detail,omitempty"`
	RecordedAt time.Time      `json:"recorded_at"`
}

// MaxMemoryPage is the most items one page of a memory list holds.
const MaxMemoryPage = 200

// Summary is a compaction summary as stored.
type Summary struct {
	crewlet.ConversationSummary
	Seat         string    `json:"seat"`
	Conversation string    `json:"conversation"`
	Profile      string    `json:"profile"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	CreatedAt    time.Time `json:"created_at"`
}

// TurnRow is a turn's row: its triggers, what it offered the model, and how
// it ended.
type TurnRow struct {
	Seat    string `json:"seat"`
	WorkKey string `json:"work_key"`
	TurnID  string `json:"turn_id"`
	Epoch   int64  `json:"epoch"`
	// Mail is every trigger of the batch; Threads indexes the ones that need
	// an answer.
	Mail      []crewlet.Message `json:"mail"`
	Threads   []int             `json:"threads"`
	Tools     json.RawMessage   `json:"tools,omitempty"`
	MaxRounds int               `json:"max_rounds"`
	Status    string            `json:"status"`
	Note      string            `json:"note,omitempty"`
	StoppedBy string            `json:"stopped_by,omitempty"`
	Rounds    int               `json:"rounds"`
	// Profile is the profile the turn runs on: picked when it begins,
	// changed only when it fails over; "" before the pick.
	Profile   string    `json:"profile,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is nil while the turn runs.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// TurnMessage is one message of a turn's model conversation (thread).
type TurnMessage struct {
	Thread int `json:"thread"`
	// Key names the step that wrote the message ("user", "r3", "r3c1",
	// "note"), unique within the thread.
	Key     string              `json:"key"`
	Round   int                 `json:"round"`
	Message crewlet.ChatMessage `json:"message"`
	// Seq orders a turn's messages; set by the store.
	Seq       int64     `json:"seq"`
	CreatedAt time.Time `json:"created_at"`
}

// RoundRow is one model call of a turn: its charge and its charter receipt.
type RoundRow struct {
	Seat    string `json:"seat"`
	WorkKey string `json:"work_key"`
	Round   int    `json:"round"`
	Profile string `json:"profile"`
	// SystemSHA256 (hex) and SystemBytes identify the exact system prompt
	// sent, without keeping it.
	SystemSHA256 string `json:"system_sha256"`
	SystemBytes  int    `json:"system_bytes"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	// ContextBytes is the size of the context sent, the measure the token
	// estimate is made in; 0 when not known.
	ContextBytes int64 `json:"context_bytes"`
	// AnsweredModel is the model the provider said answered; "" when it
	// did not say.
	AnsweredModel string    `json:"answered_model,omitempty"`
	RecordedAt    time.Time `json:"recorded_at"`

	// The round's money receipt, frozen when it is written: CachedTokens
	// is the part of InputTokens read from the provider's prompt cache,
	// Model the model it was priced as, PriceVersion the price table's
	// version (or "org:..." for the org file's price) and NanoUSD the
	// amount in nano-dollars. Priced is false when no price was found: its
	// tokens count as unpriced, never as free.
	CachedTokens int64  `json:"cached_tokens"`
	Model        string `json:"model,omitempty"`
	PriceVersion string `json:"price_version,omitempty"`
	NanoUSD      int64  `json:"nano_usd"`
	Priced       bool   `json:"priced"`
	// Role is the seat's role when the round ran, for the spend by role;
	// it is not kept on the round.
	Role string `json:"-"`
}

// MaxTurns is the most turns one GET /seats/{handle}/turns lists.
const MaxTurns = 200

// TurnView is one turn as recorded: its row, its model conversation (every
// thread, in the order written) and the receipt and token charge of each
// model call.
type TurnView struct {
	Turn     TurnRow       `json:"turn"`
	Messages []TurnMessage `json:"messages"`
	Receipts []RoundRow    `json:"receipts"`
	// Approvals are the approvals its gated calls asked for, with their
	// decisions.
	Approvals []crewlet.Approval `json:"approvals,omitempty"`
	// Next, when set, is the from= that reads on: the messages were cut
	// short at the byte limit of one answer.
	Next int `json:"next,omitempty"`
}

// ScheduleFire is one fire of an org schedule as crewlet recorded it.
type ScheduleFire struct {
	FireTime time.Time `json:"fire_time"`
	Seat     string    `json:"seat"`
	EventID  string    `json:"event_id"`
	FiredAt  time.Time `json:"fired_at"`
	// HandledAt is when the seat's turn had answered the fire's message;
	// nil while it has not (or the seat is a person's).
	HandledAt *time.Time `json:"handled_at,omitempty"`
	// SkippedBefore is how many fires Temporal had skipped for overlap
	// when this one began.
	SkippedBefore int64 `json:"skipped_before"`
}

// MaxScheduleFires bounds the fires GET /schedules/{name} lists.
const MaxScheduleFires = 100

// Schedule is one org schedule as GET /schedules lists it: its config and
// what Temporal says of it.
type Schedule struct {
	Name string `json:"name"`
	// ID is its Temporal Schedule's id (`temporal schedule describe
	// --schedule-id ID`).
	ID            string `json:"id"`
	Cron          string `json:"cron,omitempty"`
	Every         string `json:"every,omitempty"`
	Timezone      string `json:"timezone"`
	To            string `json:"to"`
	Overlap       string `json:"overlap"`
	Jitter        string `json:"jitter,omitempty"`
	CatchupWindow string `json:"catchup_window"`
	Paused        bool   `json:"paused"`
	// Note is who paused or unpaused it last, and why.
	Note string `json:"note,omitempty"`
	// Fires counts the fires Temporal started; Skipped the fires it skipped
	// because the previous one still ran (overlap skip); MissedCatchup the
	// fires missed for longer than the catch-up window.
	Fires         int         `json:"fires"`
	Skipped       int         `json:"skipped"`
	MissedCatchup int         `json:"missed_catchup"`
	NextFires     []time.Time `json:"next_fires"`
	// Error says why Temporal could not be asked (the fields it fills are
	// then zero), or that the schedule is not there yet.
	Error string `json:"error,omitempty"`
}

// ScheduleRun is one fire Temporal started: the time it stood for, when it
// started and its workflow.
type ScheduleRun struct {
	ScheduledAt time.Time `json:"scheduled_at"`
	StartedAt   time.Time `json:"started_at"`
	WorkflowID  string    `json:"workflow_id"`
}

// ScheduleDetail is GET /schedules/{name}: the schedule, its recent and
// running fires as Temporal has them, and the fires crewlet recorded
// (where each went, whether it was answered, the skips before it).
type ScheduleDetail struct {
	Schedule
	Text    string         `json:"text"`
	Recent  []ScheduleRun  `json:"recent"`
	Running []string       `json:"running"`
	History []ScheduleFire `json:"history"`
}

// ScheduleBackfill is the body of POST /schedules/{name}/backfill: the
// fires between From and To run now, each once.
type ScheduleBackfill struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// ScheduleNote is the body of POST /schedules/{name}/pause and unpause.
type ScheduleNote struct {
	Reason string `json:"reason,omitempty"`
}

// ScheduleAction answers the schedule POSTs.
type ScheduleAction struct {
	Name   string `json:"name"`
	Action string `json:"action"`
	Paused bool   `json:"paused"`
}

// ApprovalDecision is the body of POST /approvals/{id}/approve and
// /deny: why, and, on an approve, whether to remember it.
type ApprovalDecision struct {
	Reason string `json:"reason"`
	// Remember, on an approve, lets the seat call the tool again without
	// asking until Until: with any arguments, or these only (Args).
	Remember *ApprovalRemember `json:"remember,omitempty"`
}

// ApprovalRemember is an approve-and-remember's grant.
type ApprovalRemember struct {
	Args  bool      `json:"args,omitempty"`
	Until time.Time `json:"until"`
}

// MaxApprovals bounds the approvals GET /approvals lists.
const MaxApprovals = 200
