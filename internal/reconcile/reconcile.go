// Package reconcile makes the world match the org: every seat has its
// Postgres row and its mailbox, every agent seat a running workflow, and the
// workflows of seats gone from the org are stopped. A node runs it at boot;
// the maintenance duty runs the stops.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/fanout"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
)

// Reconciler reconciles one org.
type Reconciler struct {
	org     config.Source
	mailbox *mailbox.Mailbox
	seats   *seatclient.Client
	log     *slog.Logger
}

// New returns the reconciler of org.
func New(org config.Source, mb *mailbox.Mailbox, seats *seatclient.Client, log *slog.Logger) *Reconciler {
	return &Reconciler{org: org, mailbox: mb, seats: seats, log: log}
}

// reconcileAtOnce bounds the seats a reconcile prepares or starts at once:
// at boot a node prepares and starts every seat of the org, and one at a
// time that is minutes for 10,000 seats.
const reconcileAtOnce = 16

// PrepareSeats makes sure every seat has a Postgres row and a mailbox
// (registered before it is created, so a retirement in progress is waited
// for), so mail sent before a seat attaches waits for it.
func (r *Reconciler) PrepareSeats(ctx context.Context, st *store.Store) error {
	org, mb := r.org.Now(), r.mailbox
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

// Reconcile makes the world match the org, for a worker on node nodeID: the
// seats are prepared, every agent seat gets a running workflow, and the
// workflows of seats no longer agent seats of the org are stopped
// (StopRemovedSeats).
func (r *Reconciler) Reconcile(ctx context.Context, st *store.Store, nodeID string) error {
	errs := []error{r.PrepareSeats(ctx, st)}
	agents := r.org.Now().AgentSeats()
	errs = append(errs, fanout.Each(len(agents), reconcileAtOnce, func(i int) error { return r.seats.Start(ctx, agents[i]) }))
	_, _, err := r.StopRemovedSeats(ctx, st, nodeID)
	return errors.Join(append(errs, err)...)
}

// StopRemovedSeats stops the running seat workflows of seats that are no
// longer agent seats of the org, and returns them. Stopping fails a seat's
// tickets, so while live nodes other than nodeID run an org file naming
// other seats it stops nothing and returns those nodes: one of the files is
// stale, and a node on the old file must not stop a seat the new one added
// back. The worker restarted last onto the new file, or the next
// maintenance pass once every worker runs it, stops them.
func (r *Reconciler) StopRemovedSeats(ctx context.Context, st *store.Store, nodeID string) (stopped, waitFor []string, err error) {
	running, err := r.seats.Statuses(ctx)
	if err != nil {
		return nil, nil, err
	}
	var removed []string
	for handle := range running {
		if _, ok := r.org.Now().AgentSeat(handle); !ok {
			removed = append(removed, handle)
		}
	}
	if len(removed) == 0 {
		return nil, nil, nil
	}
	slices.Sort(removed)
	if waitFor, err = st.NodesOnAnotherOrg(ctx, r.org.Now().Nodes.HeartbeatTimeout, nodeID, r.org.Now().SeatsDigest()); err != nil || len(waitFor) > 0 {
		if len(waitFor) > 0 {
			r.log.WarnContext(ctx, "seat_stops_deferred", "seats", removed, "nodes_on_another_org", waitFor,
				"reason", "live nodes run an org file naming other seats; these seats are stopped once every worker runs one file")
		}
		return nil, waitFor, err
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
			stopped = append(stopped, handle)
		}
	}
	return stopped, nil, errors.Join(errs...)
}
