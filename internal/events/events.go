// Package events owns the live stream of what seats' turns do
// (docs/architecture.md, "Live stream"): the event model, the capped Redis
// stream each seat's events go to (and each conversation's), the emitter the
// turn's activities write through, which never blocks or fails a turn and
// writes each event once however often its activity runs, and the reader the
// API's Server-Sent Events read from. Events are not in workflow history.
package events

import (
	"encoding/json"
	"time"
)

// Kinds of event, in the order a turn produces them.
const (
	TurnStarted  = "turn_started"
	RoundStarted = "round_started"
	// ModelDelta is text as a streaming provider produces it; ModelOutput
	// the round's whole answer, one per round whatever the provider.
	ModelDelta   = "model_delta"
	ModelOutput  = "model_output"
	ToolStarted  = "tool_started"
	ToolFinished = "tool_finished"
	// ApprovalWaiting and ApprovalDecided frame a tool call held for a
	// person's decision: Data.Approval, Tool, Approvers; then Decision
	// (approved or denied), By (the decider, or "timeout" when on_timeout
	// decided) and Reason.
	ApprovalWaiting = "approval_waiting"
	ApprovalDecided = "approval_decided"
	// TicketOpened is a ticket the turn delegated; TicketSettled one it
	// waited on, or served, ending (Data.Phase).
	TicketOpened  = "ticket_opened"
	TicketSettled = "ticket_settled"
	AnswerSent    = "answer_sent"
	TurnFinished  = "turn_finished"
)

// Kinds lists every kind, for docs and clients.
var Kinds = []string{TurnStarted, RoundStarted, ModelDelta, ModelOutput, ToolStarted, ToolFinished,
	ApprovalWaiting, ApprovalDecided, TicketOpened, TicketSettled, AnswerSent, TurnFinished}

// Event is one thing a turn did. ID is its Redis stream id in the stream it
// was read from (the SSE id a client resumes from); a seat's stream and a
// conversation's give the same event different ids.
type Event struct {
	ID   string `json:"id,omitempty"`
	Seat string `json:"seat"`
	// Conversation is the conversation of the thread the event belongs to;
	// empty for the turn's own events (turn_started, turn_finished), whose
	// Data.Conversations lists the turn's.
	Conversation string `json:"conversation,omitempty"`
	// Turn is the turn's workflow id (turn/{handle}/{work_key}).
	Turn string    `json:"turn"`
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
	Data Data      `json:"data"`
}

// Data is what an event says; each kind sets the fields that concern it.
// Text, Args and Result are the transcript's own words: Redact takes them
// out for a principal who may not read the transcript.
type Data struct {
	Conversations []string `json:"conversations,omitempty"`
	Triggers      int      `json:"triggers,omitempty"`
	// Thread is the thread's index in its turn; Round counts from 1.
	Thread int `json:"thread,omitempty"`
	Round  int `json:"round,omitempty"`
	// Profile and TokensSoFar (the thread's tokens in this turn before the
	// round) are round_started's.
	Profile     string `json:"profile,omitempty"`
	TokensSoFar int64  `json:"tokens_so_far,omitempty"`
	// Attempt and Seq place a model_delta: the round's activity attempt
	// (a round re-run after a lost node streams again under a new one) and
	// the delta's place in it.
	Attempt int `json:"attempt,omitempty"`
	Seq     int `json:"seq,omitempty"`
	// Tools are the calls a model_output asked for, by name.
	Tools []string `json:"tools,omitempty"`
	// Call, Tool and Outcome (ok, error, unknown, waiting) are a tool
	// call's.
	Call    int    `json:"call,omitempty"`
	Tool    string `json:"tool,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	// Ticket and Phase are a ticket's; To who it went to, or who an answer
	// was sent to, InReplyTo the trigger the answer answers.
	Ticket    string `json:"ticket,omitempty"`
	Phase     string `json:"phase,omitempty"`
	To        string `json:"to,omitempty"`
	InReplyTo string `json:"in_reply_to,omitempty"`
	// Approval, Approvers, Decision, By and Reason are an approval's.
	Approval  string   `json:"approval,omitempty"`
	Approvers []string `json:"approvers,omitempty"`
	Decision  string   `json:"decision,omitempty"`
	By        string   `json:"by,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	// Status, Rounds and Note are turn_finished's.
	Status string `json:"status,omitempty"`
	Rounds int    `json:"rounds,omitempty"`
	Note   string `json:"note,omitempty"`

	// Text is model output (delta or whole) or an answer's text; Args a
	// tool call's arguments and Result its result.
	Text   string          `json:"text,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	Result string          `json:"result,omitempty"`
	// Redacted says Text, Args and Result were taken out for the reader.
	Redacted bool `json:"redacted,omitempty"`
}

// Redact is ev as a principal who may not read the seat's transcript sees
// it: what happened, without the words.
func Redact(ev Event) Event {
	d := &ev.Data
	if d.Text != "" || len(d.Args) > 0 || d.Result != "" {
		d.Text, d.Args, d.Result = "", nil, ""
		d.Redacted = true
	}
	return ev
}
