package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
)

// OpenTicketRequest is the body of POST /tickets.
type OpenTicketRequest struct {
	// To is an agent seat or "role:NAME".
	To   string `json:"to"`
	Task string `json:"task"`
	// From is the asking person's human seat; empty asks as "operator".
	From         string `json:"from"`
	Conversation string `json:"conversation"`
	// Wait holds the request open until the ticket ends, for at most this
	// long ("5m"; at most maxTicketWait): 200 with the ended ticket, or 202
	// with it still open. Empty answers 202 at once.
	Wait string `json:"wait"`
}

// AnswerTicketRequest is the body of POST /tickets/{id}/answer.
type AnswerTicketRequest struct {
	Text string `json:"text"`
}

// CancelTicketRequest is the body of POST /tickets/{id}/cancel.
type CancelTicketRequest struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
}

// TicketView is the answer of GET /tickets/{id}: the ticket, what it cost
// with every ticket under it, and that chain of delegation, depth first,
// the ticket itself first. ChainTruncated says the chain held more than
// store.MaxChainTickets tickets: the cost counts only those listed.
type TicketView struct {
	crewlet.Ticket
	Cost           crewlet.Cost         `json:"cost"`
	CostChain      []crewlet.TicketLink `json:"cost_chain"`
	ChainTruncated bool                 `json:"cost_chain_truncated,omitempty"`
}

// ListedTicket is a ticket of GET /tickets with what it cost, its
// sub-tickets' costs included.
type ListedTicket struct {
	crewlet.Ticket
	Cost crewlet.Cost `json:"cost"`
}

// maxTicketWait bounds a POST /tickets long-poll.
const maxTicketWait = 10 * time.Minute

// spawnRefusal refuses a ticket to spawn:ROLE from a principal that the
// route taking authority.Spawn (POST /seats/spawn) would refuse: a ticket
// that spawns a seat is a spawn, whichever route asks for it.
func (s *Server) spawnRefusal(r *http.Request, p Principal, to string) error {
	if !strings.HasPrefix(to, config.SpawnPrefix) {
		return nil
	}
	for _, rt := range s.routes() {
		if rt.action == authority.Spawn && !rt.allows(p, r) {
			return crewlet.Errorf(crewlet.EFORBIDDEN, "a ticket to %s spawns a seat, as POST /seats/spawn does: %s", to, crewlet.ErrorMessage(rt.forbidden(p)))
		}
	}
	return nil
}

func (s *Server) openTicket(w http.ResponseWriter, r *http.Request) {
	var req OpenTicketRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	wait, err := ticketWait(req.Wait)
	if err != nil {
		writeError(w, err)
		return
	}
	from, err := s.sender(r, req.From)
	if err != nil {
		writeError(w, err)
		return
	}
	p := principalOf(r)
	if err := s.spawnRefusal(r, p, req.To); err != nil {
		writeError(w, err)
		return
	}
	if err := s.conversationRefusal(r.Context(), p, req.Conversation); err != nil {
		s.logError(w, r, err)
		return
	}
	ticket, err := s.Tickets.Open(r.Context(), tickets.OpenRequest{
		From: from, To: req.To, Task: req.Task, Conversation: req.Conversation, OpenedBy: p.Name,
	})
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if wait > 0 {
		if ticket, err = s.awaitTicket(r.Context(), ticket, wait); err != nil {
			s.logError(w, r, err)
			return
		}
	}
	status := http.StatusAccepted
	if !ticket.Phase.Open() {
		status = http.StatusOK
	}
	writeJSON(w, status, ticket)
}

// ticketWait is how long a caller asked to wait for a ticket to end
// ("5m"; empty is not at all), or why it cannot.
func ticketWait(wait string) (time.Duration, error) {
	if wait == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(wait)
	if err != nil || d < 0 || d > maxTicketWait {
		return 0, crewlet.Errorf(crewlet.EINVALID, "wait must be a duration from 0s to %s such as \"5m\", got %q", maxTicketWait, wait)
	}
	return d, nil
}

// errNoTicketWatch refuses a wait on a ticket in a process that has no
// ticket watch.
var errNoTicketWatch = crewlet.Errorf(crewlet.EUNAVAILABLE, "this process does not wait on tickets; open the ticket without wait and read it with GET /tickets/{id}")

// awaitTicket waits until the ticket ended or wait passed, and returns it as
// it stands then.
func (s *Server) awaitTicket(ctx context.Context, ticket crewlet.Ticket, wait time.Duration) (crewlet.Ticket, error) {
	if s.TicketWatch == nil {
		return ticket, errNoTicketWatch
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return s.TicketWatch.Await(ctx, ticket)
}

func (s *Server) listTickets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, 50, maxLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	f := store.TicketFilter{From: q.Get("from"), To: q.Get("to"), OpenedBy: q.Get("opened_by"), Phase: crewlet.TicketPhase(q.Get("phase")), Before: q.Get("before"), Limit: limit}
	if p := principalOf(r); p.Role == config.RoleMember {
		f.Party = p.Seat
	}
	switch v := q.Get("open"); v {
	case "", "false":
	case "true":
		f.Open = true
	default:
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "open must be true or false, got %q", v))
		return
	}
	if err := errors.Join(crewlet.CheckText("before", f.Before, crewlet.MaxNameBytes), crewlet.CheckText("opened_by", f.OpenedBy, crewlet.MaxNameBytes)); err != nil {
		writeError(w, err)
		return
	}
	if f.Phase != "" && !f.Phase.Valid() {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "phase must be one of %v, got %q", crewlet.TicketPhases, f.Phase))
		return
	}
	tickets, err := s.Store.Tickets(r.Context(), f)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	ids := make([]string, len(tickets))
	for i, t := range tickets {
		ids[i] = t.ID
	}
	costs, err := s.Store.TicketCosts(r.Context(), ids)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	listed := make([]ListedTicket, len(tickets))
	for i, t := range tickets {
		listed[i] = ListedTicket{Ticket: t, Cost: costs[t.ID]}
	}
	if len(tickets) == limit {
		w.Header().Set(NextBeforeHeader, tickets[len(tickets)-1].ID)
	}
	writeJSON(w, http.StatusOK, listed)
}

func (s *Server) getTicket(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	ticket, err := s.Store.Ticket(r.Context(), id)
	if err == nil {
		err = ticketRefusal(principalOf(r), ticket)
	}
	if err != nil {
		s.logError(w, r, err)
		return
	}
	chain, truncated, err := s.Store.TicketChain(r.Context(), id)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, TicketView{Ticket: ticket, Cost: chain[0].Total, CostChain: chain, ChainTruncated: truncated})
}

func (s *Server) cancelTicket(w http.ResponseWriter, r *http.Request) {
	var req CancelTicketRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	by, err := actingAs(r, req.By, crewlet.ExternalSender)
	if err != nil {
		writeError(w, err)
		return
	}
	reason := "cancelled by " + by
	if req.Reason != "" {
		reason += ": " + req.Reason
	}
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	if err := errors.Join(crewlet.CheckText("reason", req.Reason, crewlet.MaxReasonBytes), crewlet.CheckText("by", req.By, crewlet.MaxNameBytes)); err != nil {
		writeError(w, err)
		return
	}
	if _, ok := s.ticketActor(w, r, id, "cancel"); !ok {
		return
	}
	ticket, ended, err := s.Tickets.End(r.Context(), id, crewlet.TicketCancelled, reason)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if !ended {
		writeError(w, crewlet.Errorf(crewlet.ECONFLICT, "ticket %s is %s already; only a pending or asking ticket can be cancelled", ticket.ID, ticket.Phase))
		return
	}
	writeJSON(w, http.StatusOK, ticket)
}

func (s *Server) answerTicket(w http.ResponseWriter, r *http.Request) {
	var req AnswerTicketRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	by, ok := s.ticketActor(w, r, id, "answer")
	if !ok {
		return
	}
	ticket, err := s.Tickets.Answer(r.Context(), id, req.Text, by)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ticket)
}

// ticketActor is who answers or cancels ticket id for the request's
// principal (ticketActorOf), or writes why not and false.
func (s *Server) ticketActor(w http.ResponseWriter, r *http.Request, id, verb string) (string, bool) {
	ticket, err := s.Store.Ticket(r.Context(), id)
	if err != nil {
		s.logError(w, r, err)
		return "", false
	}
	who, err := ticketActorOf(w, principalOf(r), ticket, verb)
	if err != nil {
		writeError(w, err)
		return "", false
	}
	return who, true
}
