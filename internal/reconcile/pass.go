package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/fanout"
	"github.com/crewlet/crewlet/internal/store"
)

// ScheduleID is the id of the reconcile duty's Temporal Schedule for the
// org's task queue.
func ScheduleID(taskQueue string) string { return "crewlet-reconcile/" + taskQueue }

// Trigger runs a reconcile pass now, for a config apply: a pass running
// already is followed by one more (overlap BUFFER_ONE for this action), so
// the org just applied is reconciled by a pass that began after it.
func Trigger(ctx context.Context, tc client.Client, taskQueue string) error {
	err := tc.ScheduleClient().GetHandle(ctx, ScheduleID(taskQueue)).Trigger(ctx, client.ScheduleTriggerOptions{
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	})
	if err != nil {
		return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the reconcile duty cannot be triggered now; it runs on its own within nodes.reconcile_interval")
	}
	return nil
}

// Pass is one pass of the reconcile duty over org, run on node nodeID:
//
//   - every seat gets its Postgres row and its mailbox (registry entry and
//     Redis stream) if it lacks one;
//   - a seat workflow of the org on another task queue is restarted on ours
//     when it is proven this deployment's (repairOtherQueues), and left
//     alone otherwise;
//   - every agent seat with no running workflow is started;
//   - the workflows of seats org lacks are stopped, if this process may
//     judge absence (MayJudgeAbsence);
//   - seats idle with open tickets they opened are nudged (nudge.go).
//
// Unknown is never absent: a list or read that fails skips every step that
// would act on what it did not read, and says so in the report's Deferred.
// The report is logged (reconcile_pass) when the pass did or deferred
// anything.
func (r *Reconciler) Pass(ctx context.Context, org *config.Config, nodeID string) (crewlet.ReconcileReport, error) {
	var report crewlet.ReconcileReport
	err := errors.Join(r.pass(ctx, org, nodeID, &report)...)
	r.logPass(ctx, report, err)
	return report, err
}

// pass runs the steps of Pass, recording in report, and returns what failed.
func (r *Reconciler) pass(ctx context.Context, org *config.Config, nodeID string, report *crewlet.ReconcileReport) (errs []error) {
	rows, err := r.prepare(ctx, org, report)
	if err != nil {
		errs = append(errs, err)
	}
	agents := agentSeats(org)
	running, err := r.seats.Statuses(ctx)
	if err != nil {
		report.Deferred = append(report.Deferred, crewlet.ReconcileDeferral{Action: "start, stop, nudge",
			Reason: "the seats' workflows cannot be listed, and unknown is never absent"})
		return append(errs, err)
	}
	elsewhere, err := r.repairOtherQueues(ctx, agents, rows, report)
	if err != nil {
		errs = append(errs, err)
	}
	if elsewhere != nil {
		if err := r.startMissing(ctx, agents, running, elsewhere, report); err != nil {
			errs = append(errs, err)
		}
	} else {
		// Which seats run on another queue is unknown: a start could
		// collide with one of them, so none is tried.
		report.Deferred = append(report.Deferred, crewlet.ReconcileDeferral{Action: "start",
			Reason: "the seat workflows on other task queues cannot be listed, and unknown is never absent"})
	}
	if err := r.stopRemoved(ctx, org, nodeID, running, agents, report); err != nil {
		errs = append(errs, err)
	}
	if err := r.nudge(ctx, org, running, report); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// logPass logs what a pass did, once.
func (r *Reconciler) logPass(ctx context.Context, report crewlet.ReconcileReport, err error) {
	if report.Empty() && err == nil {
		return
	}
	r.log.InfoContext(ctx, "reconcile_pass", "rows_created", report.RowsCreated, "mailboxes_created", report.MailboxesCreated,
		"started", report.Started, "stopped", report.Stopped, "repaired", report.Repaired, "nudged", report.Nudged,
		"deferred", report.Deferred, "error", err)
}

// prepare creates the rows and mailboxes org's seats lack, and returns the
// seat rows as they stand (nil when they could not be read). The registry
// and the rows are read once for all seats; each Redis stream is made sure
// of, since a stream lost behind crewlet's back leaves the registry intact.
func (r *Reconciler) prepare(ctx context.Context, org *config.Config, report *crewlet.ReconcileReport) (map[string]store.SeatRow, error) {
	rows, err := r.store.Seats(ctx)
	if err != nil {
		return nil, err
	}
	registry, err := r.store.Mailboxes(ctx)
	if err != nil {
		return rows, err
	}
	var mu sync.Mutex
	err = fanout.Each(len(org.Seats), reconcileAtOnce, func(i int) error {
		s := org.Seats[i]
		if row, ok := rows[s.Handle]; !ok || row.Role != s.Role || row.Kind != s.Kind {
			if err := r.store.EnsureSeat(ctx, s.Handle, s.Role, crewlet.SeatKind(s.Kind)); err != nil {
				return err
			}
			if !ok {
				mu.Lock()
				report.RowsCreated = append(report.RowsCreated, s.Handle)
				mu.Unlock()
			}
		}
		missing, registered := registry[s.Handle]
		if !registered || missing {
			// Registered before the stream is created, so a retirement in
			// progress is waited for.
			if err := r.store.EnsureMailbox(ctx, s.Handle, r.mailbox.Stream(s.Handle), r.mailbox.Group(s.Handle)); err != nil {
				return err
			}
		}
		created, err := r.mailbox.EnsureCreated(ctx, s.Handle)
		if err != nil {
			return err
		}
		if created || !registered {
			mu.Lock()
			report.MailboxesCreated = append(report.MailboxesCreated, s.Handle)
			mu.Unlock()
		}
		return nil
	})
	slices.Sort(report.RowsCreated)
	slices.Sort(report.MailboxesCreated)
	return rows, err
}

// startMissing starts the agent seats with no running workflow on our queue,
// leaving out those running on another (elsewhere): their start would be
// refused, and repairOtherQueues speaks for them.
func (r *Reconciler) startMissing(ctx context.Context, agents map[string]config.Seat, running map[string]crewlet.SeatStatus,
	elsewhere map[string]bool, report *crewlet.ReconcileReport) error {
	var missing []config.Seat
	for handle, s := range agents {
		if _, ok := running[handle]; !ok && !elsewhere[handle] {
			missing = append(missing, s)
		}
	}
	slices.SortFunc(missing, func(a, b config.Seat) int { return strings.Compare(a.Handle, b.Handle) })
	var mu sync.Mutex
	err := fanout.Each(len(missing), reconcileAtOnce, func(i int) error {
		// Visibility lags a moment behind: a seat listed as not running may
		// have just started, and then this start changes nothing.
		started, err := r.seats.Start(ctx, missing[i])
		if err != nil {
			return err
		}
		if started {
			r.log.InfoContext(ctx, "seat_started", "seat", missing[i].Handle, "reason", "it had no running workflow")
			mu.Lock()
			report.Started = append(report.Started, missing[i].Handle)
			mu.Unlock()
		}
		return nil
	})
	slices.Sort(report.Started)
	return err
}

// repairOtherQueues deals with the org's seat workflows running on another
// task queue of the namespace, and returns their handles (nil when they
// cannot be listed).
//
// Seat workflow ids are per namespace, so such a workflow is either this
// deployment's, left on a queue it no longer uses (a task queue moved), or
// another deployment's with the same handle. The database is claimed by one
// deployment (store.CheckDeployment), and only this deployment's nodes
// attach seats in it. So a run is proven ours when the tenure it last
// published (its node and epoch search attributes) is the seat's tenure in
// our database: that run is terminated, only it, and the seat started on our
// queue. Any other run (one that never attached, one whose tenure our
// database never granted) may be another deployment's and is never touched:
// it is deferred with the reason, and an operator decides.
func (r *Reconciler) repairOtherQueues(ctx context.Context, agents map[string]config.Seat, rows map[string]store.SeatRow,
	report *crewlet.ReconcileReport) (map[string]bool, error) {
	runs, err := r.seats.RunsOnOtherQueues(ctx)
	if err != nil {
		return nil, err
	}
	elsewhere := map[string]bool{}
	var errs []error
	for _, run := range runs {
		s, ours := agents[run.Handle]
		if !ours {
			continue // not a seat of this org: nothing of ours to start or stop
		}
		elsewhere[run.Handle] = true
		row, known := rows[run.Handle]
		if !known || run.Node == "" || row.Node != run.Node || row.Epoch != run.Epoch {
			report.Deferred = append(report.Deferred, crewlet.ReconcileDeferral{Seats: []string{run.Handle}, Action: "repair",
				Reason: fmt.Sprintf("its workflow runs on task queue %q with a tenure this database did not grant; it may be another deployment's, "+
					"so it is left alone (terminate it if it is this company's)", run.Queue)})
			continue
		}
		err := r.seats.MoveToOurQueue(ctx, s, run.RunID,
			fmt.Sprintf("seat %s runs on task queue %q, which this deployment no longer uses; restarted on its own", run.Handle, run.Queue))
		if err != nil {
			errs = append(errs, fmt.Errorf("repair seat %s: %w", run.Handle, err))
			continue
		}
		r.log.InfoContext(ctx, "seat_queue_repaired", "seat", run.Handle, "from_queue", run.Queue, "node", run.Node, "epoch", run.Epoch)
		report.Repaired = append(report.Repaired, run.Handle)
	}
	slices.Sort(report.Repaired)
	return elsewhere, errors.Join(errs...)
}
