package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
	Org     config.Source
	// Tickets fails the tickets of seats gone from the org and expires old
	// ones.
	Tickets *tickets.Service
	// NodeID is the node the activity runs on: the sweep asks whether it
	// may judge absence (reconcile.MayJudgeAbsence) as this node.
	NodeID string
	Log    *slog.Logger
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
	if out.TicketsExpired, err = a.Tickets.Expire(ctx, a.Org.Now().Tickets.ExpireAfter); err != nil {
		errs = append(errs, err)
	}
	if out.AuditTrimmed, err = a.Store.TrimAudit(ctx, a.Org.Now().Maintenance.AuditRetention); err != nil {
		errs = append(errs, err)
	}
	if out.EvalUsageTrimmed, err = a.Store.TrimEvalUsage(ctx); err != nil {
		errs = append(errs, err)
	}
	if out.EvalRunsTrimmed, err = a.Store.TrimEvalRuns(ctx, a.Org.Now().Evals.Retention); err != nil {
		errs = append(errs, err)
	}
	if out.LedgerTrimmed, err = a.Store.TrimLedger(ctx, a.Org.Now().Maintenance.LedgerRetention); err != nil {
		errs = append(errs, err)
	}
	if out.ScheduleFiresTrimmed, err = a.Store.TrimScheduleFires(ctx, a.Org.Now().Maintenance.LedgerRetention); err != nil {
		errs = append(errs, err)
	}
	for _, seat := range a.Org.Now().Seats {
		if seat.Kind == string(crewlet.SeatHuman) {
			// Nothing acks a person's mail, so Trim would keep it all;
			// what is past the bound moves to Postgres, read or not.
			n, err := a.archivePersonMail(ctx, seat.Handle, int64(a.Org.Now().Mailbox.HumanKeep))
			if err != nil {
				errs = append(errs, err)
			}
			out.HumanEntriesArchived += n
			continue
		}
		n, err := a.Mailbox.Trim(ctx, seat.Handle, int64(a.Org.Now().Mailbox.KeepAcked), a.Org.Now().Mailbox.KeepAckedFor)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.EntriesTrimmed += n
	}
	if out.DeadLettersArchived, err = a.archiveDeadLetters(ctx, int64(a.Org.Now().Mailbox.DeadLetterKeep)); err != nil {
		errs = append(errs, err)
	}
	turns, err := a.Store.TrimTurns(ctx, a.Org.Now().Maintenance.TurnRetention)
	if err != nil {
		errs = append(errs, err)
	}
	out.TurnsTrimmed = turns.Turns
	m := a.Org.Now().Maintenance
	// Counts of the tables that did trim are kept when another fails.
	rest, err := a.Store.TrimRetention(ctx, store.Retention{
		Messages: m.MessageRetention, Events: m.EventRetention, Diary: m.DiaryRetention,
		Episodes: m.EpisodeRetention, Counterparties: m.CounterpartyRetention, Nodes: m.NodeRetention,
		Tickets: m.TicketRetention, Approvals: m.ApprovalRetention,
		// A person's mail is conversation mail: kept as long as the
		// conversations it belongs to.
		PersonMail: m.MessageRetention, DiaryPerSeat: m.DiaryMaxPerSeat,
	})
	if err != nil {
		errs = append(errs, err)
	}
	out.MessagesTrimmed, out.ConversationsTrimmed, out.SummariesTrimmed = rest.Messages, rest.Conversations, rest.Summaries
	out.EventsTrimmed, out.DiaryTrimmed, out.EpisodesTrimmed = rest.Events, rest.Diary, rest.Episodes
	out.CounterpartiesTrimmed, out.NodesTrimmed = rest.Counterparties, rest.Nodes
	out.HealthTransitionsTrimmed = rest.HealthTransitions
	out.TicketsTrimmed, out.ApprovalsTrimmed, out.PersonMailTrimmed = rest.Tickets, rest.Approvals, rest.PersonMail
	out.DiaryOverCapTrimmed = rest.DiaryOverCap
	if out.LedgerTrimmed > 0 || out.EntriesTrimmed > 0 || out.HumanEntriesArchived > 0 || out.DeadLettersArchived > 0 || out.EvalRunsTrimmed > 0 ||
		turns != (store.TurnsTrimmed{}) || rest != (store.RetentionTrimmed{}) {
		a.Log.Info("retention_trimmed", "ledger_rows", out.LedgerTrimmed, "mailbox_entries", out.EntriesTrimmed,
			"human_mailbox_entries_archived", out.HumanEntriesArchived, "dead_letters_archived", out.DeadLettersArchived,
			"turns", turns.Turns, "turn_messages", turns.Messages, "turn_rounds", turns.Rounds,
			"tool_calls", turns.ToolCalls, "usage_counters", turns.Counters, "spend_daily", turns.Spend, "budget_asks", turns.BudgetAsks, "profile_slots", turns.Slots,
			"messages", rest.Messages, "conversations", rest.Conversations, "conversation_summaries", rest.Summaries,
			"seat_events", rest.Events, "diary_entries", rest.Diary, "episodes", rest.Episodes,
			"counterparty_profiles", rest.Counterparties, "node_rows", rest.Nodes, "seat_health_transitions", rest.HealthTransitions,
			"tickets", rest.Tickets, "approvals", rest.Approvals, "person_mail", rest.PersonMail, "diary_entries_over_cap", rest.DiaryOverCap,
			"eval_runs", out.EvalRunsTrimmed)
	}
	return out, errors.Join(errs...)
}

// sweep stamps the mailboxes of seats the org lacks absent and fails their
// tickets, clears the stamps of seats back in the org, and retires the
// mailboxes absent past the grace. It does none of it unless this process
// may judge absence (reconcile.MayJudgeAbsence): while live nodes run an
// org file naming other seats one file is stale, and a sweep by it would
// fail a seat's tickets or retire its mailbox just as the seat is added.
// The reconcile duty stops the seats' workflows, under the same rule.
func (a *Maintenance) sweep(ctx context.Context, out *crewlet.MaintenanceOutput) error {
	// One snapshot for the whole sweep: absence is judged against the org
	// whose digest was checked.
	org := a.Org.Now()
	others, err := reconcile.MayJudgeAbsence(ctx, a.Store, org, a.NodeID)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		out.SweepWaitsFor = others
		a.Log.Warn("mailbox_sweep_deferred", "nodes_on_another_org", others,
			"reason", "the live workers do not all run the active config revision; no seat is stamped absent until they do")
		return nil
	}
	var errs []error
	absent, returned, err := a.Store.SweepMailboxes(ctx, org.Handles())
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	out.MailboxesAbsent, out.MailboxesReturned = absent, returned
	for _, seat := range absent {
		a.Log.Info("seat_mailbox_absent", "seat", seat, "retired_after", org.Mailbox.RetireAfter)
		if err := a.Tickets.FailTarget(ctx, seat, fmt.Sprintf("seat %s is no longer in the org", seat)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, seat := range returned {
		a.Log.Info("seat_mailbox_returned", "seat", seat)
	}
	expired, err := a.Store.ExpiredMailboxes(ctx, org.Mailbox.RetireAfter)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, seat := range expired {
		var unread int64
		retired, err := a.Store.RetireMailbox(ctx, seat, org.Mailbox.RetireAfter, func(ctx context.Context) error {
			// Mail nobody handled is not deleted with the mailbox: it
			// goes to the dead letters, where an operator sees it.
			var err error
			unread, err = a.Mailbox.DeadLetterUnread(ctx, seat, fmt.Sprintf(
				"seat %s was removed from the org and its mailbox retired after mailbox.retire_after (%s) with this message unhandled", seat, org.Mailbox.RetireAfter))
			if err != nil {
				return err
			}
			return a.Mailbox.Delete(ctx, seat)
		})
		out.RetiredUnread += unread
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if retired {
			a.Log.Info("seat_mailbox_retired", "seat", seat, "unread_dead_lettered", unread)
			out.MailboxesRetired = append(out.MailboxesRetired, seat)
		}
	}
	return errors.Join(errs...)
}

// archiveBatch is how many entries one step of a move to Postgres takes.
const archiveBatch = 1000

// archivePersonMail moves the entries of a human seat's mailbox beyond its
// newest keep to Postgres, oldest first, and returns how many it moved.
// Each batch is inserted (keyed on the stream id) before it is deleted
// from Redis, so a pass cut short moves the rest next time and loses and
// doubles nothing.
func (a *Maintenance) archivePersonMail(ctx context.Context, handle string, keep int64) (int64, error) {
	var moved int64
	for {
		msgs, err := a.Mailbox.Overflow(ctx, handle, keep, archiveBatch)
		if err != nil || len(msgs) == 0 {
			return moved, err
		}
		if err := a.Store.ArchivePersonMail(ctx, handle, msgs); err != nil {
			return moved, err
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.StreamID
		}
		if err := a.Mailbox.Remove(ctx, handle, ids); err != nil {
			return moved, err
		}
		moved += int64(len(msgs))
	}
}

// archiveDeadLetters moves the dead letters beyond the newest keep to
// Postgres, as archivePersonMail moves a person's mail.
func (a *Maintenance) archiveDeadLetters(ctx context.Context, keep int64) (int64, error) {
	var moved int64
	for {
		dls, err := a.Mailbox.DeadLetterOverflow(ctx, keep, archiveBatch)
		if err != nil || len(dls) == 0 {
			return moved, err
		}
		if err := a.Store.ArchiveDeadLetters(ctx, dls); err != nil {
			return moved, err
		}
		ids := make([]string, len(dls))
		for i, d := range dls {
			ids[i] = d.ID
		}
		if err := a.Mailbox.RemoveDeadLetters(ctx, ids); err != nil {
			return moved, err
		}
		moved += int64(len(dls))
	}
}
