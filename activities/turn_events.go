// The live stream of a turn (docs/architecture.md, "Live stream"): what
// each step of a turn tells its watchers. Events go to Redis through the
// process's emitter, never into workflow history; emitting never waits on
// Redis nor fails the step, and each event is written once under its
// identity, so a step re-run after a lost node adds no second copy.

package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/wire"
)

// flushWait bounds how long a step waits, before it returns, for its
// events to reach Redis: long enough for a healthy Redis, short enough
// that a stalled one costs a turn little.
const flushWait = 500 * time.Millisecond

// emit queues one event of a turn under its identity within the turn.
func (a *Turns) emit(handle, workKey, conversation, kind, identity string, data events.Data) {
	a.events.Emit(events.Event{
		Seat: handle, Conversation: conversation, Turn: crewlet.TurnWorkflowID(handle, workKey),
		Kind: kind, Time: time.Now(), Data: data,
	}, identity)
}

// flushEvents waits, briefly, for the step's events to be written.
func (a *Turns) flushEvents() { a.events.Flush(flushWait) }

// threadIdentity names a thread's event: its kind at a round, and a call
// or a piece when it has one.
func threadIdentity(kind string, thread, round int, rest ...any) string {
	id := fmt.Sprintf("%s|t%d|r%d", kind, thread, round)
	for _, r := range rest {
		id += fmt.Sprintf("|%v", r)
	}
	return id
}

// emitTurnStarted tells of a turn begun, with the conversations it answers.
func (a *Turns) emitTurnStarted(row wire.TurnRow) {
	a.emit(row.Seat, row.WorkKey, "", events.TurnStarted, events.TurnStarted, events.Data{
		Conversations: turnConversations(row), Triggers: len(row.Mail),
	})
}

// turnConversations are the conversations of a turn's threads, once each.
func turnConversations(row wire.TurnRow) []string {
	var out []string
	seen := map[string]bool{}
	for _, i := range row.Threads {
		if c := row.Mail[i].Conversation; c != "" && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// roundStarted tells of a round about to call the model, and returns what
// streams its answer: pieces of it (events.Deltas coalesces the provider's
// chunks), each under the activity's attempt, since a round re-run calls
// the model again. rounds are the thread's rounds recorded so far, whose
// tokens it tells.
func (a *Turns) roundStarted(ctx context.Context, in crewlet.ModelRoundInput, conversation, profile string, rounds []wire.RoundRow) *events.Deltas {
	var tokens int64
	for _, r := range rounds {
		tokens += r.InputTokens + r.OutputTokens
	}
	a.emit(in.Handle, in.WorkKey, conversation, events.RoundStarted, threadIdentity(events.RoundStarted, in.Thread, in.Round),
		events.Data{Thread: in.Thread, Round: in.Round, Profile: profile, TokensSoFar: tokens})
	attempt := 1
	if activity.IsActivity(ctx) {
		attempt = int(activity.GetInfo(ctx).Attempt)
	}
	seq := 0
	return events.NewDeltas(func(text string) {
		seq++
		a.emit(in.Handle, in.WorkKey, conversation, events.ModelDelta, threadIdentity(events.ModelDelta, in.Thread, in.Round, attempt, seq),
			events.Data{Thread: in.Thread, Round: in.Round, Attempt: attempt, Seq: seq, Text: crewlet.Clean(text)})
	})
}

// emitOutput tells of a round's recorded answer.
func (a *Turns) emitOutput(in crewlet.ModelRoundInput, conversation string, m crewlet.ChatMessage) {
	d := events.Data{Thread: in.Thread, Round: in.Round, Text: m.Content}
	for _, c := range m.ToolCalls {
		d.Tools = append(d.Tools, c.Name)
	}
	a.emit(in.Handle, in.WorkKey, conversation, events.ModelOutput, threadIdentity(events.ModelOutput, in.Thread, in.Round), d)
}

// emitTool tells of a tool call starting or finishing.
func (a *Turns) emitTool(kind string, in crewlet.ToolCallInput, conversation string, call crewlet.ToolCall, d events.Data) {
	d.Thread, d.Round, d.Call, d.Tool = in.Thread, in.Round, in.Call.Call, call.Name
	a.emit(in.Handle, in.WorkKey, conversation, kind, threadIdentity(kind, in.Thread, in.Round, in.Call.Call), d)
}

// emitApproval tells of a call held for a decision, or of the decision,
// once each per approval: an approval asked again is a new one.
func (a *Turns) emitApproval(in crewlet.ToolCallInput, conversation string, call crewlet.ToolCall, ap crewlet.Approval) {
	kind, d := events.ApprovalWaiting, events.Data{Approval: ap.ID, Approvers: ap.Approvers, Args: call.Args}
	if ap.Status != crewlet.ApprovalPending {
		kind, d = events.ApprovalDecided, events.Data{Approval: ap.ID, Decision: ap.Status, By: ap.DecidedBy, Reason: ap.Reason}
	}
	d.Thread, d.Round, d.Call, d.Tool = in.Thread, in.Round, in.Call.Call, call.Name
	a.emit(in.Handle, in.WorkKey, conversation, kind, threadIdentity(kind, in.Thread, in.Round, in.Call.Call, ap.ID), d)
}

// ticketOpened is the delegate tool's hook: the ticket a call opened.
func (a *Turns) ticketOpened(in crewlet.ToolCallInput, conversation string) func(crewlet.Ticket) {
	return func(t crewlet.Ticket) {
		a.emit(in.Handle, in.WorkKey, conversation, events.TicketOpened,
			threadIdentity(events.TicketOpened, in.Thread, in.Round, in.Call.Call),
			events.Data{Thread: in.Thread, Round: in.Round, Call: in.Call.Call, Ticket: t.ID, To: t.To, Phase: string(t.Phase)})
	}
}

// recordedOutcome is a recorded tool result's outcome.
func recordedOutcome(m crewlet.ChatMessage) string {
	if m.IsError {
		return "error"
	}
	return "ok"
}
