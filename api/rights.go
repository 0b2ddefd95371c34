package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
)

// Who may do what (docs/operations.md, "Authentication and authority"):
// viewer, operator and admin hold their right company-wide, a member holds
// operate over its own seat's part of the company and nothing else. A
// route's action's right (internal/authority) says how much it needs, its
// scope what it acts on; the door decides what the path tells (a seat by
// {handle}, the fleet), and the handler what needs the record (a
// conversation's parties, a ticket's delegator, an approval's policy) with
// the functions here.

// rule is the route's row of the authority table.
func (rt route) rule() authority.Rule { return authority.Of(rt.action) }

// allows reports whether p's role lets it through the door of rt: a
// viewer, operator or admin by its right; a member by the route's scope,
// up to operate, and on a seat's route only its own seat.
func (rt route) allows(p Principal, r *http.Request) bool {
	rule := rt.rule()
	if p.Role != config.RoleMember {
		return rightsOf[p.Role] >= rule.Right
	}
	switch {
	case rule.Right > authority.Operate || rule.Scope == authority.ScopeFleet:
		return false
	case rule.Scope == authority.ScopeSeat:
		return chi.URLParam(r, "handle") == p.Seat
	}
	return true
}

// forbidden is why allows refused p.
func (rt route) forbidden(p Principal) error {
	right := rt.rule().Right
	if p.Role != config.RoleMember {
		return crewlet.Errorf(crewlet.EFORBIDDEN, "role %s may not %s: %s %s needs the right to %s", p.Role, right, rt.method, rt.pattern, right)
	}
	if rt.rule().Scope == authority.ScopeSeat {
		return crewlet.Errorf(crewlet.EFORBIDDEN, "%s is a member for seat %s: %s %s of another seat needs the right to %s company-wide (a viewer's or operator's token)",
			p.Name, p.Seat, rt.method, rt.pattern, right)
	}
	return crewlet.Errorf(crewlet.EFORBIDDEN, "role member acts for its own seat only: %s %s acts on the whole company and needs the right to %s company-wide",
		rt.method, rt.pattern, right)
}

// MayReadTranscript reports whether p may read the words of the seat's
// transcript (model output, tool arguments and results, answers) in a live
// stream; without it the stream tells what happened and not what was said.
// A member reads its own seat's; any other principal with the right to
// read reads every seat's.
func MayReadTranscript(p Principal, seat string) bool {
	if p.Role == config.RoleMember {
		return seat == p.Seat
	}
	return p.Anonymous || rightsOf[p.Role] >= authority.Read
}

// conversationRefusal is why p may not read or write in conversation id:
// a member only in one its seat sent or received a message in. One not
// recorded yet has nobody in it, so it refuses nobody (reading it is a
// 404 of its own).
func (s *Server) conversationRefusal(ctx context.Context, p Principal, id string) error {
	if p.Role != config.RoleMember || id == "" {
		return nil
	}
	if err := crewlet.CheckID("conversation", id); err != nil {
		return err
	}
	exists, party, err := s.Store.ConversationParty(ctx, id, p.Seat)
	switch {
	case err != nil:
		return err
	case exists && !party:
		return crewlet.Errorf(crewlet.EFORBIDDEN, "%s is a member for seat %s, which is not in conversation %s; a member reads and writes only in its seat's conversations",
			p.Name, p.Seat, id)
	case !exists && crewlet.DerivedConversation(id):
		// Started by the member, it would be the member's to read when
		// crewlet later starts the schedule fire's or the seat's message's
		// conversation of that id.
		return crewlet.Errorf(crewlet.EFORBIDDEN, "conversation %s is of the shape crewlet names the conversations it starts (%s…, %s…); a member cannot start one: leave conversation empty to start a new one",
			id, crewlet.ScheduleEventPrefix, crewlet.ToolEventPrefix)
	}
	return nil
}

// ticketRefusal is why p may not read ticket t: a member reads only the
// tickets its seat opened or serves.
func ticketRefusal(p Principal, t crewlet.Ticket) error {
	if p.Role != config.RoleMember || t.From == p.Seat || t.To == p.Seat {
		return nil
	}
	return crewlet.Errorf(crewlet.EFORBIDDEN, "%s is a member for seat %s: ticket %s is between %s and %s", p.Name, p.Seat, t.ID, t.From, t.To)
}

// ticketActorOf is who answers or cancels ticket t for p, by the one rule
// the seat tools' answer follows too (authority.TicketActor); an admin's
// override is said on the audit row.
func ticketActorOf(w http.ResponseWriter, p Principal, t crewlet.Ticket, verb string) (string, error) {
	who, override, err := authority.TicketActor(authority.Actor{Name: p.Name, Role: p.Role, Seat: p.Seat}, t, verb)
	if override {
		noteAudit(w, fmt.Sprintf("admin override: %s %ss ticket %s, which %s delegated", p.Name, verb, t.ID, t.From))
	}
	return who, err
}

// approverNames are the names an approval policy may know a member by:
// its seat, and its seat's role as role:R.
func approverNames(org *config.Config, p Principal) []string {
	names := []string{p.Seat}
	if seat, ok := org.Seat(p.Seat); ok && seat.Role != "" {
		names = append(names, config.ApprovalRolePrefix+seat.Role)
	}
	return names
}

// noteAudit puts a note on the audit row of an action that is allowed but
// worth saying why (an admin override); w is the guard's recorder.
func noteAudit(w http.ResponseWriter, note string) {
	if rec, ok := w.(*statusRecorder); ok {
		rec.note = note
	}
}

// noteOutcome says on the audit row that the action failed or was refused
// (outcome) and why, for an answer whose HTTP status does not say so: a
// JSON-RPC error answered with 200.
func noteOutcome(w http.ResponseWriter, outcome, reason string) {
	if rec, ok := w.(*statusRecorder); ok {
		rec.outcome, rec.note = outcome, reason
	}
}
