package crewlet

import (
	"strings"
	"time"
)

// TurnWorkflowID is the ID of the turn over one trigger set: one trigger set
// cannot start two turns at once.
func TurnWorkflowID(handle, workKey string) string {
	return "turn/" + handle + "/" + workKey
}

// ParseTurnID splits a turn id, "turn/{handle}/{work_key}" (the turn's
// workflow id), into its seat and work key. The "turn/" prefix may be left
// off.
func ParseTurnID(id string) (handle, workKey string, ok bool) {
	rest := strings.TrimPrefix(id, "turn/")
	handle, workKey, ok = strings.Cut(rest, "/")
	if !ok || !ValidName(handle) || workKey == "" || strings.Contains(workKey, "/") {
		return "", "", false
	}
	return handle, workKey, true
}

// ThreadKey is the key a turn's conversation answering one trigger is
// recorded under: the work key of that trigger alone. A trigger that comes
// back in another batch (its turn broke before the ledger recorded it)
// resumes its conversation instead of starting it again.
func ThreadKey(eventID string) string { return WorkKey([]string{eventID}) }

// StopTurnRequest says who stopped a turn and why.
type StopTurnRequest struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// AcquireProfileInput asks for a profile for a turn run.
type AcquireProfileInput struct {
	Tenure
	TurnID  string `json:"turn_id"`
	WorkKey string `json:"work_key"`
}

// AcquireProfileOutput is the profile the turn runs on, or the hold that
// says why no profile of its pool can take it now.
type AcquireProfileOutput struct {
	Profile string       `json:"profile,omitempty"`
	Hold    *ProfileHold `json:"hold,omitempty"`
}

// ReleaseProfileInput gives back a turn run's profile slot.
type ReleaseProfileInput struct {
	Tenure
	TurnID string `json:"turn_id"`
}

// DeadLetterMailInput dead-letters a seat's entries with the reason, fenced
// by epoch.
type DeadLetterMailInput struct {
	Tenure
	StreamIDs []string `json:"stream_ids"`
	Reason    string   `json:"reason"`
}

// CheckBudgetInput names the seat whose budget hold to check.
type CheckBudgetInput struct {
	Handle string `json:"handle"`
}

// TurnStatus is how a turn ended.
type TurnStatus string

// How a turn ends. The seat acks the triggers of a done, stopped or failed
// turn; a fenced turn leaves them for the next tenure, a held one for the
// next budget window and an interrupted one for the turn the seat runs at
// once over them and the mail that interrupted it.
const (
	TurnDone    TurnStatus = "done"
	TurnStopped TurnStatus = "stopped"
	TurnFailed  TurnStatus = "failed"
	TurnFenced  TurnStatus = "fenced"
	TurnHeld    TurnStatus = "held"
	// TurnInterrupted: new mail in a conversation the turn answered
	// stopped it at a round boundary (on_busy: interrupt).
	TurnInterrupted TurnStatus = "interrupted"
)

// Acked reports whether the seat acks the triggers of a turn that ended so.
func (s TurnStatus) Acked() bool {
	return s == TurnDone || s == TurnStopped || s == TurnFailed
}

// TurnInput starts a turn: ids only.
type TurnInput struct {
	Tenure
	HostQueue string    `json:"host_queue"`
	TurnID    string    `json:"turn_id"`
	WorkKey   string    `json:"work_key"`
	Mail      []MailRef `json:"mail"`
	// HeartbeatTimeout is the host heartbeat timeout; tool calls use it to
	// notice a lost host. 0 means 3s.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// Ack are the seat's entries the turn acks as it finishes: its
	// triggers and those the seat skipped. Only a turn run inline at
	// node-liveness 6 or later is given them.
	Ack []string `json:"ack,omitempty"`
}

// TurnOutput says how a turn ended and what it did.
type TurnOutput struct {
	Status TurnStatus `json:"status"`
	// Answered are the event ids the turn ran for.
	Answered []string `json:"answered,omitempty"`
	Replies  int      `json:"replies"`
	Rounds   int      `json:"rounds"`
	// Hold is the budget cap that held a TurnHeld turn.
	Hold *BudgetHold `json:"hold,omitempty"`
	// Note says why a turn stopped or failed.
	Note string `json:"note,omitempty"`
	// Acked says the turn acked its seat's entries as it finished
	// (TurnInput.Ack), so the seat does not.
	Acked bool `json:"acked,omitempty"`
}

// BeginTurnInput opens a turn: fence, budget check, record the triggers.
type BeginTurnInput struct {
	Tenure
	TurnID  string    `json:"turn_id"`
	WorkKey string    `json:"work_key"`
	Mail    []MailRef `json:"mail"`
	// Acquire asks a turn that will call a model to take its profile slot
	// too (AcquireProfile, in the same step), answered in Profile.
	Acquire bool `json:"acquire,omitempty"`
}

// BeginTurnOutput is what the turn needs to run its rounds.
type BeginTurnOutput struct {
	// Threads is the number of triggers that need an answer; each is one
	// model conversation of the turn, answered in order.
	Threads   int `json:"threads"`
	MaxRounds int `json:"max_rounds"`
	// Reflect asks for a post-turn reflection once the turn answered.
	Reflect bool `json:"reflect,omitempty"`
	// Hold is set when a budget cap is reached: the turn does not start.
	Hold *BudgetHold `json:"hold,omitempty"`
	// Profile is AcquireProfile's answer, when the input asked for it and
	// the turn has threads.
	Profile *AcquireProfileOutput `json:"profile,omitempty"`
	// ThreadKeys are the keys the turn's threads are recorded under, in
	// thread order (ModelRoundInput.ThreadKey).
	ThreadKeys []string `json:"thread_keys,omitempty"`
}

// ModelRoundInput is one model call of a turn: round Round (from 1) of the
// conversation answering thread Thread.
type ModelRoundInput struct {
	Tenure
	WorkKey string `json:"work_key"`
	Thread  int    `json:"thread"`
	Round   int    `json:"round"`
	// TurnID and Profile say which turn run asks and the profile it holds
	// a slot of; "" for a turn begun before profile pools, which runs on
	// its role's first profile (COMPAT(profile-pools@1)).
	TurnID  string `json:"turn_id,omitempty"`
	Profile string `json:"profile,omitempty"`
	// ThreadKey is the key the thread is recorded under (ThreadKey of its
	// trigger), from BeginTurnOutput: with it the round reads the turn and
	// the thread in one round trip. "" from a turn that does not know it
	// (begun by an older build); the round then reads the thread after the
	// turn.
	ThreadKey string `json:"thread_key,omitempty"`
}

// ToolCallRef names one tool call a model round asked for; its arguments
// stay in Postgres.
type ToolCallRef struct {
	Call     int    `json:"call"`
	Name     string `json:"name"`
	ReadOnly bool   `json:"read_only"`
}

// ModelRoundOutput is the model's answer: tool calls to make, or the end of
// the thread.
type ModelRoundOutput struct {
	Calls  []ToolCallRef `json:"calls,omitempty"`
	Tokens int64         `json:"tokens"`
	// Failed says why the thread ended without an answer (its trigger does
	// not fit the context budget, or the model answered nothing twice); the
	// sender was told, and the turn is recorded failed.
	Failed string `json:"failed,omitempty"`
	// Ended, when set, says the thread stopped without an answer because
	// the ticket it serves ended meanwhile (cancelled, expired, failed):
	// no failure of the turn, which is recorded stopped when every thread
	// ended so. By is the ticket, Reason what became of it. Failed says
	// the same for a turn of a build that does not read Ended.
	Ended *StopTurnRequest `json:"ended,omitempty"`
}

// ToolCallInput is one tool call of a round.
type ToolCallInput struct {
	Tenure
	WorkKey string      `json:"work_key"`
	Thread  int         `json:"thread"`
	Round   int         `json:"round"`
	Call    ToolCallRef `json:"call"`
}

// TicketSignal names the ticket that changed.
type TicketSignal struct {
	Ticket string `json:"ticket"`
}

// TicketNoteSignal is the payload of a person's ticket_note signal: the id
// of the ticket that changed, as a bare JSON string.
type TicketNoteSignal string

// Kinds of ticket wait.
const (
	// WaitSettle waits for a delegated ticket to settle, fail or ask.
	WaitSettle = "settle"
	// WaitAnswer waits for the answer to the serving turn's question.
	WaitAnswer = "answer"
)

// TicketWait asks the turn to wait durably (a timer and a signal, nothing
// held open) before the tool call has its result.
type TicketWait struct {
	Ticket string        `json:"ticket"`
	Kind   string        `json:"kind"`
	For    time.Duration `json:"for"`
}

// ResolveWaitInput ends a turn's wait on a ticket and records the tool
// call's result from the ticket as it stands.
type ResolveWaitInput struct {
	Tenure
	WorkKey string      `json:"work_key"`
	Thread  int         `json:"thread"`
	Round   int         `json:"round"`
	Call    ToolCallRef `json:"call"`
	Wait    TicketWait  `json:"wait"`
	// TimedOut is set when the wait's time ran out; StoppedBy when a
	// person stopped the turn while it waited.
	TimedOut  bool   `json:"timed_out,omitempty"`
	StoppedBy string `json:"stopped_by,omitempty"`
}

// ToolCallOutput says what a tool call did.
type ToolCallOutput struct {
	// Wait, when set, means the call has no result yet: the turn waits on
	// the ticket, then records it with ResolveWait.
	Wait *TicketWait `json:"wait,omitempty"`
	// Approval, when set, means the call waits for a person's decision
	// before it runs: the turn waits, then makes the call again.
	Approval *ApprovalWait `json:"approval,omitempty"`
	IsError  bool          `json:"is_error"`
	// Wrote is true when a write may have reached outside (the tool is not
	// read-only and was called, or its outcome is unknown).
	Wrote bool `json:"wrote"`
	// Unknown is true when an earlier attempt started and left no result.
	Unknown bool `json:"unknown"`
}

// FinishTurnInput closes a turn: record its transcript, deliver its replies,
// record the ledger.
type FinishTurnInput struct {
	Tenure
	TurnID  string     `json:"turn_id"`
	WorkKey string     `json:"work_key"`
	Status  TurnStatus `json:"status"`
	Rounds  int        `json:"rounds"`
	// Note says why the turn stopped or failed; it is recorded in the
	// transcript and sent to whoever the turn was answering.
	Note string `json:"note,omitempty"`
	// StoppedBy names who stopped a TurnStopped turn.
	StoppedBy string `json:"stopped_by,omitempty"`
	// Release gives back the turn run's profile slot once the turn is
	// recorded (ReleaseProfile, in the same step).
	Release bool `json:"release,omitempty"`
	// Ack acks these mailbox entries once the turn is recorded (AckMail,
	// in the same step): the turn's triggers and those its seat skipped.
	Ack []string `json:"ack,omitempty"`
	// ThreadKeys are BeginTurnOutput's, so the turn and its threads are
	// read in one round trip; nil reads each thread after the turn.
	ThreadKeys []string `json:"thread_keys,omitempty"`
}

// ReflectInput asks for the post-turn reflection of a finished turn.
type ReflectInput struct {
	Tenure
	TurnID  string `json:"turn_id"`
	WorkKey string `json:"work_key"`
	// Profile is the profile the turn ran on, as in ModelRoundInput.
	Profile string `json:"profile,omitempty"`
}

// FinishTurnOutput says what the turn answered.
type FinishTurnOutput struct {
	Answered []string `json:"answered"`
	Replies  int      `json:"replies"`
	// Acked says the input's Ack entries were acked.
	Acked bool `json:"acked,omitempty"`
}
