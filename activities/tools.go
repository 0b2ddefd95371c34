package activities

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/tracing"
	"github.com/crewlet/crewlet/internal/wire"
)

// ToolCall makes one tool call of a round, on the seat's host where its MCP
// servers run. The call carries the idempotency key {work_key}:{round}:{call},
// the work key being its thread's (the work key of the thread's trigger).
// A call that already has a recorded result returns it. A write is attempted
// once: a write that started before and left no result is not called again
// but answered "outcome unknown", and so is one whose call failed in a way
// that may have reached the server.
func (a *Turns) ToolCall(ctx context.Context, in crewlet.ToolCallInput) (out crewlet.ToolCallOutput, err error) {
	release, err := a.host.toolSlot(ctx)
	if err != nil {
		return out, err
	}
	defer release()
	stop := make(chan struct{})
	defer close(stop)
	go heartbeatWhile(ctx, a.host.Beat, stop)

	out.Wrote = !in.Call.ReadOnly
	pc, err := a.pendingCall(ctx, in.Handle, in.WorkKey, in.Thread, in.Round, in.Call.Call)
	if err != nil {
		return out, err
	}
	defer a.flushEvents()
	conv := pc.trigger.Conversation
	if pc.done != nil {
		out.IsError = pc.done.Message.IsError
		// Told again in case the node that recorded it was lost before
		// telling it; written once.
		a.emitTool(events.ToolFinished, in, conv, crewlet.ToolCall{Name: in.Call.Name},
			events.Data{Outcome: recordedOutcome(pc.done.Message), Result: pc.done.Message.Content})
		return out, nil
	}
	trigger, thread, call := pc.trigger, pc.thread, pc.call
	if refused, err := a.authorize(ctx, in, pc, &out); refused || err != nil {
		return out, err
	}
	if gated, err := a.gate(ctx, in, thread, trigger, call, &out); gated || err != nil {
		return out, err
	}
	a.emitTool(events.ToolStarted, in, conv, call, events.Data{Args: call.Args})
	if out.Wrote {
		first, err := a.store.StartToolCall(ctx, in.Handle, thread, in.Round, in.Call.Call, call.Name, false)
		if err != nil {
			return out, err
		}
		if !first && !firstparty.Keyed(call.Name) {
			out.Unknown, out.IsError = true, true
			a.metrics.ToolCall(toolServer(call.Name), "unknown")
			a.emitTool(events.ToolFinished, in, conv, call, events.Data{Outcome: "unknown", Result: outcomeUnknown})
			return out, a.recordResult(ctx, in, thread, call, tools.Result{Text: outcomeUnknown, IsError: true})
		}
	}
	idempotencyKey := callKey(thread, in.Round, in.Call.Call)
	spanCtx, span := tracing.StartToolCall(ctx, call.Name, call.ID)
	res, wait, err := a.callTool(spanCtx, firstparty.Call{
		Handle: in.Handle, TurnID: crewlet.TurnWorkflowID(in.Handle, in.WorkKey), Trigger: trigger,
		Name: call.Name, Args: call.Args, Key: idempotencyKey, Opened: a.ticketOpened(in, conv),
	})
	tracing.EndToolCall(span, res.IsError, err)
	if wait != nil {
		// No result yet: the turn waits on the ticket and ResolveWait
		// records it.
		out.Wait = wait
		return out, nil
	}
	if err != nil {
		if in.Call.ReadOnly {
			a.metrics.ToolCall(toolServer(call.Name), "error")
			return out, err // retried by the turn's retry policy
		}
		a.log.Warn("tool_outcome_unknown", "seat", in.Handle, "tool", call.Name, "key", idempotencyKey, "error", err)
		res = tools.Result{Text: outcomeUnknown + " (" + err.Error() + ")", IsError: true}
		out.Unknown = true
	}
	crashPoint(testhook.AfterToolCall, in.Handle)
	out.IsError = res.IsError
	a.metrics.ToolCall(toolServer(call.Name), toolOutcome(out))
	if err := a.recordResult(ctx, in, thread, call, res); err != nil {
		return out, err
	}
	a.emitTool(events.ToolFinished, in, conv, call, events.Data{Outcome: toolOutcome(out), Result: crewlet.Clean(res.Text)})
	if out.Wrote {
		if err := a.store.FinishToolCall(ctx, in.Handle, thread, in.Round, in.Call.Call); err != nil {
			a.log.Warn("tool_call_unrecorded", "seat", in.Handle, "key", idempotencyKey, "error", err)
		}
	}
	return out, nil
}

// authorize holds a call to its seat's authority before anything else
// (docs/operations.md, "Authentication and authority"): a tool the role's
// may.tools does not allow, or a call past the turn's caps, is refused
// with why as its result, and audited. Every call the caps admit counts,
// whatever comes of it; the same call again counts once.
func (a *Turns) authorize(ctx context.Context, in crewlet.ToolCallInput, pc pendingCall, out *crewlet.ToolCallOutput) (refused bool, err error) {
	org := a.org.Now()
	name := pc.call.Name
	c := firstparty.Call{Handle: in.Handle, Name: name, Key: callKey(pc.thread, in.Round, in.Call.Call)}
	var target, reason string
	if err := authority.Check(org, authority.CallTool, authority.Request{Seat: in.Handle, Target: name}); err != nil {
		reason = fmt.Sprintf("%s refused: %s", name, crewlet.ErrorMessage(err))
	} else {
		err := a.store.AdmitToolCall(ctx, store.ToolCallAdmission{
			Seat: in.Handle, Turn: in.WorkKey, Threads: pc.threads, Thread: pc.thread, Round: in.Round, Call: in.Call.Call,
			Name: name, ReadOnly: in.Call.ReadOnly, Messages: firstparty.Messages,
		}, func(calls, messages int) error {
			return org.TurnCaps(in.Handle, slices.Contains(firstparty.Messages, name), calls, messages)
		})
		switch crewlet.ErrorCode(err) {
		case "":
			return false, nil
		case crewlet.EFORBIDDEN:
			target, reason = "turn="+crewlet.TurnWorkflowID(in.Handle, in.WorkKey), fmt.Sprintf("%s refused: %s", name, crewlet.ErrorMessage(err))
		default:
			return true, err
		}
	}
	res := a.firstParty().Refuse(ctx, c, target, reason)
	out.IsError, out.Wrote = true, false
	a.metrics.ToolCall(toolServer(name), "denied")
	return true, a.recordResult(ctx, in, pc.thread, pc.call, res)
}

// gate asks the approval gate about a call before it runs: a call an
// approval policy names and no grant covers waits for its decision
// (out.Approval), and a denied one gets the denial as its result. gated
// says the call is not to run now.
func (a *Turns) gate(ctx context.Context, in crewlet.ToolCallInput, thread string, trigger crewlet.Message, call crewlet.ToolCall, out *crewlet.ToolCallOutput) (gated bool, err error) {
	if a.approvals == nil {
		return false, nil
	}
	conversation := trigger.Conversation
	// The turn serves a ticket when a ticket's request started it; a
	// notice or a question names a ticket the seat delegated.
	var serving string
	if trigger.Type == crewlet.MessageTicket {
		serving = trigger.Ticket
	}
	v, err := a.approvals.Gate(ctx, approvals.Call{
		Tenure: in.Tenure, TurnID: crewlet.TurnWorkflowID(in.Handle, in.WorkKey), CallKey: callKey(thread, in.Round, in.Call.Call),
		Conversation: conversation, Ticket: serving, Tool: call.Name, Args: call.Args,
	})
	if err == nil && v.Approval.ID != "" {
		a.emitApproval(in, conversation, call, v.Approval)
	}
	switch {
	case err != nil:
		return true, Fence(a.log, in.Handle, in.Epoch, err)
	case v.Wait != nil:
		out.Approval, out.Wrote = v.Wait, false
		return true, nil
	case v.Denied != "":
		out.IsError, out.Wrote = true, false
		a.metrics.ToolCall(toolServer(call.Name), "denied")
		return true, a.recordResult(ctx, in, thread, call, tools.Result{Text: v.Denied, IsError: true})
	case v.By != "":
		a.log.Info("tool_call_approved", "seat", in.Handle, "tool", call.Name, "by", v.By)
	}
	return false, nil
}

// EndApproval decides an approval its turn stopped waiting for, the
// time having run out or a person having stopped the turn; the turn then
// asks for the call again and the gate applies the decision.
func (a *Turns) EndApproval(ctx context.Context, in crewlet.EndApprovalInput) error {
	return Fence(a.log, in.Handle, in.Epoch, a.approvals.Resolve(ctx, in))
}

// toolServer is the server a tool belongs to, for metrics: the MCP
// server's name of a tool offered as SERVER__TOOL, crewlet for its own.
func toolServer(name string) string {
	if server, _, ok := strings.Cut(name, "__"); ok {
		return server
	}
	return "crewlet"
}

// toolOutcome is a finished call's outcome, for metrics.
func toolOutcome(out crewlet.ToolCallOutput) string {
	switch {
	case out.Unknown:
		return "unknown"
	case out.IsError:
		return "error"
	}
	return "ok"
}

// pendingCall is a tool call of a turn's thread as recorded: the thread's
// trigger and key, the call the round asked for, and its result when one is
// recorded already.
type pendingCall struct {
	trigger crewlet.Message
	thread  string
	// threads are the keys of every thread of the turn.
	threads []string
	call    crewlet.ToolCall
	done    *wire.TurnMessage
}

func (a *Turns) pendingCall(ctx context.Context, handle, workKey string, threadIndex, round, callIndex int) (pendingCall, error) {
	turn, err := a.store.Turn(ctx, handle, workKey)
	if err != nil {
		return pendingCall{}, err
	}
	trigger, thread, err := threadOf(turn, threadIndex)
	if err != nil {
		return pendingCall{}, err
	}
	msgs, err := a.store.TurnMessages(ctx, handle, thread, 0)
	if err != nil {
		return pendingCall{}, err
	}
	pc := pendingCall{trigger: trigger, thread: thread}
	for i := range turn.Threads {
		_, key, err := threadOf(turn, i)
		if err != nil {
			return pendingCall{}, err
		}
		pc.threads = append(pc.threads, key)
	}
	if done, ok := findKey(msgs, resultKey(round, callIndex)); ok {
		pc.done = &done
		return pc, nil
	}
	asked, ok := findKey(msgs, roundKey(round))
	if !ok || callIndex >= len(asked.Message.ToolCalls) {
		return pc, fmt.Errorf("thread %s of %s has no call %d in round %d", thread, handle, callIndex, round)
	}
	pc.call = asked.Message.ToolCalls[callIndex]
	return pc, nil
}

func (a *Turns) recordResult(ctx context.Context, in crewlet.ToolCallInput, thread string, call crewlet.ToolCall, res tools.Result) error {
	_, err := a.store.AppendTurnMessage(ctx, in.Handle, thread, wire.TurnMessage{
		Key: resultKey(in.Round, in.Call.Call), Round: in.Round,
		Message: crewlet.ChatMessage{Role: "tool", ToolCallID: call.ID, Content: crewlet.Clean(res.Text), IsError: res.IsError},
	})
	return err
}

// callKey is a tool call's idempotency key, {work_key}:{round}:{call}, the
// work key being its thread's.
func callKey(thread string, round, call int) string {
	return fmt.Sprintf("%s:%d:%d", thread, round, call)
}

// firstParty is the seat's first-party tools, on the turn's services.
func (a *Turns) firstParty() firstparty.Tools {
	return firstparty.Tools{Store: a.store, Org: a.org, Delivery: a.delivery, Tickets: a.tickets, Now: a.Now, Log: a.log}
}

// callTool runs a first-party tool or an MCP tool. A call refused before it
// reached anything (unknown tool, bad arguments) is an error result the
// model sees; an error return means the outcome is unknown.
func (a *Turns) callTool(ctx context.Context, c firstparty.Call) (tools.Result, *crewlet.TicketWait, error) {
	if firstparty.Has(c.Name) {
		return a.firstParty().Run(ctx, c)
	}
	session := a.host.session(c.Handle)
	if session == nil {
		return tools.Refused(fmt.Sprintf("no tool named %q", c.Name)), nil, nil
	}
	res, err := session.Call(ctx, c.Name, c.Args, c.Key)
	if err != nil && crewlet.ErrorCode(err) != crewlet.EINTERNAL {
		// Refused here, before anything was sent.
		return tools.Refused(crewlet.ErrorMessage(err)), nil, nil
	}
	return res, nil, err
}

// ResolveWait ends a turn's wait on a ticket (it changed, the wait's time ran
// out, or a person stopped the turn) and records the waiting call's result
// from the ticket as it stands. Ending the wait and reading the ticket are
// one statement, ordered against a settle by the row's lock, so the outcome
// reaches the turn here or the seat by a notice, never neither.
func (a *Turns) ResolveWait(ctx context.Context, in crewlet.ResolveWaitInput) (err error) {
	pc, err := a.pendingCall(ctx, in.Handle, in.WorkKey, in.Thread, in.Round, in.Call.Call)
	if err != nil || pc.done != nil {
		return err
	}
	thread, call := pc.thread, pc.call
	turnID := crewlet.TurnWorkflowID(in.Handle, in.WorkKey)
	defer a.flushEvents()
	ref := crewlet.ToolCallInput{Tenure: crewlet.Tenure{Handle: in.Handle}, WorkKey: in.WorkKey, Thread: in.Thread, Round: in.Round, Call: in.Call}
	var text string
	switch in.Wait.Kind {
	case crewlet.WaitAnswer:
		ticket, err := a.store.StopAsking(ctx, in.Wait.Ticket, callKey(thread, in.Round, in.Call.Call))
		if err != nil {
			return err
		}
		text = a.firstParty().AnswerText(ticket, in.TimedOut)
	default:
		ticket, err := a.store.StopWaiting(ctx, in.Wait.Ticket, turnID)
		if err != nil {
			return err
		}
		text = firstparty.SettleText(ticket)
		if ticket.Phase != crewlet.TicketPending && ticket.Phase != crewlet.TicketAsking {
			a.emit(in.Handle, in.WorkKey, pc.trigger.Conversation, events.TicketSettled,
				threadIdentity(events.TicketSettled, in.Thread, in.Round, in.Call.Call),
				events.Data{Thread: in.Thread, Round: in.Round, Call: in.Call.Call, Ticket: ticket.ID, Phase: string(ticket.Phase)})
		}
		if in.TimedOut && ticket.Phase == crewlet.TicketPending {
			text = fmt.Sprintf("Ticket %s to %s is still pending after %s (tickets.max_wait); you will get a notice when it ends.", ticket.ID, ticket.To, in.Wait.For)
		}
	}
	if in.StoppedBy != "" {
		text = fmt.Sprintf("Stopped by %s while waiting. %s", in.StoppedBy, text)
	}
	if err := a.recordResult(ctx, ref, thread, call, tools.Result{Text: text}); err != nil {
		return err
	}
	a.emitTool(events.ToolFinished, ref, pc.trigger.Conversation, call, events.Data{Outcome: "ok", Result: crewlet.Clean(text)})
	if err := a.store.FinishToolCall(ctx, in.Handle, thread, in.Round, in.Call.Call); err != nil {
		a.log.Warn("tool_call_unrecorded", "seat", in.Handle, "ticket", in.Wait.Ticket, "error", err)
	}
	return nil
}
