package activities

import (
	"context"
	"log/slog"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tickets"
)

// Mail holds the mailbox activities. They are short Redis and Postgres steps
// and run as local activities, fenced all the same.
type Mail struct {
	Store   *store.Store
	Mailbox *mailbox.Mailbox
	// Tickets fails the ticket of a request that is dead-lettered.
	Tickets *tickets.Service
	Log     *slog.Logger
	// Metrics counts mail read, acked and dead-lettered; nil counts none.
	Metrics *metrics.Metrics
	// Org tells PrepareTurn each seat's busy policy; nil is enqueue.
	Org config.Source
}

// ReadMail hands the seat its next entries, by reference. Entries past their
// delivery budget go to the dead-letter stream instead, each recorded in the
// seat's event history. Asked to, it prepares the turn of what it read in
// the same step (PrepareTurn).
func (a *Mail) ReadMail(ctx context.Context, in crewlet.ReadMailInput) (crewlet.ReadMailOutput, error) {
	res, err := a.Mailbox.Read(ctx, mailbox.ReadRequest{
		Handle: in.Handle, Consumer: in.Consumer, Max: in.Max, ClearAwake: in.ClearAwake, NewOnly: in.NewOnly, LastError: in.LastError,
	})
	for _, dl := range res.DeadLettered {
		a.Log.Warn("mail_dead_lettered", "seat", in.Handle, "event_id", dl.Message.EventID, "deliveries", dl.Deliveries, "reason", dl.Reason)
		a.recordEvent(ctx, in.Handle, "dead_lettered", dl.Message.EventID, map[string]any{
			"reason": dl.Reason, "deliveries": dl.Deliveries, "stream_id": dl.StreamID,
		})
		a.deadLettered(ctx, in.Handle, dl.Message, dl.Reason)
	}
	if err != nil {
		return crewlet.ReadMailOutput{}, err
	}
	a.Metrics.MailRead(len(res.Messages))
	out := crewlet.ReadMailOutput{Lag: res.Lag, Mail: make([]crewlet.MailRef, len(res.Messages))}
	for i, m := range res.Messages {
		out.Mail[i] = crewlet.MailRef{StreamID: m.StreamID, EventID: m.EventID, Trace: m.Trace}
	}
	if in.Prepare && len(out.Mail) > 0 {
		prep, err := a.prepare(ctx, in.Handle, out.Mail, res.Messages)
		if err != nil {
			return crewlet.ReadMailOutput{}, err
		}
		out.Prepared = &prep
	}
	return out, nil
}

// PrepareTurn drops the entries a turn must not run: those the completion
// ledger holds (by event id or chat id) and those that no longer exist. Each
// skip is logged as turn_trigger_skipped and recorded in the seat's event
// history. An unreadable ledger skips nothing (fail open).
func (a *Mail) PrepareTurn(ctx context.Context, in crewlet.PrepareTurnInput) (crewlet.PrepareTurnOutput, error) {
	streamIDs := make([]string, len(in.Mail))
	for i, ref := range in.Mail {
		streamIDs[i] = ref.StreamID
	}
	msgs, err := a.Mailbox.Get(ctx, in.Handle, streamIDs)
	if err != nil {
		return crewlet.PrepareTurnOutput{}, err
	}
	return a.prepare(ctx, in.Handle, in.Mail, msgs)
}

// prepare is PrepareTurn over the entries' messages as read.
func (a *Mail) prepare(ctx context.Context, handle string, refs []crewlet.MailRef, msgs []crewlet.Message) (crewlet.PrepareTurnOutput, error) {
	byStream := map[string]crewlet.Message{}
	var keys []string
	for _, m := range msgs {
		byStream[m.StreamID] = m
		keys = append(keys, crewlet.LedgerKeys(m)...)
	}
	done, err := a.Store.LedgerRecorded(ctx, handle, keys)
	if err != nil {
		a.Log.Warn("ledger_unreadable", "seat", handle, "error", err)
		done = nil
	}
	var out crewlet.PrepareTurnOutput
	for _, ref := range refs {
		m, ok := byStream[ref.StreamID]
		reason := ""
		switch {
		case !ok:
			reason = "entry no longer exists"
		default:
			for _, k := range crewlet.LedgerKeys(m) {
				if done[k] {
					reason = "completion ledger holds " + k
					break
				}
			}
		}
		if reason == "" {
			out.Run = append(out.Run, ref)
			continue
		}
		a.Log.Info("turn_trigger_skipped", "seat", handle, "event_id", ref.EventID, "reason", reason)
		a.recordEvent(ctx, handle, "turn_trigger_skipped", ref.EventID, map[string]any{"reason": reason})
		out.Skipped = append(out.Skipped, ref)
	}
	out.OnBusy = a.onBusy(handle)
	return out, nil
}

// onBusy is the seat's role's busy policy as the turn starts, "" for
// enqueue: a seat that enqueues records nothing new in its history.
func (a *Mail) onBusy(handle string) string {
	if a.Org == nil {
		return ""
	}
	org := a.Org.Now()
	seat, ok := org.Seat(handle)
	if !ok {
		return ""
	}
	if p := org.Roles[seat.Role].OnBusy; p != crewlet.OnBusyEnqueue {
		return p
	}
	return ""
}

// AckMail marks entries handled. The seat calls it only after the completion
// ledger recorded them.
func (a *Mail) AckMail(ctx context.Context, in crewlet.AckMailInput) error {
	return ackEntries(ctx, a.Mailbox, a.Metrics, in.Handle, in.StreamIDs)
}

// ackEntries acks a seat's entries that the completion ledger holds: the
// step of AckMail, and of FinishTurn when its seat asks it to ack.
func ackEntries(ctx context.Context, mb *mailbox.Mailbox, m *metrics.Metrics, handle string, streamIDs []string) error {
	if err := mb.Ack(ctx, handle, streamIDs); err != nil {
		return err
	}
	m.MailAcked(len(streamIDs))
	crashPoint(testhook.AfterAck, handle)
	return nil
}

// recordEvent writes to the seat's event history; it only reports, so a
// failure is logged and never breaks the path it observes.
func (a *Mail) recordEvent(ctx context.Context, seat, kind, eventID string, detail map[string]any) {
	if err := a.Store.RecordSeatEvent(ctx, seat, kind, eventID, detail); err != nil {
		a.Log.Warn("seat_event_unrecorded", "seat", seat, "kind", kind, "error", err)
	}
}

// TicketNote writes one note in a person's inbox about the tickets they
// opened that changed; the activity of the PersonNotes workflow.
func (a *Mail) TicketNote(ctx context.Context, in crewlet.TicketNoteInput) error {
	return a.Tickets.Note(ctx, in)
}

// DeadLetterMail moves triggers that can never succeed (the provider refused
// their turn as a bad request) to the dead letters at once, each recorded in
// the seat's event history; a ticket's request fails its ticket.
func (a *Mail) DeadLetterMail(ctx context.Context, in crewlet.DeadLetterMailInput) error {
	moved, err := a.Mailbox.DeadLetterNow(ctx, in.Handle, in.StreamIDs, in.Reason)
	if err != nil {
		return err
	}
	for _, m := range moved {
		a.Log.Warn("mail_dead_lettered", "seat", in.Handle, "event_id", m.EventID, "reason", in.Reason)
		a.recordEvent(ctx, in.Handle, "dead_lettered", m.EventID, map[string]any{"reason": in.Reason, "stream_id": m.StreamID})
		a.deadLettered(ctx, in.Handle, m, in.Reason)
	}
	return nil
}

// deadLettered counts a message the seat gave up on and fails the ticket
// of a request that was dead-lettered: nobody will serve it now, and the
// delegator hears why. A failure here is logged; the request is in the dead
// letters, and a requeue serves the ticket only while it is still open.
func (a *Mail) deadLettered(ctx context.Context, handle string, m crewlet.Message, reason string) {
	a.Metrics.DeadLettered(1)
	if m.Type != crewlet.MessageTicket {
		return
	}
	if _, _, err := a.Tickets.End(ctx, m.Ticket, crewlet.TicketFailed, "its request was dead-lettered: "+reason); err != nil {
		a.Log.Warn("ticket_unfailed", "seat", handle, "ticket", m.Ticket, "error", err)
	}
}
