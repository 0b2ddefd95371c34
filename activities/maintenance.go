package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/reconcile"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
)

// Maintenance is the maintenance duty's activity.
type Maintenance struct {
	Store   *store.Store
	Mailbox *mailbox.Mailbox
	Org     *config.Config
	// Tickets fails the tickets of seats gone from the org and expires old
	// ones.
	Tickets *tickets.Service
	// Reconciler stops the workflows of seats gone from the org.
	Reconciler *reconcile.Reconciler
	// NodeID is the node the activity runs on, and LiveWithin the heartbeat
	// timeout: the sweep waits while live nodes of other ids run an org file
	// naming other seats.
	NodeID     string
	LiveWithin time.Duration
	Log        *slog.Logger
}

// Maintenance sweeps the mailbox registry against the org (stamping seats
// first seen missing, clearing those back), retires mailboxes absent for
// longer than the grace period, and trims the completion ledger, handled
// mailbox entries, and every other kind of record that grows, each at its own
// retention. A registry it cannot read retires nothing, and neither does a
// sweep while live nodes disagree about which seats exist.
func (a *Maintenance) Maintenance(ctx context.Context) (crewlet.MaintenanceOutput, error) {
	var out crewlet.MaintenanceOutput
	var errs []error
	if err := a.sweep(ctx, &out); err != nil {
		errs = append(errs, err)
	}
	var err error
	if out.TicketsExpired, err = a.Tickets.Expire(ctx, a.Org.Tickets.ExpireAfter); err != nil {
		errs = append(errs, err)
	}
	if out.AuditTrimmed, err = a.Store.TrimAudit(ctx, a.Org.Maintenance.AuditRetention); err != nil {
		errs = append(errs, err)
	}
	if out.LedgerTrimmed, err = a.Store.TrimLedger(ctx, a.Org.Maintenance.LedgerRetention); err != nil {
		errs = append(errs, err)
	}
	for _, seat := range a.Org.Seats {
		if seat.Kind == string(crewlet.SeatHuman) {
			// Nothing acks a person's mail, so Trim would keep it all.
			n, err := a.Mailbox.TrimHuman(ctx, seat.Handle, int64(a.Org.Mailbox.HumanKeep))
			if err != nil {
				errs = append(errs, err)
			}
			out.HumanEntriesTrimmed += n
			continue
		}
		n, err := a.Mailbox.Trim(ctx, seat.Handle, int64(a.Org.Mailbox.KeepAcked), a.Org.Mailbox.KeepAckedFor)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.EntriesTrimmed += n
	}
	if out.DeadLettersTrimmed, err = a.Mailbox.TrimDeadLetters(ctx, int64(a.Org.Mailbox.DeadLetterKeep)); err != nil {
		errs = append(errs, err)
	}
	turns, err := a.Store.TrimTurns(ctx, a.Org.Maintenance.TurnRetention)
	if err != nil {
		errs = append(errs, err)
	}
	out.TurnsTrimmed = turns.Turns
	m := a.Org.Maintenance
	// Counts of the tables that did trim are kept when another fails.
	rest, err := a.Store.TrimRetention(ctx, store.Retention{
		Messages: m.MessageRetention, Events: m.EventRetention, Diary: m.DiaryRetention,
		Episodes: m.EpisodeRetention, Counterparties: m.CounterpartyRetention, Nodes: m.NodeRetention,
	})
	if err != nil {
		errs = append(errs, err)
	}
	out.MessagesTrimmed, out.ConversationsTrimmed, out.SummariesTrimmed = rest.Messages, rest.Conversations, rest.Summaries
	out.EventsTrimmed, out.DiaryTrimmed, out.EpisodesTrimmed = rest.Events, rest.Diary, rest.Episodes
	out.CounterpartiesTrimmed, out.NodesTrimmed = rest.Counterparties, rest.Nodes
	out.HealthTransitionsTrimmed = rest.HealthTransitions
	if out.LedgerTrimmed > 0 || out.EntriesTrimmed > 0 || out.HumanEntriesTrimmed > 0 || out.DeadLettersTrimmed > 0 ||
		turns != (store.TurnsTrimmed{}) || rest != (store.RetentionTrimmed{}) {
		a.Log.Info("retention_trimmed", "ledger_rows", out.LedgerTrimmed, "mailbox_entries", out.EntriesTrimmed,
			"human_mailbox_entries", out.HumanEntriesTrimmed, "dead_letters", out.DeadLettersTrimmed,
			"turns", turns.Turns, "turn_messages", turns.Messages, "turn_rounds", turns.Rounds,
			"tool_calls", turns.ToolCalls, "usage_counters", turns.Counters, "profile_slots", turns.Slots,
			"messages", rest.Messages, "conversations", rest.Conversations, "conversation_summaries", rest.Summaries,
			"seat_events", rest.Events, "diary_entries", rest.Diary, "episodes", rest.Episodes,
			"counterparty_profiles", rest.Counterparties, "node_rows", rest.Nodes, "seat_health_transitions", rest.HealthTransitions)
	}
	return out, errors.Join(errs...)
}

// sweep stops the workflows of seats the org lacks, stamps their mailboxes
// absent and fails their tickets, clears the stamps of seats back in the
// org, and retires the mailboxes absent past the grace. It does none of it
// while live nodes run an org file naming other seats: one file is stale,
// and a sweep by it would stop a seat just added, fail its tickets, or
// retire its mailbox.
func (a *Maintenance) sweep(ctx context.Context, out *crewlet.MaintenanceOutput) error {
	others, err := a.Store.NodesOnAnotherOrg(ctx, a.LiveWithin, a.NodeID, a.Org.SeatsDigest())
	if err != nil {
		return err
	}
	if len(others) > 0 {
		out.SweepWaitsFor = others
		a.Log.Warn("mailbox_sweep_deferred", "nodes_on_another_org", others,
			"reason", "live nodes run an org file naming other seats; no seat is stopped or stamped absent until they agree")
		return nil
	}
	// A seat removed while a worker on another org file was live was not
	// stopped at boot: the first pass after every worker agrees stops it.
	stopped, others, err := a.Reconciler.StopRemovedSeats(ctx, a.Store, a.NodeID)
	if len(others) > 0 {
		// A worker on another file started since the check above.
		out.SweepWaitsFor = others
		return nil
	}
	out.SeatsStopped = stopped
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	absent, returned, err := a.Store.SweepMailboxes(ctx, a.Org.Handles())
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	out.MailboxesAbsent, out.MailboxesReturned = absent, returned
	for _, seat := range absent {
		a.Log.Info("seat_mailbox_absent", "seat", seat, "retired_after", a.Org.Mailbox.RetireAfter)
		if err := a.Tickets.FailTarget(ctx, seat, fmt.Sprintf("seat %s is no longer in the org", seat)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, seat := range returned {
		a.Log.Info("seat_mailbox_returned", "seat", seat)
	}
	expired, err := a.Store.ExpiredMailboxes(ctx, a.Org.Mailbox.RetireAfter)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, seat := range expired {
		retired, err := a.Store.RetireMailbox(ctx, seat, a.Org.Mailbox.RetireAfter, func(ctx context.Context) error {
			return a.Mailbox.Delete(ctx, seat)
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if retired {
			a.Log.Info("seat_mailbox_retired", "seat", seat)
			out.MailboxesRetired = append(out.MailboxesRetired, seat)
		}
	}
	return errors.Join(errs...)
}
