// Package firstparty owns the tools crewlet gives every seat next to its
// role's MCP tools: send_message, diary_write, recall, delegate, ask, answer
// and tickets. It says what each offers the model, runs a call of one, and
// words what a waiting call reads of its ticket. The ToolCall activity
// records the call and dispatches here.
package firstparty

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// First-party tools every seat has, next to its role's MCP tools. Their
// names have no "__", so they cannot collide with a namespaced MCP tool.
const (
	SendMessage = "send_message"
	DiaryWrite  = "diary_write"
	Recall      = "recall"
	Delegate    = "delegate"
	ListTickets = "tickets"
	Ask         = "ask"
	Answer      = "answer"
)

// keyed are the first-party writes keyed on the call's idempotency
// key: calling one again does nothing more, so a call whose first attempt
// left no result is made again instead of being reported unknown.
var keyed = map[string]bool{SendMessage: true, DiaryWrite: true, Delegate: true, Ask: true, Answer: true}

// recallLimit is the most memories one recall returns.
const recallLimit = 10

// Specs are the first-party tools as a seat's catalog offers them.
func Specs() []crewlet.ToolSpec {
	return []crewlet.ToolSpec{
		{
			Name:        SendMessage,
			Description: "Send a message to another seat's mailbox. It starts a new conversation; the seat answers it in a later turn.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","description":"the handle of the seat"},"text":{"type":"string","description":"the message"}},"required":["to","text"]}`),
		},
		{
			Name:        DiaryWrite,
			Description: "Write an entry in your diary, to recall in later turns. Writing the same text twice keeps one entry.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"the entry"}},"required":["text"]}`),
		},
		{
			Name: Delegate,
			Description: "Hand a task to another seat as a ticket. `to` is a seat handle, role:NAME (its least busy seat), spawn:NAME (a new seat) or a2a:NAME (a remote agent your role may delegate to). " +
				"With wait: true this call returns when the ticket is done, fails or the seat asks you a question (then answer it with answer). " +
				"With wait: false it returns the ticket id at once, and a notice starts a new turn when the ticket ends. " +
				"When a task comes to you as a ticket, your final answer is its reply.",
			Schema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","description":"a seat, role:NAME, spawn:NAME or a2a:NAME"},"task":{"type":"string","description":"what to do, with everything needed to do it"},"wait":{"type":"boolean","description":"wait for the reply (default false)"}},"required":["to","task"]}`),
		},
		{
			Name: Ask,
			Description: "Only while you serve a ticket: ask the seat or person that gave it to you a question, and wait for the answer. " +
				"If no answer comes in time you are told so: decide yourself and go on.",
			Schema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`),
		},
		{
			Name:        Answer,
			Description: "Answer the question asked on a ticket you delegated. With wait: true, go on waiting for the ticket's reply.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"string"},"text":{"type":"string"},"wait":{"type":"boolean","description":"wait for the reply after answering (default false)"}},"required":["ticket","text"]}`),
		},
		{
			Name:        ListTickets,
			Description: "List your open tickets: those you delegated and those you serve, with their phase.",
			Schema:      json.RawMessage(`{"type":"object","properties":{}}`),
			ReadOnly:    true,
		},
		{
			Name:        Recall,
			Description: "Search your diary and the summaries of your past turns for entries containing every word of the query, newest first.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"words to look for; empty returns the newest entries"}}}`),
			ReadOnly:    true,
		},
	}
}

// Has reports whether name is a first-party tool.
func Has(name string) bool {
	for _, t := range Specs() {
		if t.Name == name {
			return true
		}
	}
	return false
}

// Messages are the tools whose calls count toward a turn's
// roles.R.max_messages_per_turn: those that reach another seat, as the
// authority table says.
var Messages = authority.MessageTools()

// Keyed reports whether a tool is a first-party write keyed on the call's
// idempotency key.
func Keyed(name string) bool { return keyed[name] }

// Tools runs the first-party tools of a seat's turn.
type Tools struct {
	Store *store.Store
	Org   config.Source
	// Delivery delivers what send_message sends.
	Delivery *delivery.Service
	// Tickets opens, asks and answers the tickets of delegate, ask and
	// answer.
	Tickets *tickets.Service
	// Now stamps the messages sent.
	Now func() time.Time
	// Log notes an audit row that could not be written.
	Log *slog.Logger
}

// Call is one call of a first-party tool: the seat, the turn (a waiter's
// identity), the trigger of the thread it serves, and the call's
// idempotency key.
type Call struct {
	Handle  string
	TurnID  string
	Trigger crewlet.Message
	Name    string
	Args    json.RawMessage
	Key     string
	// Opened, when set, hears of the ticket a delegate call opened (or
	// found opened by the same call before), for the live stream.
	Opened func(crewlet.Ticket)
}

// Run makes a first-party tool call. A call refused before it did anything
// (bad arguments, a seat that does not exist) is an error result the model
// sees; an error return means the outcome is unknown. A wait, when set,
// means the call has no result yet: the turn waits on the ticket.
func (f Tools) Run(ctx context.Context, c Call) (tools.Result, *crewlet.TicketWait, error) {
	switch c.Name {
	case Delegate:
		return f.delegate(ctx, c)
	case Ask:
		return f.ask(ctx, c)
	case Answer:
		return f.answer(ctx, c)
	}
	res, err := f.runPlain(ctx, c)
	return res, nil, err
}

func (f Tools) runPlain(ctx context.Context, c Call) (tools.Result, error) {
	switch c.Name {
	case SendMessage:
		return f.sendMessage(ctx, c)
	case DiaryWrite:
		var args struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c.Args, &args); err != nil || strings.TrimSpace(args.Text) == "" {
			return tools.Refused(`diary_write needs {"text": "..."} with some text`), nil
		}
		if err := f.Store.WriteDiary(ctx, c.Handle, args.Text); err != nil {
			return tools.Result{}, err
		}
		return tools.Result{Text: "written"}, nil
	case ListTickets:
		return f.openTickets(ctx, c.Handle)
	case Recall:
		var args struct {
			Query string `json:"query"`
		}
		if len(c.Args) > 0 {
			if err := json.Unmarshal(c.Args, &args); err != nil {
				return tools.Refused(`recall takes {"query": "..."}`), nil
			}
		}
		found, err := f.Store.Recall(ctx, c.Handle, args.Query, recallLimit)
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
	return tools.Refused(fmt.Sprintf("no tool named %q", c.Name)), nil
}

// sendMessage puts a message in another seat's mailbox, if the seat's
// role may message it. Its event id is derived from the idempotency key,
// so a repeated send lands once.
func (f Tools) sendMessage(ctx context.Context, c Call) (tools.Result, error) {
	var args struct {
		To   string `json:"to"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return tools.Refused(`send_message needs {"to": "<seat handle>", "text": "..."}`), nil
	}
	org := f.Org.Now()
	if _, ok := org.Seat(args.To); !ok {
		return tools.Refused(fmt.Sprintf("no seat %q; seats: %s", args.To, strings.Join(org.Handles(), ", "))), nil
	}
	if args.To == c.Handle {
		return tools.Refused("send_message cannot send to yourself"), nil
	}
	if err := authority.Check(org, authority.SendMail, authority.Request{Seat: c.Handle, Target: args.To}); err != nil {
		return f.Refuse(ctx, c, "to="+args.To, fmt.Sprintf("send_message to %s refused: %s", args.To, crewlet.ErrorMessage(err))), nil
	}
	if strings.TrimSpace(args.Text) == "" {
		return tools.Refused("send_message needs some text"), nil
	}
	eventID := crewlet.ToolEventPrefix + crewlet.WorkKey([]string{c.Handle, c.Key})
	msg, err := f.Delivery.Deliver(ctx, crewlet.Message{
		EventID: eventID, Type: crewlet.MessageChat, From: c.Handle, To: args.To,
		Conversation: eventID, Body: args.Text, SentAt: f.Now().UTC(),
	})
	if code := crewlet.ErrorCode(err); code == crewlet.EFULL || code == crewlet.ERATELIMITED {
		// A quota refused it before Redis took it: nothing was sent, and
		// the model reads why.
		return tools.Refused("not sent: " + crewlet.ErrorMessage(err)), nil
	}
	if err != nil {
		return tools.Result{}, err
	}
	return tools.Result{Text: fmt.Sprintf("sent to %s (conversation %s)", msg.To, msg.Conversation)}, nil
}

// Refuse is a call the seat's authority refused
// (docs/operations.md, "Authentication and authority"): the model reads why
// as the call's error result, and the audit log gets a denied row naming the seat as
// seat:HANDLE, its role, "tool NAME", the target and the reason, with the
// call's idempotency key as its request id. Writing the row only records:
// a failure is logged and the refusal stands.
func (f Tools) Refuse(ctx context.Context, c Call, target, reason string) tools.Result {
	seat, _ := f.Org.Now().Seat(c.Handle)
	e := wire.AuditEntry{
		Principal: SeatPrincipal(c.Handle), Role: seat.Role, Action: "tool " + c.Name, Target: target,
		Outcome: wire.AuditDenied, Status: http.StatusForbidden, Reason: reason, RequestID: c.Key,
	}
	if err := f.Store.RecordAudit(ctx, e); err != nil && f.Log != nil {
		f.Log.ErrorContext(ctx, "audit_unrecorded", "seat", c.Handle, "action", e.Action, "error", err)
	}
	return tools.Refused(reason)
}

// SeatPrincipal is how the audit log names a seat acting through its
// tools; no API token can be named so, the prefix holding a colon.
func SeatPrincipal(handle string) string { return "seat:" + handle }

// delegate opens a ticket from the seat, in the conversation the seat is
// answering, keyed on the call's idempotency key: the same call again
// returns the same ticket. With wait it makes the turn wait on the ticket,
// unless the ticket has an outcome already.
func (f Tools) delegate(ctx context.Context, c Call) (tools.Result, *crewlet.TicketWait, error) {
	var args struct {
		To   string `json:"to"`
		Task string `json:"task"`
		Wait bool   `json:"wait"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return tools.Refused(`delegate needs {"to": "<seat handle, role:NAME, spawn:NAME or a2a:NAME>", "task": "...", "wait": true|false}`), nil, nil
	}
	req := tickets.OpenRequest{
		Key: "tool:" + c.Handle + ":" + c.Key, From: c.Handle, To: args.To, Task: args.Task, Conversation: c.Trigger.Conversation,
	}
	if c.Trigger.Type == crewlet.MessageTicket {
		req.Parent = c.Trigger.Ticket
	}
	ticket, err := f.Tickets.Open(ctx, req)
	switch crewlet.ErrorCode(err) {
	case "":
	case crewlet.EFORBIDDEN:
		return f.Refuse(ctx, c, "to="+args.To, fmt.Sprintf("delegate to %s refused: %s", args.To, crewlet.ErrorMessage(err))), nil, nil
	case crewlet.EINVALID, crewlet.ENOTFOUND, crewlet.EFULL, crewlet.ERATELIMITED:
		return tools.Refused(crewlet.ErrorMessage(err)), nil, nil
	default:
		return tools.Result{}, nil, err
	}
	if c.Opened != nil {
		c.Opened(ticket)
	}
	if args.Wait {
		return f.waitSettle(ctx, c, ticket.ID)
	}
	to := ticket.To
	if ticket.RoutedFrom != "" {
		to += " (routed from " + ticket.RoutedFrom + ")"
	}
	return tools.Result{Text: fmt.Sprintf("Ticket %s opened for %s; it is %s. You will get a notice with the reply when it is done or fails.", ticket.ID, to, ticket.Phase)}, nil, nil
}

// waitSettle makes the turn wait for a ticket it delegated to settle, fail
// or ask, up to tickets.max_wait; a ticket not pending has its outcome now.
func (f Tools) waitSettle(ctx context.Context, c Call, id string) (tools.Result, *crewlet.TicketWait, error) {
	ticket, waiting, err := f.Store.WaitTicket(ctx, id, c.TurnID)
	if err != nil {
		return tools.Result{}, nil, err
	}
	if waiting {
		return tools.Result{}, &crewlet.TicketWait{Ticket: id, Kind: crewlet.WaitSettle, For: f.Org.Now().Tickets.MaxWait}, nil
	}
	return tools.Result{Text: SettleText(ticket)}, nil, nil
}

// SettleText is what a delegator's waiting call reads of its ticket.
func SettleText(t crewlet.Ticket) string {
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
func (f Tools) ask(ctx context.Context, c Call) (tools.Result, *crewlet.TicketWait, error) {
	var args struct {
		Question string `json:"question"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil || strings.TrimSpace(args.Question) == "" {
		return tools.Refused(`ask needs {"question": "..."} with a question`), nil, nil
	}
	if c.Trigger.Type != crewlet.MessageTicket {
		return tools.Refused("ask works only in a turn that serves a ticket; this message is not one. Ask with send_message instead."), nil, nil
	}
	ticket, mine, err := f.Tickets.Ask(ctx, c.Trigger.Ticket, args.Question, c.Key, c.TurnID)
	if crewlet.ErrorCode(err) == crewlet.EINVALID {
		return tools.Refused(crewlet.ErrorMessage(err)), nil, nil
	}
	if err != nil {
		return tools.Result{}, nil, err
	}
	switch {
	case !mine:
		return tools.Refused(fmt.Sprintf("ticket %s is %s: it takes no question now", ticket.ID, ticket.Phase)), nil, nil
	case ticket.Phase == crewlet.TicketAsking && ticket.AskWaiter != "":
		return tools.Result{}, &crewlet.TicketWait{Ticket: ticket.ID, Kind: crewlet.WaitAnswer, For: f.Org.Now().Tickets.AskTimeout}, nil
	}
	return tools.Result{Text: f.AnswerText(ticket, false)}, nil, nil
}

// AnswerText is what an asking call reads of its ticket once the wait
// ended.
func (f Tools) AnswerText(t crewlet.Ticket, timedOut bool) string {
	switch {
	case !t.Phase.Open():
		return fmt.Sprintf("Ticket %s is %s: %s. Stop working on it.", t.ID, t.Phase, t.Reason)
	case t.Answer != "" && t.AnsweredBy != t.From:
		// Someone other than the delegating seat answered (an admin, or
		// the person behind "operator"): the model is told who.
		return fmt.Sprintf("Answer from %s (answering for %s, who delegated this ticket):\n\n%s", t.AnsweredBy, t.From, t.Answer)
	case t.Answer != "":
		return fmt.Sprintf("Answer from %s:\n\n%s", t.From, t.Answer)
	case timedOut:
		return fmt.Sprintf("No answer within %s; decide yourself and go on.", f.Org.Now().Tickets.AskTimeout)
	}
	return "Your question was not answered; decide yourself and go on."
}

// answer answers the question on a ticket the seat delegated, and with wait
// makes the turn wait on the ticket again.
func (f Tools) answer(ctx context.Context, c Call) (tools.Result, *crewlet.TicketWait, error) {
	var args struct {
		Ticket string `json:"ticket"`
		Text   string `json:"text"`
		Wait   bool   `json:"wait"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil || args.Ticket == "" {
		return tools.Refused(`answer needs {"ticket": "<ticket id>", "text": "...", "wait": true|false}`), nil, nil
	}
	ticket, err := f.Store.Ticket(ctx, args.Ticket)
	switch {
	case crewlet.ErrorCode(err) == crewlet.ENOTFOUND:
		return tools.Refused(crewlet.ErrorMessage(err)), nil, nil
	case err != nil:
		return tools.Result{}, nil, err
	}
	if _, _, err := authority.TicketActor(authority.Actor{Name: SeatPrincipal(c.Handle), Seat: c.Handle}, ticket, "answer"); err != nil {
		return f.Refuse(ctx, c, "ticket="+ticket.ID, fmt.Sprintf("answer refused: %s", crewlet.ErrorMessage(err))), nil, nil
	}
	if ticket.Phase == crewlet.TicketAsking || ticket.Answer != args.Text {
		// Answering again with the same text (a re-run) is a no-op.
		if ticket, err = f.Tickets.Answer(ctx, args.Ticket, args.Text, c.Handle); err != nil {
			if code := crewlet.ErrorCode(err); code == crewlet.ECONFLICT || code == crewlet.EINVALID {
				return tools.Refused(crewlet.ErrorMessage(err)), nil, nil
			}
			return tools.Result{}, nil, err
		}
	}
	if args.Wait {
		return f.waitSettle(ctx, c, ticket.ID)
	}
	return tools.Result{Text: fmt.Sprintf("Answered on ticket %s; %s goes on with it.", ticket.ID, ticket.To)}, nil, nil
}

// openTickets lists the seat's open tickets in both directions.
func (f Tools) openTickets(ctx context.Context, handle string) (tools.Result, error) {
	var b strings.Builder
	for _, dir := range []struct {
		title  string
		filter store.TicketFilter
	}{
		{"You delegated", store.TicketFilter{From: handle, Open: true}},
		{"You serve", store.TicketFilter{To: handle, Open: true}},
	} {
		list, err := f.Store.Tickets(ctx, dir.filter)
		if err != nil {
			return tools.Result{}, err
		}
		fmt.Fprintf(&b, "%s: %d open\n", dir.title, len(list))
		for _, t := range list {
			fmt.Fprintf(&b, "- %s %s → %s, %s since %s: %s\n", t.ID, t.From, t.To, t.Phase, t.CreatedAt.UTC().Format("2006-01-02 15:04"), crewlet.OneLine(t.Task, turnrules.EpisodeClip))
		}
	}
	return tools.Result{Text: strings.TrimSuffix(b.String(), "\n")}, nil
}
