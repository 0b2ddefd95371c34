package api

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
	"golang.org/x/sync/errgroup"
)

// SeatSummary is one line of GET /seats.
type SeatSummary struct {
	Handle string `json:"handle"`
	Role   string `json:"role,omitempty"`
	Kind   string `json:"kind"`
	// Status is the seat workflow's last published status; "absent" when no
	// workflow is open, "unknown" when Temporal cannot be asked (down, or
	// not answering within liveWithin), "human" for human seats.
	Status string `json:"status"`
	Epoch  int64  `json:"epoch"`
	Node   string `json:"node,omitempty"`
	// Spawned marks a seat spawned from its role's pool (POST /seats/spawn,
	// a ticket to spawn:ROLE), reaped once idle.
	Spawned bool `json:"spawned,omitempty"`
	// Health is what the health duty last concluded about an agent seat
	// ("unknown" before its first pass), with its cause and since when.
	Health      crewlet.SeatHealth `json:"health,omitempty"`
	HealthCause string             `json:"health_cause,omitempty"`
	HealthSince *time.Time         `json:"health_since,omitempty"`
	// Turn is the id of the turn an agent seat runs now
	// ("turn/{handle}/{work key}", GET /turns/{handle}/{work key} reads it)
	// and TurnSince when it started; both empty when none runs.
	Turn      string     `json:"turn,omitempty"`
	TurnSince *time.Time `json:"turn_since,omitempty"`
	// Waiting is how many messages wait in an agent seat's mailbox, unread
	// or read and not yet answered; WaitingSince is when the oldest of them
	// was published.
	Waiting      int64      `json:"waiting"`
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
}

// SeatDetail is GET /seats/{handle}: the org entry, the Postgres row and the
// live state from the seat's state query.
type SeatDetail struct {
	Seat       config.Seat        `json:"seat"`
	Row        *store.SeatRow     `json:"row,omitempty"`
	State      *crewlet.SeatState `json:"state,omitempty"`
	StateError string             `json:"state_error,omitempty"`
	// Health is the health duty's last word on the seat, and Transitions
	// its latest changes, newest first.
	Health            *crewlet.SeatHealthRow     `json:"health,omitempty"`
	HealthTransitions []crewlet.HealthTransition `json:"health_transitions,omitempty"`
	// Tickets are the seat's open tickets both ways; a delegated one
	// "asking" is a question waiting on this seat.
	Tickets SeatTickets `json:"tickets"`
	// Approvals are the seat's tool calls waiting for a decision.
	Approvals []crewlet.Approval `json:"approvals"`
}

// SeatTickets are a seat's open tickets: those it delegated and those it
// serves.
type SeatTickets struct {
	Delegated []crewlet.Ticket `json:"delegated"`
	Serving   []crewlet.Ticket `json:"serving"`
}

func (s *Server) listSeats(w http.ResponseWriter, r *http.Request) {
	org := s.Org.Now()
	var agents []string
	for _, seat := range org.AgentSeats() {
		agents = append(agents, seat.Handle)
	}
	// Four stores, read at once: the answer takes as long as the slowest
	// (the visibility list, at 1,000 seats), not as long as all four.
	var (
		rows        map[string]store.SeatRow
		live        map[string]seatclient.Live
		liveUnknown bool
		health      map[string]store.HealthRecord
		backlogs    map[string]crewlet.Backlog
	)
	err := concurrently(r.Context(),
		func(ctx context.Context) (err error) { rows, err = s.Store.Seats(ctx); return err },
		func(ctx context.Context) error {
			// Temporal down or lost is when the rest of the answer
			// matters most (the mail waiting, the epochs, the health
			// last recorded), so its part is "unknown", not the
			// whole answer an error.
			lctx, cancel := context.WithTimeout(ctx, liveWithin)
			defer cancel()
			var err error
			if live, err = s.Seats.Live(lctx); err != nil && ctx.Err() == nil {
				s.Log.WarnContext(ctx, "seat_statuses_unknown", "error", err)
				live, liveUnknown = nil, true
				return nil
			}
			return err
		},
		func(ctx context.Context) (err error) { health, err = s.Store.SeatHealth(ctx); return err },
		func(ctx context.Context) (err error) { backlogs, err = s.Mailbox.Backlogs(ctx, agents); return err })
	if err != nil {
		s.logError(w, r, err)
		return
	}
	out := make([]SeatSummary, 0, len(org.Seats))
	for _, seat := range org.Seats {
		sum := SeatSummary{Handle: seat.Handle, Role: seat.Role, Kind: seat.Kind, Spawned: seat.Spawned, Status: string(crewlet.StatusAbsent)}
		if seat.Kind == string(crewlet.SeatHuman) {
			sum.Status = "human"
		} else {
			if liveUnknown {
				sum.Status = statusUnknown
			}
			if l, ok := live[seat.Handle]; ok {
				sum.Status, sum.Turn = string(l.Status), l.Turn
				if l.Turn != "" {
					sum.TurnSince = &l.TurnSince
				}
			}
			if b := backlogs[seat.Handle]; b.Waiting > 0 {
				sum.Waiting, sum.WaitingSince = b.Waiting, &b.Oldest
			}
			sum.Health = crewlet.HealthUnknown
			if h, ok := health[seat.Handle]; ok {
				state, cause, since := shownHealth(h.SeatHealthRow, org.Health.Interval, time.Now())
				sum.Health, sum.HealthCause, sum.HealthSince = state, cause, &since
			}
		}
		if row, ok := rows[seat.Handle]; ok {
			sum.Epoch, sum.Node = row.Epoch, row.Node
		}
		out = append(out, sum)
	}
	writeJSON(w, http.StatusOK, out)
}

// healthStaleAfter is how many health intervals (at least
// healthStaleFloor) a recorded health outlives before GET /seats calls it
// unknown: the health duty is a Temporal Schedule, and a Temporal that is
// down or lost its state runs no pass, so the last word would stand for
// good and say "ok" of seats that answer nothing.
const (
	healthStaleAfter = 3
	healthStaleFloor = time.Minute
)

// shownHealth is a seat's recorded health as GET /seats shows it at now:
// as recorded, or unknown when no pass has checked it for too long.
func shownHealth(h crewlet.SeatHealthRow, interval time.Duration, now time.Time) (crewlet.SeatHealth, string, time.Time) {
	stale := max(healthStaleAfter*interval, healthStaleFloor)
	if h.CheckedAt.IsZero() || now.Sub(h.CheckedAt) <= stale {
		return h.State, h.Cause, h.Since
	}
	return crewlet.HealthUnknown, fmt.Sprintf("not checked for %s: the health duty (every %s) has not run; is Temporal up, and a worker build current? Last recorded: %s: %s",
		now.Sub(h.CheckedAt).Round(time.Second), interval, h.State, h.Cause), h.CheckedAt
}

// liveWithin bounds GET /seats' list of the seats' workflows, so a
// Temporal that hangs makes the statuses unknown, not the answer late.
const liveWithin = 3 * time.Second

// statusUnknown is a seat's status when Temporal cannot be asked.
const statusUnknown = "unknown"

func (s *Server) orgSeat(w http.ResponseWriter, r *http.Request) (config.Seat, bool) {
	handle, ok := pathID(w, r, "handle")
	if !ok {
		return config.Seat{}, false
	}
	seat, err := config.SeatIn(r.Context(), s.Org, handle)
	if err != nil {
		writeError(w, err)
		return config.Seat{}, false
	}
	return seat, true
}

func (s *Server) getSeat(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	detail := SeatDetail{Seat: seat}
	if row, err := s.Store.Seat(r.Context(), seat.Handle); err == nil {
		detail.Row = &row
	} else if crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		s.logError(w, r, err)
		return
	}
	for _, list := range []struct {
		into   *[]crewlet.Ticket
		filter store.TicketFilter
	}{
		{&detail.Tickets.Delegated, store.TicketFilter{From: seat.Handle, Open: true}},
		{&detail.Tickets.Serving, store.TicketFilter{To: seat.Handle, Open: true}},
	} {
		tickets, err := s.Store.Tickets(r.Context(), list.filter)
		if err != nil {
			s.logError(w, r, err)
			return
		}
		*list.into = append([]crewlet.Ticket{}, tickets...)
	}
	if seat.Kind == string(crewlet.SeatAgent) {
		approvals, err := s.Store.Approvals(r.Context(), store.ApprovalFilter{Handle: seat.Handle, Status: crewlet.ApprovalPending, Limit: wire.MaxApprovals})
		if err != nil {
			s.logError(w, r, err)
			return
		}
		detail.Approvals = approvals
		if err := s.seatHealth(r, &detail); err != nil {
			s.logError(w, r, err)
			return
		}
		if st, err := s.Views.State(r.Context(), seat.Handle); err == nil {
			detail.State = &st
		} else {
			detail.StateError = crewlet.ErrorMessage(err)
		}
	}
	writeJSON(w, http.StatusOK, detail)
}

// healthTransitionsShown is how many transitions GET /seats/{handle} shows.
const healthTransitionsShown = 20

// seatHealth fills in the seat's health and its latest transitions.
func (s *Server) seatHealth(r *http.Request, detail *SeatDetail) error {
	rows, err := s.Store.SeatHealth(r.Context(), detail.Seat.Handle)
	if err != nil {
		return err
	}
	if h, ok := rows[detail.Seat.Handle]; ok {
		detail.Health = &h.SeatHealthRow
	}
	detail.HealthTransitions, err = s.Store.HealthTransitions(r.Context(), detail.Seat.Handle, healthTransitionsShown)
	return err
}

// SendMessageRequest is the body of POST /seats/{handle}/messages.
type SendMessageRequest struct {
	Text string `json:"text"`
	// From is the sending seat's handle; empty sends as "operator".
	From string `json:"from"`
	// Conversation continues a conversation; empty starts a new one.
	Conversation string `json:"conversation"`
	// ChatID is the message's identity on the chat system it came from, if
	// any: the same chat message sent twice is answered once.
	ChatID string `json:"chat_id"`
}

// sendMessage leaves every check of the message to delivery.Send, which
// looks the seat up once and refuses empty text.
func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request) {
	handle, ok := pathID(w, r, "handle")
	if !ok {
		return
	}
	var req SendMessageRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	from, err := s.sender(r, req.From)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.conversationRefusal(r.Context(), principalOf(r), req.Conversation); err != nil {
		s.logError(w, r, err)
		return
	}
	msg, err := s.Delivery.Send(r.Context(), delivery.SendRequest{To: handle, From: from, Text: req.Text, Conversation: req.Conversation, ChatID: req.ChatID})
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, msg)
}

func (s *Server) inbox(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	limit, err := limitParam(r, 20, maxLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	before, err := beforeParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	msgs, err := s.Delivery.Inbox(r.Context(), seat.Handle, before, limit)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	// Held to readBudget like the other large reads: the newest entries
	// fit, and the cursor leads to the older ones cut.
	msgs = msgs[len(msgs)-fit(len(msgs), readBudget, func(i int) int { return jsonSize(msgs[len(msgs)-1-i]) }):]
	if len(msgs) > 0 {
		w.Header().Set(NextBeforeHeader, msgs[0].StreamID)
	}
	// The person reading their own mail has read it up to the newest entry
	// shown; anyone else reading it (an operator, an admin) has not read it
	// for them. A mark not kept only keeps mail longer, so the read goes on.
	if principalOf(r).Seat == seat.Handle && len(msgs) > 0 {
		if err := s.Delivery.MarkRead(r.Context(), seat.Handle, msgs[len(msgs)-1].StreamID); err != nil {
			s.Log.WarnContext(r.Context(), "person_mail_read_mark_failed", "seat", seat.Handle, "error", err)
		}
	}
	writeJSON(w, http.StatusOK, msgs)
}

// SignalResponse answers pause, resume and drain: the signal was delivered;
// the seat applies it at its next step (GET /seats/{handle} shows when).
type SignalResponse struct {
	Handle string `json:"handle"`
	Signal string `json:"signal"`
}

func (s *Server) pauseSeat(w http.ResponseWriter, r *http.Request) {
	var req crewlet.PauseRequest
	s.signalSeat(w, r, crewlet.SignalPause, &req, &req.By, func(h string) error { return s.Seats.Pause(r.Context(), h, req) })
}

func (s *Server) resumeSeat(w http.ResponseWriter, r *http.Request) {
	var req crewlet.ResumeRequest
	s.signalSeat(w, r, crewlet.SignalResume, &req, &req.By, func(h string) error { return s.Seats.Resume(r.Context(), h, req) })
}

func (s *Server) drainSeat(w http.ResponseWriter, r *http.Request) {
	var req crewlet.DrainRequest
	s.signalSeat(w, r, crewlet.SignalDrain, &req, &req.By, func(h string) error { return s.Seats.Drain(r.Context(), h, req) })
}

// signalSeat sends a seat a signal whose request's by (who asks) is the
// caller's principal.
func (s *Server) signalSeat(w http.ResponseWriter, r *http.Request, signal string, req any, by *string, send func(handle string) error) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	if err := readJSON(r, req); err != nil {
		writeError(w, err)
		return
	}
	who, err := actingAs(r, *by, "")
	if err != nil {
		writeError(w, err)
		return
	}
	*by = who
	if seat.Kind != string(crewlet.SeatAgent) {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "%s is a human seat; only agent seats can be paused, resumed or drained", seat.Handle))
		return
	}
	// Who acts is a principal's name, held to the door's name rule; the
	// seat client checks the rest of the payload as the seat will.
	if err := checkPrincipal(who); err != nil {
		writeError(w, err)
		return
	}
	if err := send(seat.Handle); err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, SignalResponse{Handle: seat.Handle, Signal: signal})
}

// checkPrincipal refuses a name for who acts that is not short, valid text
// in the id charset; empty (nobody named) passes. Only a request without a
// token names itself, in its body.
func checkPrincipal(name string) error {
	if name == "" {
		return nil
	}
	if err := crewlet.CheckText("by", name, crewlet.MaxNameBytes); err != nil {
		return err
	}
	return crewlet.CheckID("by", name)
}

// concurrently runs reads at once and returns the first error. A read
// that panics fails with an error, as a handler's panic does under the
// router's Recoverer, instead of taking the process down from a goroutine
// of its own.
func concurrently(ctx context.Context, reads ...func(context.Context) error) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, read := range reads {
		g.Go(func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("read panicked: %v\n%s", p, debug.Stack())
				}
			}()
			return read(ctx)
		})
	}
	return g.Wait()
}
