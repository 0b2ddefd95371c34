package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/control"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tools"
)

// First-party tools every seat has, next to its role's MCP tools. Their
// names have no "__", so they cannot collide with a namespaced MCP tool.
const (
	toolSendMessage = "send_message"
	toolDiaryWrite  = "diary_write"
	toolRecall      = "recall"
	toolDelegate    = "delegate"
	toolTickets     = "tickets"
)

// keyedTools are the first-party writes keyed on the call's idempotency
// key: calling one again does nothing more, so a call whose first attempt
// left no result is made again instead of being reported unknown.
var keyedTools = map[string]bool{toolSendMessage: true, toolDiaryWrite: true, toolDelegate: true}

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
				"It returns the ticket id at once; when the ticket is done or fails you get a notice that starts a new turn, with the reply. " +
				"When a task comes to you as a ticket, your final answer is its reply.",
			Schema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","description":"a seat handle or role:NAME"},"task":{"type":"string","description":"what to do, with everything needed to do it"}},"required":["to","task"]}`),
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
	stop := make(chan struct{})
	defer close(stop)
	go heartbeatWhile(ctx, a.host.Beat, stop)

	out.Wrote = !in.Call.ReadOnly
	turn, err := a.store.Turn(ctx, in.Handle, in.WorkKey)
	if err != nil {
		return out, err
	}
	trigger, thread, err := threadOf(turn, in.Thread)
	if err != nil {
		return out, err
	}
	msgs, err := a.store.TurnMessages(ctx, in.Handle, thread, 0)
	if err != nil {
		return out, err
	}
	key := resultKey(in.Round, in.Call.Call)
	if done, ok := findKey(msgs, key); ok {
		out.IsError = done.Message.IsError
		return out, nil
	}
	asked, ok := findKey(msgs, roundKey(in.Round))
	if !ok || in.Call.Call >= len(asked.Message.ToolCalls) {
		return out, fmt.Errorf("thread %s of %s has no call %d in round %d", thread, in.Handle, in.Call.Call, in.Round)
	}
	call := asked.Message.ToolCalls[in.Call.Call]
	if out.Wrote {
		first, err := a.store.StartToolCall(ctx, in.Handle, thread, in.Round, in.Call.Call, call.Name, false)
		if err != nil {
			return out, err
		}
		if !first && !keyedTools[call.Name] {
			out.Unknown, out.IsError = true, true
			return out, a.recordResult(ctx, in, thread, call, tools.Result{Text: outcomeUnknown, IsError: true})
		}
	}
	idempotencyKey := fmt.Sprintf("%s:%d:%d", thread, in.Round, in.Call.Call)
	res, err := a.callTool(ctx, in.Handle, trigger.Conversation, call, idempotencyKey)
	if err != nil {
		if in.Call.ReadOnly {
			return out, err // retried by the turn's retry policy
		}
		a.log.Warn("tool_outcome_unknown", "seat", in.Handle, "tool", call.Name, "key", idempotencyKey, "error", err)
		res = tools.Result{Text: outcomeUnknown + " (" + err.Error() + ")", IsError: true}
		out.Unknown = true
	}
	crashPoint("after_tool_call", in.Handle)
	out.IsError = res.IsError
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

func (a *Turns) recordResult(ctx context.Context, in crewlet.ToolCallInput, thread string, call crewlet.ToolCall, res tools.Result) error {
	_, err := a.store.AppendTurnMessage(ctx, in.Handle, thread, store.TurnMessage{
		Key: resultKey(in.Round, in.Call.Call), Round: in.Round,
		Message: crewlet.ChatMessage{Role: "tool", ToolCallID: call.ID, Content: res.Text, IsError: res.IsError},
	})
	return err
}

// callTool runs a first-party tool or an MCP tool. A call refused before it
// reached anything (unknown tool, bad arguments) is an error result the
// model sees; an error return means the outcome is unknown.
func (a *Turns) callTool(ctx context.Context, handle, conversation string, call crewlet.ToolCall, idempotencyKey string) (tools.Result, error) {
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
	case toolDelegate:
		return a.delegate(ctx, handle, conversation, call.Args, idempotencyKey)
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
// returns the same ticket.
func (a *Turns) delegate(ctx context.Context, from, conversation string, raw json.RawMessage, idempotencyKey string) (tools.Result, error) {
	var args struct {
		To   string `json:"to"`
		Task string `json:"task"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return refused(`delegate needs {"to": "<seat handle or role:NAME>", "task": "..."}`), nil
	}
	ticket, err := a.tickets.Open(ctx, control.OpenTicketRequest{
		Key: "tool:" + from + ":" + idempotencyKey, From: from, To: args.To, Task: args.Task, Conversation: conversation,
	})
	switch crewlet.ErrorCode(err) {
	case "":
	case crewlet.EINVALID, crewlet.ENOTFOUND:
		return refused(crewlet.ErrorMessage(err)), nil
	default:
		return tools.Result{}, err
	}
	to := ticket.To
	if ticket.RoutedFrom != "" {
		to += " (routed from " + ticket.RoutedFrom + ")"
	}
	return tools.Result{Text: fmt.Sprintf("Ticket %s opened for %s; it is %s. You will get a notice with the reply when it is done or fails.", ticket.ID, to, ticket.Phase)}, nil
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
			fmt.Fprintf(&b, "- %s %s → %s, %s since %s: %s\n", t.ID, t.From, t.To, t.Phase, t.CreatedAt.UTC().Format("2006-01-02 15:04"), clip(t.Task))
		}
	}
	return tools.Result{Text: strings.TrimSuffix(b.String(), "\n")}, nil
}

func refused(text string) tools.Result { return tools.Result{Text: text, IsError: true} }
