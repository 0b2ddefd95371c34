package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/control"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/tracing"
)

// First-party tools every seat has, next to its role's MCP tools. Their
// names have no "__", so they cannot collide with a namespaced MCP tool.
const (
	toolSendMessage = "send_message"
	toolDiaryWrite  = "diary_write"
	toolRecall      = "recall"
	toolDelegate    = "delegate"
	toolTickets     = "tickets"
	toolAsk         = "ask"
	toolAnswer      = "answer"
)

// keyedTools are the first-party writes keyed on the call's idempotency
// key: calling one again does nothing more, so a call whose first attempt
// left no result is made again instead of being reported unknown.
var keyedTools = map[string]bool{toolSendMessage: true, toolDiaryWrite: true, toolDelegate: true, toolAsk: true, toolAnswer: true}

// recallLimit is the most memories one recall returns.
const recallLimit = 10

func firstPartyTools() []crewlet.ToolSpec {
	return []crewlet.ToolSpec{
		{
			Name:        toolSendMessage,
			Description: "Send a message to another seat's mailbox. It starts a new conversation; the seat answers it in a later turn.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","description":"the handle of the seat"},"text":{"type":"string","description":"the message"}},"required":["to","text"]}`),
		},
		{
			Name:        toolDiaryWrite,
			Description: "Write an entry in your diary, to recall in later turns. Writing the same text twice keeps one entry.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"the entry"}},"required":["text"]}`),
		},
		{
			Name: toolDelegate,
			Description: "Hand a task to another seat as a ticket. `to` is a seat handle, or role:NAME for the seat of that role with the least open work. " +
				"With wait: true this call returns when the ticket is done, fails or the seat asks you a question (then answer it with answer). " +
				"With wait: false it returns the ticket id at once, and a notice starts a new turn when the ticket ends. " +
				"When a task comes to you as a ticket, your final answer is its reply.",
			Schema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","description":"a seat handle or role:NAME"},"task":{"type":"string","description":"what to do, with everything needed to do it"},"wait":{"type":"boolean","description":"wait for the reply (default false)"}},"required":["to","task"]}`),
		},
		{
			Name: toolAsk,
			Description: "Only while you serve a ticket: ask the seat or person that gave it to you a question, and wait for the answer. " +
				"If no answer comes in time you are told so: decide yourself and go on.",
			Schema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`),
		},
		{
			Name:        toolAnswer,
			Description: "Answer the question asked on a ticket you delegated. With wait: true, go on waiting for the ticket's reply.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"string"},"text":{"type":"string"},"wait":{"type":"boolean","description":"wait for the reply after answering (default false)"}},"required":["ticket","text"]}`),
		},
		{
			Name:        toolTickets,
			Description: "List your open tickets: those you delegated and those you serve, with their phase.",
			Schema:      json.RawMessage(`{"type":"object","properties":{}}`),
			ReadOnly:    true,
		},
		{
			Name:        toolRecall,
			Description: "Search your diary and the summaries of your past turns for entries containing every word of the query, newest first.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"words to look for; empty returns the newest entries"}}}`),
			ReadOnly:    true,
		},
	}
}

// ToolCall makes one tool call of a round, on the seat's host where its MCP
// servers run. The call carries the idempotency key {work_key}:{round}:{call},
// the work key being its thread's (the work key of the thread's trigger).
// A call that already has a recorded result returns it. A write is attempted
// once: a write that started before and left no result is not called again
// but answered "outcome unknown", and so is one whose call failed in a way
// that may have reached the server.
func (a *Turns) ToolCall(ctx context.Context, in crewlet.ToolCallInput) (out crewlet.ToolCallOutput, err error) {
	defer recoverPanic(a.log, in.Handle, "ToolCall", &err)
	if err := a.host.CheckHosted(in.Handle, in.Epoch); err != nil {
		return out, err
	}
	if err := a.store.CheckEpoch(ctx, in.Handle, in.Epoch); err != nil {
		return out, fence(a.log, in.Handle, in.Epoch, err)
	}
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
	if pc.done != nil {
		out.IsError = pc.done.Message.IsError
		return out, nil
	}
	trigger, thread, call := pc.trigger, pc.thread, pc.call
	if out.Wrote {
		first, err := a.store.StartToolCall(ctx, in.Handle, thread, in.Round, in.Call.Call, call.Name, false)
		if err != nil {
			return out, err
		}
		if !first && !keyedTools[call.Name] {
			out.Unknown, out.IsError = true, true
			a.Metrics.ToolCall(toolServer(call.Name), "unknown")
			return out, a.recordResult(ctx, in, thread, call, tools.Result{Text: outcomeUnknown, IsError: true})
		}
	}
	idempotencyKey := callKey(thread, in.Round, in.Call.Call)
	spanCtx, span := tracing.StartToolCall(ctx, call.Name, call.ID)
	res, wait, err := a.callTool(spanCtx, toolContext{handle: in.Handle, turnID: crewlet.TurnWorkflowID(in.Handle, in.WorkKey), trigger: trigger}, call, idempotencyKey)
	tracing.EndToolCall(span, res.IsError, err)
	if wait != nil {
		// No result yet: the turn waits on the ticket and ResolveWait
		// records it.
		out.Wait = wait
		return out, nil
	}
	if err != nil {
		if in.Call.ReadOnly {
			a.Metrics.ToolCall(toolServer(call.Name), "error")
			return out, err // retried by the turn's retry policy
		}
		a.log.Warn("tool_outcome_unknown", "seat", in.Handle, "tool", call.Name, "key", idempotencyKey, "error", err)
		res = tools.Result{Text: outcomeUnknown + " (" + err.Error() + ")", IsError: true}
		out.Unknown = true
	}
	crashPoint(testhook.AfterToolCall, in.Handle)
	out.IsError = res.IsError
	a.Metrics.ToolCall(toolServer(call.Name), toolOutcome(out))
	if err := a.recordResult(ctx, in, thread, call, res); err != nil {
		return out, err
	}
	if out.Wrote {
		if err := a.store.FinishToolCall(ctx, in.Handle, thread, in.Round, in.Call.Call); err != nil {
			a.log.Warn("tool_call_unrecorded", "seat", in.Handle, "key", idempotencyKey, "error", err)
		}
	}
	return out, nil
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
	call    crewlet.ToolCall
	done    *store.TurnMessage
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
	_, err := a.store.AppendTurnMessage(ctx, in.Handle, thread, store.TurnMessage{
		Key: resultKey(in.Round, in.Call.Call), Round: in.Round,
		Message: crewlet.ChatMessage{Role: "tool", ToolCallID: call.ID, Content: crewlet.Clean(res.Text), IsError: res.IsError},
	})
	return err
}

// callTool runs a first-party tool or an MCP tool. A call refused before it
// reached anything (unknown tool, bad arguments) is an error result the
// model sees; an error return means the outcome is unknown.
// callKey is a tool call's idempotency key, {work_key}:{round}:{call}, the
// work key being its thread's.
func callKey(thread string, round, call int) string {
	return fmt.Sprintf("%s:%d:%d", thread, round, call)
}

// toolContext is what a first-party tool knows of the call: the seat, the
// turn (a waiter's identity) and the trigger of the thread it serves.
type toolContext struct {
	handle  string
	turnID  string
	trigger crewlet.Message
}

func (a *Turns) callTool(ctx context.Context, tc toolContext, call crewlet.ToolCall, idempotencyKey string) (tools.Result, *crewlet.TicketWait, error) {
	switch call.Name {
	case toolDelegate:
		return a.delegate(ctx, tc, call.Args, idempotencyKey)
	case toolAsk:
		return a.ask(ctx, tc, call.Args, idempotencyKey)
	case toolAnswer:
		return a.answer(ctx, tc, call.Args)
	}
	res, err := a.callPlainTool(ctx, tc, call, idempotencyKey)
	return res, nil, err
}

func (a *Turns) callPlainTool(ctx context.Context, tc toolContext, call crewlet.ToolCall, idempotencyKey string) (tools.Result, error) {
	handle := tc.handle
	switch call.Name {
	case toolSendMessage:
		return a.sendMessage(ctx, handle, call.Args, idempotencyKey)
	case toolDiaryWrite:
		var args struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(call.Args, &args); err != nil || strings.TrimSpace(args.Text) == "" {
			return refused(`diary_write needs {"text": "..."} with some text`), nil
		}
		if err := a.store.WriteDiary(ctx, handle, args.Text); err != nil {
			return tools.Result{}, err
		}
		return tools.Result{Text: "written"}, nil
	case toolTickets:
		return a.openTickets(ctx, handle)
	case toolRecall:
		var args struct {
			Query string `json:"query"`
		}
		if len(call.Args) > 0 {
			if err := json.Unmarshal(call.Args, &args); err != nil {
				return refused(`recall takes {"query": "..."}`), nil
			}
		}
		found, err := a.store.Recall(ctx, handle, args.Query, recallLimit)
		if err != nil {
			return tools.Result{}, err
		}
		if len(found) == 0 {
			return tools.Result{Text: "nothing found"}, nil
		}
		var b strings.Builder
		for _, m := range found {
			fmt.Fprintf(&b, "- [%s %s] %s\n", m.Kind, m.RecordedAt.UTC().Format("2006-01-02 15:04"), m.Text)
		}
		return tools.Result{Text: strings.TrimSuffix(b.String(), "\n")}, nil
	}
	session := a.host.session(handle)
	if session == nil {
		return refused(fmt.Sprintf("no tool named %q", call.Name)), nil
	}
	res, err := session.Call(ctx, call.Name, call.Args, idempotencyKey)
	if err != nil && crewlet.ErrorCode(err) != crewlet.EINTERNAL {
		// Refused here, before anything was sent.
		return refused(crewlet.ErrorMessage(err)), nil
	}
	return res, err
}

// sendMessage puts a message in another seat's mailbox. Its event id is
// derived from the idempotency key, so a repeated send lands once.
func (a *Turns) sendMessage(ctx context.Context, from string, raw json.RawMessage, idempotencyKey string) (tools.Result, error) {
	var args struct {
		To   string `json:"to"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return refused(`send_message needs {"to": "<seat handle>", "text": "..."}`), nil
	}
	if _, ok := a.org.Seat(args.To); !ok {
		return refused(fmt.Sprintf("no seat %q; seats: %s", args.To, strings.Join(a.org.Handles(), ", "))), nil
	}
	if args.To == from {
		return refused("send_message cannot send to yourself"), nil
	}
	if strings.TrimSpace(args.Text) == "" {
		return refused("send_message needs some text"), nil
	}
	eventID := "tool-" + crewlet.WorkKey([]string{from, idempotencyKey})
	msg, err := a.control.Deliver(ctx, crewlet.Message{
		EventID: eventID, Type: crewlet.MessageChat, From: from, To: args.To,
		Conversation: eventID, Body: args.Text, SentAt: a.Now().UTC(),
	})
	if err != nil {
		return tools.Result{}, err
	}
	return tools.Result{Text: fmt.Sprintf("sent to %s (conversation %s)", msg.To, msg.Conversation)}, nil
}

// delegate opens a ticket from the seat, in the conversation the seat is
// answering, keyed on the call's idempotency key: the same call again
// returns the same ticket. With wait it makes the turn wait on the ticket,
// unless the ticket has an outcome already.
func (a *Turns) delegate(ctx context.Context, tc toolContext, raw json.RawMessage, idempotencyKey string) (tools.Result, *crewlet.TicketWait, error) {
	var args struct {
		To   string `json:"to"`
		Task string `json:"task"`
		Wait bool   `json:"wait"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return refused(`delegate needs {"to": "<seat handle or role:NAME>", "task": "...", "wait": true|false}`), nil, nil
	}
	ticket, err := a.tickets.Open(ctx, control.OpenTicketRequest{
		Key: "tool:" + tc.handle + ":" + idempotencyKey, From: tc.handle, To: args.To, Task: args.Task, Conversation: tc.trigger.Conversation,
	})
	switch crewlet.ErrorCode(err) {
	case "":
	case crewlet.EINVALID, crewlet.ENOTFOUND:
		return refused(crewlet.ErrorMessage(err)), nil, nil
	default:
		return tools.Result{}, nil, err
	}
	if args.Wait {
		return a.waitSettle(ctx, tc, ticket.ID)
	}
	to := ticket.To
	if ticket.RoutedFrom != "" {
		to += " (routed from " + ticket.RoutedFrom + ")"
	}
	return tools.Result{Text: fmt.Sprintf("Ticket %s opened for %s; it is %s. You will get a notice with the reply when it is done or fails.", ticket.ID, to, ticket.Phase)}, nil, nil
}

// waitSettle makes the turn wait for a ticket it delegated to settle, fail
// or ask, up to tickets.max_wait; a ticket not pending has its outcome now.
func (a *Turns) waitSettle(ctx context.Context, tc toolContext, id string) (tools.Result, *crewlet.TicketWait, error) {
	ticket, waiting, err := a.store.WaitTicket(ctx, id, tc.turnID)
	if err != nil {
		return tools.Result{}, nil, err
	}
	if waiting {
		return tools.Result{}, &crewlet.TicketWait{Ticket: id, Kind: crewlet.WaitSettle, For: a.org.Tickets.MaxWait}, nil
	}
	return tools.Result{Text: settleText(ticket)}, nil, nil
}

// settleText is what a delegator's waiting call reads of its ticket.
func settleText(t crewlet.Ticket) string {
	switch t.Phase {
	case crewlet.TicketDone:
		return fmt.Sprintf("Ticket %s is done. Reply from %s:\n\n%s", t.ID, t.To, t.Reply)
	case crewlet.TicketAsking:
		return fmt.Sprintf("Ticket %s: %s asks:\n\n%s\n\nAnswer with answer(ticket: %q, text: ..., wait: true) to answer and go on waiting for the reply.",
			t.ID, t.To, t.Question, t.ID)
	case crewlet.TicketPending:
		return fmt.Sprintf("Ticket %s to %s is still pending; you will get a notice when it ends.", t.ID, t.To)
	}
	return fmt.Sprintf("Ticket %s to %s is %s: %s", t.ID, t.To, t.Phase, t.Reason)
}

// ask puts a question on the ticket the thread serves and makes the turn
// wait for the answer, up to tickets.ask_timeout. The same call again (a
// re-run) asks nothing more and reads the answer if it came.
func (a *Turns) ask(ctx context.Context, tc toolContext, raw json.RawMessage, idempotencyKey string) (tools.Result, *crewlet.TicketWait, error) {
	var args struct {
		Question string `json:"question"`
	}
	if err := json.Unmarshal(raw, &args); err != nil || strings.TrimSpace(args.Question) == "" {
		return refused(`ask needs {"question": "..."} with a question`), nil, nil
	}
	if tc.trigger.Type != crewlet.MessageTicket {
		return refused("ask works only in a turn that serves a ticket; this message is not one. Ask with send_message instead."), nil, nil
	}
	ticket, mine, err := a.tickets.Ask(ctx, tc.trigger.Ticket, args.Question, idempotencyKey, tc.turnID)
	if crewlet.ErrorCode(err) == crewlet.EINVALID {
		return refused(crewlet.ErrorMessage(err)), nil, nil
	}
	if err != nil {
		return tools.Result{}, nil, err
	}
	switch {
	case !mine:
		return refused(fmt.Sprintf("ticket %s is %s: it takes no question now", ticket.ID, ticket.Phase)), nil, nil
	case ticket.Phase == crewlet.TicketAsking && ticket.AskWaiter != "":
		return tools.Result{}, &crewlet.TicketWait{Ticket: ticket.ID, Kind: crewlet.WaitAnswer, For: a.org.Tickets.AskTimeout}, nil
	}
	return tools.Result{Text: a.answerText(ticket, false)}, nil, nil
}

// answerText is what an asking call reads of its ticket once the wait
// ended.
func (a *Turns) answerText(t crewlet.Ticket, timedOut bool) string {
	switch {
	case !t.Phase.Open():
		return fmt.Sprintf("Ticket %s is %s: %s. Stop working on it.", t.ID, t.Phase, t.Reason)
	case t.Answer != "":
		return fmt.Sprintf("Answer from %s:\n\n%s", t.From, t.Answer)
	case timedOut:
		return fmt.Sprintf("No answer within %s; decide yourself and go on.", a.org.Tickets.AskTimeout)
	}
	return "Your question was not answered; decide yourself and go on."
}

// answer answers the question on a ticket the seat delegated, and with wait
// makes the turn wait on the ticket again.
func (a *Turns) answer(ctx context.Context, tc toolContext, raw json.RawMessage) (tools.Result, *crewlet.TicketWait, error) {
	var args struct {
		Ticket string `json:"ticket"`
		Text   string `json:"text"`
		Wait   bool   `json:"wait"`
	}
	if err := json.Unmarshal(raw, &args); err != nil || args.Ticket == "" {
		return refused(`answer needs {"ticket": "<ticket id>", "text": "...", "wait": true|false}`), nil, nil
	}
	ticket, err := a.store.Ticket(ctx, args.Ticket)
	switch {
	case crewlet.ErrorCode(err) == crewlet.ENOTFOUND:
		return refused(crewlet.ErrorMessage(err)), nil, nil
	case err != nil:
		return tools.Result{}, nil, err
	case ticket.From != tc.handle:
		return refused(fmt.Sprintf("ticket %s is %s's, not yours: only its delegator answers its questions", ticket.ID, ticket.From)), nil, nil
	}
	if ticket.Phase == crewlet.TicketAsking || ticket.Answer != args.Text {
		// Answering again with the same text (a re-run) is a no-op.
		if ticket, err = a.tickets.Answer(ctx, args.Ticket, args.Text); err != nil {
			if code := crewlet.ErrorCode(err); code == crewlet.ECONFLICT || code == crewlet.EINVALID {
				return refused(crewlet.ErrorMessage(err)), nil, nil
			}
			return tools.Result{}, nil, err
		}
	}
	if args.Wait {
		return a.waitSettle(ctx, tc, ticket.ID)
	}
	return tools.Result{Text: fmt.Sprintf("Answered on ticket %s; %s goes on with it.", ticket.ID, ticket.To)}, nil, nil
}

// ResolveWait ends a turn's wait on a ticket (it changed, the wait's time ran
// out, or a person stopped the turn) and records the waiting call's result
// from the ticket as it stands. Ending the wait and reading the ticket are
// one statement, ordered against a settle by the row's lock, so the outcome
// reaches the turn here or the seat by a notice, never neither.
func (a *Turns) ResolveWait(ctx context.Context, in crewlet.ResolveWaitInput) (err error) {
	defer recoverPanic(a.log, in.Handle, "ResolveWait", &err)
	if err := a.store.CheckEpoch(ctx, in.Handle, in.Epoch); err != nil {
		return fence(a.log, in.Handle, in.Epoch, err)
	}
	pc, err := a.pendingCall(ctx, in.Handle, in.WorkKey, in.Thread, in.Round, in.Call.Call)
	if err != nil || pc.done != nil {
		return err
	}
	thread, call := pc.thread, pc.call
	turnID := crewlet.TurnWorkflowID(in.Handle, in.WorkKey)
	var text string
	switch in.Wait.Kind {
	case crewlet.WaitAnswer:
		ticket, err := a.store.StopAsking(ctx, in.Wait.Ticket, callKey(thread, in.Round, in.Call.Call))
		if err != nil {
			return err
		}
		text = a.answerText(ticket, in.TimedOut)
	default:
		ticket, err := a.store.StopWaiting(ctx, in.Wait.Ticket, turnID)
		if err != nil {
			return err
		}
		text = settleText(ticket)
		if in.TimedOut && ticket.Phase == crewlet.TicketPending {
			text = fmt.Sprintf("Ticket %s to %s is still pending after %s (tickets.max_wait); you will get a notice when it ends.", ticket.ID, ticket.To, in.Wait.For)
		}
	}
	if in.StoppedBy != "" {
		text = fmt.Sprintf("Stopped by %s while waiting. %s", in.StoppedBy, text)
	}
	if err := a.recordResult(ctx, crewlet.ToolCallInput{Handle: in.Handle, Round: in.Round, Call: in.Call}, thread, call, tools.Result{Text: text}); err != nil {
		return err
	}
	if err := a.store.FinishToolCall(ctx, in.Handle, thread, in.Round, in.Call.Call); err != nil {
		a.log.Warn("tool_call_unrecorded", "seat", in.Handle, "ticket", in.Wait.Ticket, "error", err)
	}
	return nil
}

// openTickets lists the seat's open tickets in both directions.
func (a *Turns) openTickets(ctx context.Context, handle string) (tools.Result, error) {
	var b strings.Builder
	for _, dir := range []struct {
		title  string
		filter store.TicketFilter
	}{
		{"You delegated", store.TicketFilter{From: handle, Open: true}},
		{"You serve", store.TicketFilter{To: handle, Open: true}},
	} {
		list, err := a.store.Tickets(ctx, dir.filter)
		if err != nil {
			return tools.Result{}, err
		}
		fmt.Fprintf(&b, "%s: %d open\n", dir.title, len(list))
		for _, t := range list {
			fmt.Fprintf(&b, "- %s %s → %s, %s since %s: %s\n", t.ID, t.From, t.To, t.Phase, t.CreatedAt.UTC().Format("2006-01-02 15:04"), crewlet.OneLine(t.Task, episodeClip))
		}
	}
	return tools.Result{Text: strings.TrimSuffix(b.String(), "\n")}, nil
}

func refused(text string) tools.Result { return tools.Result{Text: text, IsError: true} }
