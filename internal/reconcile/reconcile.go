// Package reconcile makes the world match the org: every seat has its
// Postgres row and its mailbox, every agent seat a running workflow on this
// deployment's task queue, the workflows of seats gone from the org are
// stopped, and a seat idle with tickets it opened still open is nudged. A
// node runs it at boot; the reconcile duty (a Temporal Schedule, see
// Trigger) runs a Pass every nodes.reconcile_interval and on config apply.
//
// The org to reconcile is a parameter of every call, never a field: a pass
// judges the seats of the one snapshot it was given.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/fanout"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
)

// Reconciler reconciles the org it is handed with the world.
type Reconciler struct {
	store    *store.Store
	mailbox  *mailbox.Mailbox
	seats    *seatclient.Client
	delivery *delivery.Service
	log      *slog.Logger
}

// New returns a reconciler. Its nudges are delivered through dl.
func New(st *store.Store, mb *mailbox.Mailbox, seats *seatclient.Client, dl *delivery.Service, log *slog.Logger) *Reconciler {
	return &Reconciler{store: st, mailbox: mb, seats: seats, delivery: dl, log: log}
}

// reconcileAtOnce bounds the seats a reconcile prepares or starts at once:
// at boot a node prepares and starts every seat of the org, and one at a
// time that is minutes for 10,000 seats.
const reconcileAtOnce = 16

// PrepareSeats makes sure every seat of org has a Postgres row and a mailbox
// (registered before it is created, so a retirement in progress is waited
// for), so mail sent before a seat attaches waits for it.
func (r *Reconciler) PrepareSeats(ctx context.Context, org *config.Config) error {
	st, mb := r.store, r.mailbox
	return fanout.Each(len(org.Seats), reconcileAtOnce, func(i int) error {
		s := org.Seats[i]
		if err := st.EnsureSeat(ctx, s.Handle, s.Role, crewlet.SeatKind(s.Kind)); err != nil {
			return err
		}
		if err := st.EnsureMailbox(ctx, s.Handle, mb.Stream(s.Handle), mb.Group(s.Handle)); err != nil {
			return err
		}
		return mb.Ensure(ctx, s.Handle)
	})
}

// Reconcile makes the world match org at a worker's boot on node nodeID: the
// seats are prepared, every agent seat gets a running workflow (started
// without asking which run, since a start is idempotent), and the workflows
// of seats no longer agent seats of org are stopped (StopRemovedSeats).
func (r *Reconciler) Reconcile(ctx context.Context, org *config.Config, nodeID string) error {
	errs := []error{r.PrepareSeats(ctx, org)}
	agents := org.AgentSeats()
	errs = append(errs, fanout.Each(len(agents), reconcileAtOnce, func(i int) error {
		_, err := r.seats.Start(ctx, agents[i])
		return err
	}))
	_, _, err := r.StopRemovedSeats(ctx, org, nodeID)
	return errors.Join(append(errs, err)...)
}

// StopRemovedSeats stops the running seat workflows of seats that are no
// longer agent seats of org, and returns them. It stops nothing, and
// returns whom it waits for, unless this process may judge absence
// (MayJudgeAbsence). A list it cannot read stops nothing.
func (r *Reconciler) StopRemovedSeats(ctx context.Context, org *config.Config, nodeID string) (stopped, waitFor []string, err error) {
	running, err := r.seats.Statuses(ctx)
	if err != nil {
		return nil, nil, err
	}
	var report crewlet.ReconcileReport
	err = r.stopRemoved(ctx, org, nodeID, running, agentSeats(org), &report)
	for _, d := range report.Deferred {
		waitFor = append(waitFor, d.WaitFor...)
	}
	return report.Stopped, waitFor, err
}

// MayJudgeAbsence is the one place that says whether this process may take
// a seat missing from org as removed: stop its workflow, stamp its mailbox
// absent, fail its tickets. It returns what it waits for (none means yes):
// this process, while org is older than the active config revision or the
// spawned seats, or the live incarnations of other ids that run an org
// naming other seats (store.NodesOnAnotherOrg), one of which is stale: a
// node on the old one must not stop a seat the new one added. An error
// means unknown, and unknown is never absent.
func MayJudgeAbsence(ctx context.Context, st *store.Store, org *config.Config, nodeID string) (waitFor []string, err error) {
	if org.Revision > 0 {
		// A seat added by a revision this process has not taken yet is
		// missing from org, however much the live nodes agree.
		active, err := st.ActiveConfigNumber(ctx)
		if err != nil {
			return nil, err
		}
		if active > org.Revision {
			return []string{fmt.Sprintf("%s (on config revision %d of %d)", nodeID, org.Revision, active)}, nil
		}
		// Nor is a seat spawned since this process last read them.
		spawned, err := st.SpawnedVersion(ctx)
		if err != nil {
			return nil, err
		}
		if spawned != org.SpawnedVersion {
			return []string{fmt.Sprintf("%s (behind on the spawned seats)", nodeID)}, nil
		}
	}
	return st.NodesOnAnotherOrg(ctx, org.Nodes.HeartbeatTimeout, nodeID, org.SeatsDigest())
}

// stopRemoved stops the workflows in running whose seats are not among
// agents, if absence may be judged; what it could not stop it defers in
// report.
func (r *Reconciler) stopRemoved(ctx context.Context, org *config.Config, nodeID string,
	running map[string]crewlet.SeatStatus, agents map[string]config.Seat, report *crewlet.ReconcileReport) error {
	var removed []string
	for handle := range running {
		if _, ok := agents[handle]; !ok {
			removed = append(removed, handle)
		}
	}
	if len(removed) == 0 {
		return nil
	}
	slices.Sort(removed)
	waitFor, err := MayJudgeAbsence(ctx, r.store, org, nodeID)
	switch {
	case err != nil:
		report.Deferred = append(report.Deferred, crewlet.ReconcileDeferral{Seats: removed, Action: "stop",
			Reason: "the live nodes' orgs cannot be read, and unknown is never absent"})
		return err
	case len(waitFor) > 0:
		report.Deferred = append(report.Deferred, crewlet.ReconcileDeferral{Seats: removed, Action: "stop", WaitFor: waitFor,
			Reason: "the live workers do not all run the active config revision; these seats are stopped once they do"})
		r.log.WarnContext(ctx, "seat_stops_deferred", "seats", removed, "nodes_on_another_org", waitFor,
			"reason", "the live workers do not all run the active config revision; these seats are stopped once they do")
		return nil
	}
	var errs []error
	for _, handle := range removed {
		err := r.seats.Stop(ctx, handle, crewlet.StopRequest{Reason: "seat is no longer an agent seat of the org", By: "reconcile"})
		switch {
		case seatclient.Gone(err):
			// It ended since it was listed: nothing is left to stop.
		case err != nil:
			errs = append(errs, fmt.Errorf("stop removed seat %s: %w", handle, err))
		default:
			r.log.InfoContext(ctx, "seat_stop_requested", "seat", handle, "reason", "not in the org")
			report.Stopped = append(report.Stopped, handle)
		}
	}
	return errors.Join(errs...)
}

// agentSeats are org's agent seats by handle: a pass looks seats up by
// handle thousands of times, and org.AgentSeat scans.
func agentSeats(org *config.Config) map[string]config.Seat {
	out := map[string]config.Seat{}
	for _, s := range org.AgentSeats() {
		out[s.Handle] = s
	}
	return out
}
