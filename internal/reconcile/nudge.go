package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
)

// The idle nudge (docs/operations.md, "Idle nudge") wakes a seat that
// delegated work and then went quiet. It counts the tickets a seat opened,
// not those it serves: a ticket it serves already reached it as a message
// that starts a turn, and that turn's answer settles it, so a seat that
// serves an open ticket and runs no turn is stuck (held, paused, failing),
// which a nudge queued behind the same mail cannot fix. A delegator's open
// tickets are work it drives that nothing wakes it for until they end: the
// gap fleetd's idle-lead nudge fills.

// NudgeEventKind is the seat event an idle nudge is recorded as; its event
// id is the nudge's (NudgeEventID).
const NudgeEventKind = "idle_nudge"

// NudgeEventID is the event id of the nudge of handle's quiet period that
// began at quietSince: one per quiet period, so publishing it again (a pass
// retried, two passes) adds nothing.
func NudgeEventID(handle string, quietSince time.Time) string {
	return fmt.Sprintf("%s%s-%d", nudgeEventPrefix, handle, quietSince.UnixMicro())
}

// nudgeEventPrefix starts every nudge's event id: a turn that answered only
// nudges does not end the seat's quiet period, so a nudge that moves
// nothing is not followed by another.
const nudgeEventPrefix = "idle-nudge-"

// nudgeTicketsNamed bounds the ticket ids one nudge lists.
const nudgeTicketsNamed = 10

// nudge sends one idle nudge to each seat of a role with idle_nudge on that
// is idle (its workflow says so: a seat paused, held or in a turn is never
// nudged), has tickets it opened still open, and has been quiet for the
// role's idle_nudge.after: at most one per quiet period, which only the
// seat's own activity ends (store.QuietDelegators).
func (r *Reconciler) nudge(ctx context.Context, org *config.Config, running map[string]crewlet.SeatStatus,
	report *crewlet.ReconcileReport) error {
	after := map[string]time.Duration{}
	var handles []string
	for _, s := range org.AgentSeats() {
		if a := org.Roles[s.Role].IdleNudge.After; a > 0 && running[s.Handle] == crewlet.StatusIdle {
			after[s.Handle] = a
			handles = append(handles, s.Handle)
		}
	}
	if len(handles) == 0 {
		return nil
	}
	deferred := func(err error) error {
		report.Deferred = append(report.Deferred, crewlet.ReconcileDeferral{Action: "nudge",
			Reason: "the seats' tickets, turns or past nudges cannot be read"})
		return err
	}
	quiet, err := r.store.QuietDelegators(ctx, handles, nudgeEventPrefix)
	if err != nil {
		return deferred(err)
	}
	var due []store.QuietDelegator
	var ids []string
	for _, q := range quiet {
		if q.Now.Sub(q.QuietSince) >= after[q.Handle] {
			due = append(due, q)
			ids = append(ids, NudgeEventID(q.Handle, q.QuietSince))
		}
	}
	if len(due) == 0 {
		return nil
	}
	sent, err := r.store.SeatEventsRecorded(ctx, NudgeEventKind, ids)
	if err != nil {
		return deferred(err)
	}
	var errs []error
	for i, q := range due {
		if sent[ids[i]] {
			continue
		}
		msg := crewlet.Message{
			EventID: ids[i], Type: crewlet.MessageChat, From: crewlet.TicketSender, To: q.Handle,
			Conversation: "idle-nudge-" + q.Handle, Body: nudgeText(q), SentAt: q.Now.UTC(),
		}
		if _, err := r.delivery.Deliver(ctx, msg); err != nil {
			errs = append(errs, fmt.Errorf("nudge %s: %w", q.Handle, err))
			continue
		}
		// Recorded after the mail is durable: a pass that dies in between
		// publishes the same event id again, which adds nothing.
		if err := r.store.RecordSeatEvent(ctx, q.Handle, NudgeEventKind, ids[i], map[string]any{
			"quiet_since": q.QuietSince.UTC(), "open_tickets": len(q.OpenTickets),
		}); err != nil {
			errs = append(errs, err)
		}
		r.log.InfoContext(ctx, "seat_nudged", "seat", q.Handle, "quiet_since", q.QuietSince.UTC(), "open_tickets", len(q.OpenTickets))
		report.Nudged = append(report.Nudged, q.Handle)
	}
	return errors.Join(errs...)
}

// nudgeText is what a nudged seat reads.
func nudgeText(q store.QuietDelegator) string {
	named := q.OpenTickets[:min(len(q.OpenTickets), nudgeTicketsNamed)]
	list := strings.Join(named, ", ")
	if more := len(q.OpenTickets) - len(named); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("You have been quiet for %s, and %d tickets you opened are still open: %s. "+
		"Check on them: see where each stands, answer what was asked, cancel or hand on what is stuck, "+
		"and carry on with the work they are part of.",
		q.Now.Sub(q.QuietSince).Round(time.Second), len(q.OpenTickets), list)
}
