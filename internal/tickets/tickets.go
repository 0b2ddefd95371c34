// Package tickets owns delegation tickets (docs/architecture.md): it opens
// them (routing role:NAME to the least-loaded seat), settles, asks, answers,
// ends, fails and expires them, and tells their delegators how they ended:
// the waiting turn by a signal, a seat by a notice in its mailbox, a person
// by a note. Every phase change is one statement in the store; this adds
// the mail around it.
package tickets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
)

// Service opens delegation tickets and tells delegators how they ended.
type Service struct {
	org      config.Source
	store    *store.Store
	delivery *delivery.Service
	seats    *seatclient.Client
	log      *slog.Logger
	// metrics counts tickets opened and ended; nil counts none.
	metrics *metrics.Metrics
	// spawn creates a seat of a role from its pool, for a ticket to
	// spawn:ROLE; nil refuses such tickets.
	spawn SpawnFunc
}

// SpawnFunc creates a seat of role from its pool (spawn.Service.Spawn).
type SpawnFunc func(ctx context.Context, role, by string) (config.Seat, error)

// New returns the ticket service of org over its store, its mail and its
// seats' workflows. spawn serves tickets to spawn:ROLE (nil refuses them);
// m counts tickets (nil: nothing).
func New(org config.Source, st *store.Store, dl *delivery.Service, seats *seatclient.Client, spawn SpawnFunc, m *metrics.Metrics, log *slog.Logger) *Service {
	return &Service{org: org, store: st, delivery: dl, seats: seats, spawn: spawn, metrics: m, log: log}
}

// OpenRequest opens a ticket.
type OpenRequest struct {
	// Key identifies the request: opening again with the same key returns
	// the same ticket and sends nothing more. Empty makes a fresh one.
	Key string
	// From is the opening seat, a person's human seat, or empty for the
	// operator.
	From string
	// To is a seat handle or "role:NAME".
	To           string
	Task         string
	Conversation string
	// Parent is the ticket the delegating turn serves, if it serves one:
	// the new ticket is its next hop and continues its chain.
	Parent string
	// OpenedBy is the API principal opening it; empty for a seat.
	OpenedBy string
}

// maxTaskBytes bounds a ticket's task, question and answer; each travels
// in one mailbox entry or tool result and reads into every later round.
const maxTaskBytes = crewlet.MaxMessageBytes

// Open validates a ticket request, routes it, records the ticket pending and
// puts its request in the target's mailbox, or, for a remote agent
// (a2a:NAME), starts the workflow that serves it there. A seat's ticket is held to its
// role's may.delegate and may.spawn; every ticket to tickets.max_hops and
// to its chain: a seat already on the chain is never its target. What
// authority refuses is EFORBIDDEN, saying why.
func (t *Service) Open(ctx context.Context, req OpenRequest) (crewlet.Ticket, error) {
	task := strings.TrimSpace(req.Task)
	if task == "" {
		return crewlet.Ticket{}, crewlet.Errorf(crewlet.EINVALID, "task is empty; say what to do")
	}
	if err := errors.Join(crewlet.CheckText("task", task, maxTaskBytes), delivery.CheckConversation(req.Conversation), crewlet.CheckID("to", req.To)); err != nil {
		return crewlet.Ticket{}, err
	}
	from, fromSeat := req.From, false
	switch {
	case from == "" || from == crewlet.ExternalSender:
		from = crewlet.ExternalSender
	default:
		s, ok := t.org.Now().Seat(from)
		if !ok {
			return crewlet.Ticket{}, crewlet.Errorf(crewlet.EINVALID, "from: no seat %q; leave it empty to ask as %s", from, crewlet.ExternalSender)
		}
		fromSeat = s.Kind == string(crewlet.SeatAgent)
	}
	ticket, err := t.opened(ctx, req.Key)
	if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
		ticket, err = t.create(ctx, req, from, fromSeat, task)
	}
	if err != nil {
		return crewlet.Ticket{}, err
	}
	if strings.HasPrefix(ticket.To, config.A2APrefix) {
		// Started again on a repeat: the workflow id is the ticket's, so a
		// ticket whose first start was lost is served once.
		if err := t.seats.StartRemoteTicket(ctx, ticket.ID); err != nil {
			return crewlet.Ticket{}, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "ticket %s to %s is open but its remote task could not be started; Temporal is unreachable: try again", ticket.ID, ticket.To)
		}
		return ticket, nil
	}
	// Published again on a repeat: the event id is the ticket's, so a
	// request whose first publish was lost arrives once.
	if _, err := t.delivery.Deliver(ctx, crewlet.Message{
		EventID: ticket.RequestEvent, Type: crewlet.MessageTicket, From: ticket.From, To: ticket.To,
		Conversation: ticket.Conversation, Ticket: ticket.ID, Body: ticket.Task, SentAt: ticket.CreatedAt.UTC(),
	}); err != nil {
		return crewlet.Ticket{}, t.refused(ctx, ticket, err)
	}
	return ticket, nil
}

// refused ends a ticket whose request a mail quota refused: the request
// will never arrive, and the caller hears why from err, so the ticket is
// failed at once rather than left open until it expires. Any other error
// leaves it open for a retry of the same key to deliver again.
func (t *Service) refused(ctx context.Context, ticket crewlet.Ticket, err error) error {
	if code := crewlet.ErrorCode(err); code != crewlet.EFULL && code != crewlet.ERATELIMITED {
		return err
	}
	ended, endedNow, endErr := t.store.EndTicket(ctx, ticket.ID, crewlet.TicketFailed, "its request was refused: "+crewlet.ErrorMessage(err))
	if endErr != nil {
		t.log.ErrorContext(ctx, "ticket_unfailed", "ticket", ticket.ID, "error", endErr)
		return err
	}
	if endedNow {
		t.metrics.TicketEnded(string(ended.Phase))
	}
	return err
}

// opened returns the ticket a request's key opened before (a retried
// delegate call); ENOTFOUND when there is none. It is what it was: not
// routed, spawned or checked again, whatever changed since.
func (t *Service) opened(ctx context.Context, key string) (crewlet.Ticket, error) {
	if key == "" {
		return crewlet.Ticket{}, crewlet.Errorf(crewlet.ENOTFOUND, "no key")
	}
	return t.store.Ticket(ctx, store.TicketID(key))
}

// create routes a new ticket as its chain and its delegator's authority
// allow, and records it.
func (t *Service) create(ctx context.Context, req OpenRequest, from string, fromSeat bool, task string) (crewlet.Ticket, error) {
	hops, chain, parent, err := t.chain(ctx, req.Parent, from)
	if err != nil {
		return crewlet.Ticket{}, err
	}
	org := t.org.Now()
	if err := org.CheckHops(hops, chain); err != nil {
		return crewlet.Ticket{}, err
	}
	to, routedFrom, err := t.route(ctx, req.To, from, reach{org: org, from: from, chain: chain})
	if err != nil {
		return crewlet.Ticket{}, err
	}
	key := req.Key
	if key == "" {
		key = uuid.NewString()
	}
	conv := req.Conversation
	if conv == "" {
		conv = uuid.NewString()
	}
	ticket, created, err := t.store.CreateTicket(ctx, key, crewlet.Ticket{
		From: from, FromSeat: fromSeat, To: to, RoutedFrom: routedFrom, Task: task, Conversation: conv, Hops: hops, Chain: chain, OpenedBy: req.OpenedBy,
		Parent: parent,
	})
	if err != nil {
		return crewlet.Ticket{}, err
	}
	if created {
		t.metrics.TicketOpened()
		t.log.InfoContext(ctx, "ticket_opened", "ticket", ticket.ID, "from", ticket.From, "to", ticket.To, "routed_from", ticket.RoutedFrom, "hops", ticket.Hops)
	}
	return ticket, nil
}

// chain is where a new ticket from from stands: the hop after parent's,
// its chain continued by from, under parent (whose cost takes its own);
// the first hop, under none, when there is no parent (a person's ticket, a
// turn that serves none) or it is gone.
func (t *Service) chain(ctx context.Context, parent, from string) (int, []string, string, error) {
	if parent == "" {
		return 1, []string{from}, "", nil
	}
	p, err := t.store.Ticket(ctx, parent)
	switch {
	case crewlet.ErrorCode(err) == crewlet.ENOTFOUND:
		return 1, []string{from}, "", nil
	case err != nil:
		return 0, nil, "", err
	}
	return p.Hops + 1, append(slices.Clip(p.Chain), from), p.ID, nil
}

// reach is whom a new ticket may go to: a seat its chain and its
// delegator's role allow, a pool the role may spawn into.
type reach struct {
	org   *config.Config
	from  string
	chain []string
}

func (r reach) seat(handle string) error {
	return authority.Check(r.org, authority.OpenTicket, authority.Request{Seat: r.from, Target: handle, Chain: r.chain})
}

// remote says whether the delegator may open a ticket to the remote agent
// to (a2a:NAME): only an agent seat may, as its role's may.delegate names
// it, since only a seat's turn can hear the remote agent's questions.
func (r reach) remote(to string) error {
	if _, ok := r.org.AgentSeat(r.from); !ok {
		return crewlet.Errorf(crewlet.EFORBIDDEN, "a ticket to %s is opened by an agent seat's delegate tool, whose role's may.delegate names it; %s is not an agent seat", to, r.from)
	}
	return authority.Check(r.org, authority.DelegateRemote, authority.Request{Seat: r.from, Target: to})
}

func (r reach) spawn(role string) error {
	return authority.Check(r.org, authority.Spawn, authority.Request{Seat: r.from, Target: role})
}

// Route resolves a target as a ticket's is routed, for a schedule's fire:
// a seat that runs turns, "role:NAME" to the agent seat of that role
// serving the fewest open tickets, or "spawn:ROLE" to a seat spawned for it.
func (t *Service) Route(ctx context.Context, to string) (string, error) {
	handle, _, err := t.route(ctx, to, crewlet.ScheduleSender, reach{org: t.org.Now(), from: crewlet.ScheduleSender})
	return handle, err
}

// route resolves a target: a seat that runs turns, "role:NAME" to the
// agent seat of that role, other than the delegator and those reach
// refuses, serving the fewest open tickets (ties by handle),
// "spawn:ROLE" to a seat spawned for it, or "a2a:NAME" to the remote
// agent as it is named.
func (t *Service) route(ctx context.Context, to, from string, may reach) (handle, routedFrom string, err error) {
	if role, spawn := strings.CutPrefix(to, config.SpawnPrefix); spawn {
		if t.spawn == nil {
			return "", "", crewlet.Errorf(crewlet.EUNAVAILABLE, "%s: this process spawns no seats; ask an API or worker process", to)
		}
		if err := may.spawn(role); err != nil {
			return "", "", err
		}
		seat, err := t.spawn(ctx, role, from)
		return seat.Handle, to, err
	}
	if _, remote, known := may.org.RemoteAgent(to); remote {
		if !known {
			names := "none"
			if known := may.org.AgentNames(); len(known) > 0 {
				names = strings.Join(known, ", ")
			}
			return "", "", crewlet.Errorf(crewlet.ENOTFOUND, "no remote agent %q; the org's agents (agents:) are: %s", to, names)
		}
		return to, "", may.remote(to)
	}
	role, byRole := strings.CutPrefix(to, crewlet.RolePrefix)
	if !byRole {
		s, err := t.org.Now().SeatNamed(to)
		switch {
		case err != nil:
			return "", "", err
		case s.Kind != string(crewlet.SeatAgent):
			return "", "", crewlet.Errorf(crewlet.EINVALID, "%s is a human seat; a ticket goes to an agent seat or a role (role:NAME)", to)
		case s.Handle == from:
			return "", "", crewlet.Errorf(crewlet.EINVALID, "%s cannot open a ticket to itself", from)
		}
		return s.Handle, "", may.seat(s.Handle)
	}
	var seats, refusals []string
	found := false
	for _, s := range t.org.Now().Seats {
		if s.Role != role || s.Kind == string(crewlet.SeatHuman) || s.Handle == from {
			continue
		}
		found = true
		if err := may.seat(s.Handle); err != nil {
			if msg := crewlet.ErrorMessage(err); !slices.Contains(refusals, msg) {
				refusals = append(refusals, msg)
			}
			continue
		}
		seats = append(seats, s.Handle)
	}
	switch {
	case !found:
		return "", "", crewlet.Errorf(crewlet.ENOTFOUND, "no agent seat other than %s has the role %q", from, role)
	case len(seats) == 0:
		return "", "", crewlet.Errorf(crewlet.EFORBIDDEN, "no seat of role %s may take it: %s", role, strings.Join(refusals, "; "))
	}
	open, err := t.store.OpenTicketCounts(ctx, seats)
	if err != nil {
		return "", "", err
	}
	sort.Slice(seats, func(i, j int) bool {
		if open[seats[i]] != open[seats[j]] {
			return open[seats[i]] < open[seats[j]]
		}
		return seats[i] < seats[j]
	})
	return seats[0], to, nil
}

// Ended tells the delegator that a ticket settled or failed: a turn of the
// delegator waiting on it is signalled and reads the outcome as its tool
// result; otherwise a seat gets a notice that starts a turn, and a person's
// human seat a note in its inbox. The operator reads GET /tickets. The
// notice's event id is the ticket's, so telling twice tells once.
func (t *Service) Ended(ctx context.Context, ticket crewlet.Ticket) error {
	t.log.InfoContext(ctx, "ticket_ended", "ticket", ticket.ID, "phase", ticket.Phase, "from", ticket.From, "to", ticket.To, "reason", ticket.Reason)
	if t.signalled(ctx, ticket.Waiter, ticket.ID) {
		return nil
	}
	seat, ok := t.org.Now().Seat(ticket.From)
	if !ok {
		return nil
	}
	if seat.Kind == string(crewlet.SeatHuman) {
		return t.seats.NotePerson(ctx, ticket.From, ticket.ID)
	}
	_, err := t.delivery.Deliver(ctx, crewlet.Message{
		EventID: crewlet.TicketNoticeEventID(ticket.ID), Type: crewlet.MessageTicketNotice, From: crewlet.TicketSender, To: ticket.From,
		Conversation: ticket.Conversation, Ticket: ticket.ID, Body: crewlet.TicketNoticeText(ticket), SentAt: time.Now().UTC(),
	})
	if err != nil {
		return fmt.Errorf("tell %s ticket %s ended: %w", ticket.From, ticket.ID, err)
	}
	return nil
}

// End ends an open ticket failed, cancelled or expired and tells its
// delegator. It returns the ticket as it stands and whether this call ended
// it; a ticket already ended is left as it is.
func (t *Service) End(ctx context.Context, id string, phase crewlet.TicketPhase, reason string) (crewlet.Ticket, bool, error) {
	ticket, ended, err := t.store.EndTicket(ctx, id, phase, reason)
	if err != nil {
		return ticket, false, err
	}
	if ended {
		t.metrics.TicketEnded(string(phase))
	}
	// The same end again is a step retried after its notice failed: tell
	// again (the notice's event id makes it land once).
	if ended || (ticket.Phase == phase && ticket.Reason == reason) {
		return ticket, ended, t.Ended(ctx, ticket)
	}
	return ticket, false, nil
}

// Settle records the reply that settles a ticket and tells its delegator;
// a second reply is refused: settled is false and the ticket says its state.
func (t *Service) Settle(ctx context.Context, id, reply string) (crewlet.Ticket, bool, error) {
	if strings.TrimSpace(reply) == "" {
		ticket, _, err := t.End(ctx, id, crewlet.TicketFailed, "the turn serving it produced an empty reply")
		return ticket, false, err
	}
	ticket, settled, err := t.store.SettleTicket(ctx, id, reply)
	switch {
	case err != nil:
		return ticket, false, err
	case settled || (ticket.Phase == crewlet.TicketDone && ticket.Reply == reply):
		// The same reply again is a step retried after its notice failed.
		if settled {
			t.metrics.TicketEnded(string(crewlet.TicketDone))
		}
		return ticket, settled, t.Ended(ctx, ticket)
	}
	t.log.WarnContext(ctx, "ticket_reply_refused", "ticket", id, "phase", ticket.Phase, "reason", "one reply settles one ticket")
	return ticket, false, nil
}

// FailTarget fails every open ticket a seat serves, asking ones too, and
// tells their delegators: the seat was stopped or removed, which is certain.
func (t *Service) FailTarget(ctx context.Context, handle, reason string) error {
	failed, err := t.store.FailTicketsTo(ctx, handle, reason)
	if err != nil {
		return err
	}
	return t.tellAll(ctx, failed)
}

// Expire ends every open ticket older than age and tells its delegator.
func (t *Service) Expire(ctx context.Context, age time.Duration) (int, error) {
	expired, err := t.store.ExpireTickets(ctx, age)
	if err != nil {
		return 0, err
	}
	return len(expired), t.tellAll(ctx, expired)
}

// tellAll tells the delegators of tickets that just ended.
func (t *Service) tellAll(ctx context.Context, tickets []crewlet.Ticket) error {
	var errs []string
	for _, ticket := range tickets {
		t.metrics.TicketEnded(string(ticket.Phase))
		if err := t.Ended(ctx, ticket); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// signalled signals the turn waiting on a ticket, if one is, and reports
// whether it reached it. A turn that is gone (it ended; a re-run reads the
// ticket as it stands) is not reached: the caller tells another way.
func (t *Service) signalled(ctx context.Context, turnID, ticketID string) bool {
	if turnID == "" {
		return false
	}
	if err := t.seats.TicketChanged(ctx, turnID, ticketID); err != nil {
		t.log.WarnContext(ctx, "ticket_waiter_unreached", "ticket", ticketID, "turn", turnID, "error", err)
		return false
	}
	return true
}

// Ask puts a question from the turn serving a ticket (the call askKey of
// turn askWaiter) and tells the delegator: its waiting turn reads the
// question as its tool result; otherwise a seat gets a question that starts
// a turn, a person's human seat a note in its inbox. It returns the ticket
// as it stands and whether the question is (still) this call's.
func (t *Service) Ask(ctx context.Context, id, question, askKey, askWaiter string) (crewlet.Ticket, bool, error) {
	if err := crewlet.CheckText("the question", question, maxTaskBytes); err != nil {
		return crewlet.Ticket{}, false, err
	}
	ticket, asked, err := t.store.AskTicket(ctx, id, question, askKey, askWaiter)
	if err != nil {
		return ticket, false, err
	}
	if !asked {
		return ticket, ticket.AskKey == askKey, nil
	}
	t.log.InfoContext(ctx, "ticket_asking", "ticket", ticket.ID, "from", ticket.From, "to", ticket.To)
	if t.signalled(ctx, ticket.Waiter, ticket.ID) {
		return ticket, true, nil
	}
	seat, ok := t.org.Now().Seat(ticket.From)
	if !ok {
		return ticket, true, nil
	}
	if seat.Kind == string(crewlet.SeatHuman) {
		return ticket, true, t.seats.NotePerson(ctx, ticket.From, ticket.ID)
	}
	_, err = t.delivery.Deliver(ctx, crewlet.Message{
		EventID: "ticket-question-" + crewlet.WorkKey([]string{ticket.ID, askKey}), Type: crewlet.MessageTicketQuestion,
		From: crewlet.TicketSender, To: ticket.From, Conversation: ticket.Conversation, Ticket: ticket.ID,
		Body: crewlet.TicketQuestionText(ticket), SentAt: time.Now().UTC(),
	})
	if err != nil {
		return ticket, true, fmt.Errorf("tell %s of the question on ticket %s: %w", ticket.From, ticket.ID, err)
	}
	return ticket, true, nil
}

// Answer answers an asking ticket's question as by (its delegator, or an
// admin answering for it: who may is the caller's to check) and signals the
// turn waiting for it. It refuses (ECONFLICT, naming the phase) a ticket
// with no question waiting.
func (t *Service) Answer(ctx context.Context, id, answer, by string) (crewlet.Ticket, error) {
	if strings.TrimSpace(answer) == "" {
		return crewlet.Ticket{}, crewlet.Errorf(crewlet.EINVALID, "the answer is empty; say something")
	}
	if err := crewlet.CheckText("the answer", answer, maxTaskBytes); err != nil {
		return crewlet.Ticket{}, err
	}
	ticket, answered, err := t.store.AnswerTicket(ctx, id, answer, by, budget.ReadAnswer(answer))
	if err != nil {
		return ticket, err
	}
	if !answered {
		return ticket, crewlet.Errorf(crewlet.ECONFLICT, "ticket %s is %s: no question waits on it", ticket.ID, ticket.Phase)
	}
	t.log.InfoContext(ctx, "ticket_answered", "ticket", ticket.ID, "from", ticket.From, "to", ticket.To, "by", by)
	if settled, ok, err := t.SettleBudget(ctx, ticket); err != nil || ok {
		return settled, err
	}
	t.signalled(ctx, ticket.AskWaiter, ticket.ID)
	return ticket, nil
}

// AskBudget puts a money window's question (docs/architecture.md, "Cost")
// to asked, the seat its budget's ask.to names, for seat, whose turn found
// the window at its share: a ticket opened in asked's name and served by
// seat, asking, so the question reaches asked and is answered as every
// ticket question is (POST /tickets/{id}/answer, `crewlet tickets answer`,
// an agent's answer tool). Its request is not mailed: the seat has nothing
// to do for it. key names the window; asking again with it opens and asks
// nothing more.
func (t *Service) AskBudget(ctx context.Context, key, asked, seat, task, question string) (crewlet.Ticket, error) {
	s, ok := t.org.Now().Seat(asked)
	if !ok {
		return crewlet.Ticket{}, crewlet.Errorf(crewlet.EINVALID, "budget ask.to: no seat %q; name a seat of the org in the budget's ask.to", asked)
	}
	ticket, created, err := t.store.CreateTicket(ctx, key, crewlet.Ticket{
		From: asked, FromSeat: s.Kind != string(crewlet.SeatHuman), To: seat, Task: task, Conversation: "budget-" + crewlet.WorkKey([]string{key}),
	})
	if err != nil {
		return crewlet.Ticket{}, err
	}
	if created {
		t.metrics.TicketOpened()
		t.log.InfoContext(ctx, "ticket_opened", "ticket", ticket.ID, "from", ticket.From, "to", ticket.To, "budget", key)
	}
	ticket, _, err = t.Ask(ctx, ticket.ID, question, key, "")
	return ticket, err
}

// SettleBudget settles a ticket whose budget question was answered with
// what the answer means: nobody waits on it. ok is false for a ticket that
// asks no budget question (or whose question is not recorded yet).
func (t *Service) SettleBudget(ctx context.Context, ticket crewlet.Ticket) (crewlet.Ticket, bool, error) {
	ask, ok, err := t.store.BudgetAskOf(ctx, ticket.ID)
	if err != nil || !ok {
		return ticket, false, err
	}
	reply := fmt.Sprintf("Read as yes: it goes on to the cap of %s.", budget.USD(ask.CapNanoUSD))
	if ask.Decision == crewlet.AskNo {
		reply = fmt.Sprintf("Read as no (only an answer beginning with yes lets it go on): turns are held, %s spent of the cap of %s when asked, until the window turns.",
			budget.USD(ask.UsedNanoUSD), budget.USD(ask.CapNanoUSD))
	}
	settled, now, err := t.store.SettleTicket(ctx, ticket.ID, reply)
	if err != nil {
		return ticket, true, err
	}
	if now {
		t.metrics.TicketEnded(string(crewlet.TicketDone))
		t.log.InfoContext(ctx, "budget_ask_decided", "ticket", ticket.ID, "seat", ticket.To, "by", ask.AnsweredBy, "decision", ask.Decision)
	}
	return settled, true, nil
}

// Note writes one note in a person's inbox about the tickets they opened
// that changed and the approvals that asked for them (ids ap-…), each as it
// stands now. The note's event id is made from the tickets and approvals
// and their states, so writing the same note again lands once. One that
// does not exist is left out: no retry would find it.
func (t *Service) Note(ctx context.Context, in crewlet.TicketNoteInput) error {
	seen := map[string]bool{}
	var lines, keys, asks []string
	for _, id := range in.Tickets {
		if seen[id] {
			continue
		}
		seen[id] = true
		if approvals.IsApprovalID(id) {
			// An approval waiting for the person rides the same notes.
			a, err := t.store.Approval(ctx, id)
			if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
				continue
			}
			if err != nil {
				return err
			}
			keys = append(keys, a.ID+":"+a.Status)
			asks = append(asks, "- "+approvals.NoteLine(a))
			continue
		}
		ticket, err := t.store.Ticket(ctx, id)
		if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
			continue
		}
		if err != nil {
			return err
		}
		keys = append(keys, ticket.ID+":"+string(ticket.Phase)+":"+ticket.Question)
		lines = append(lines, "- "+ticketLine(ticket))
	}
	var parts []string
	if len(lines) > 0 {
		parts = append(parts, fmt.Sprintf("%d of your tickets changed:\n%s", len(lines), strings.Join(lines, "\n")))
	}
	if len(asks) > 0 {
		calls := "tool calls"
		if len(asks) == 1 {
			calls = "tool call"
		}
		parts = append(parts, fmt.Sprintf("%d %s asked for your approval:\n%s", len(asks), calls, strings.Join(asks, "\n")))
	}
	if len(parts) == 0 {
		return nil
	}
	body := strings.Join(parts, "\n\n")
	_, err := t.delivery.Deliver(ctx, crewlet.Message{
		EventID: "ticket-note-" + crewlet.WorkKey(keys), Type: crewlet.MessageTicketNotice, From: crewlet.TicketSender, To: in.Person,
		Conversation: "tickets-" + in.Person, Body: body, SentAt: time.Now().UTC(),
	})
	return err
}

// ticketLine is one ticket in a person's note.
func ticketLine(t crewlet.Ticket) string {
	switch t.Phase {
	case crewlet.TicketDone:
		return fmt.Sprintf("%s to %s is done: %s", t.ID, t.To, t.Reply)
	case crewlet.TicketAsking:
		return fmt.Sprintf("%s: %s asks: %s (answer with `crewlet tickets answer %s TEXT`)", t.ID, t.To, t.Question, t.ID)
	case crewlet.TicketPending:
		return fmt.Sprintf("%s to %s is pending again", t.ID, t.To)
	}
	return fmt.Sprintf("%s to %s is %s: %s", t.ID, t.To, t.Phase, t.Reason)
}
