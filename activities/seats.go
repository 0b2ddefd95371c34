// Package activities holds crewlet's Temporal activities: small structs
// grouped by what they depend on, registered by name in workers.Register.
package activities

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/control"
	"github.com/crewlet/crewlet/internal/placement"
	"github.com/crewlet/crewlet/internal/store"
)

// Seats holds the seat activities that need no host: placement and the
// lifecycle status record.
type Seats struct {
	Store *store.Store
	Org   *config.Config
	// Tickets fails the open tickets of a seat that stopped.
	Tickets *control.Tickets
	// LiveWithin is the host heartbeat timeout: a node whose presence row is
	// older is not live.
	LiveWithin time.Duration
	Log        *slog.Logger
}

// PlaceSeat chooses the node a seat establishes on (DESIGN §4 placement) and
// reserves it, under a lock so concurrent placements respect fair shares.
func (a *Seats) PlaceSeat(ctx context.Context, in crewlet.PlaceSeatInput) (crewlet.PlaceSeatOutput, error) {
	var chosen placement.Node
	_, ok, err := a.Store.Reserve(ctx, in.Handle, a.LiveWithin,
		func(nodes []store.NodeRow, hosts, preferred map[string]string) (string, bool) {
			snap := Snapshot(a.Org, nodes, hosts)
			var ok bool
			chosen, ok = snap.Choose(in.Handle, in.Exclude, preferred[in.Handle])
			return chosen.Incarnation, ok
		})
	if err != nil {
		return crewlet.PlaceSeatOutput{}, err
	}
	if !ok {
		group, _ := a.Org.SeatPlacement(in.Handle)
		a.Log.Warn("seats_unplaceable", "seat", in.Handle, "labels", group.Key, "excluded", in.Exclude)
		return crewlet.PlaceSeatOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no live node can run seat %s (placement %q)", in.Handle, group.Key), crewlet.UnplaceableErrorType, nil)
	}
	return crewlet.PlaceSeatOutput{Node: chosen.Incarnation, HostQueue: chosen.HostQueue}, nil
}

// Snapshot is the placement view of the org over the live nodes and seat
// hosts read from Postgres.
func Snapshot(org *config.Config, nodes []store.NodeRow, hosts map[string]string) placement.Snapshot {
	snap := placement.Snapshot{Hosts: hosts}
	for _, n := range nodes {
		snap.Nodes = append(snap.Nodes, placement.Node{
			Incarnation: n.Incarnation, NodeID: n.NodeID, HostQueue: n.HostQueue, Labels: n.Labels,
			Capacity: n.Capacity, Draining: n.Draining, Unproven: len(n.Unproven),
		})
	}
	for _, g := range org.PlacementGroups() {
		snap.Groups = append(snap.Groups, placement.Group{Key: g.Key, Labels: g.Labels, Seats: g.Seats})
	}
	return snap
}

// SetSeatStatus records the seat's lifecycle status, fenced by epoch.
func (a *Seats) SetSeatStatus(ctx context.Context, in crewlet.SeatStatusInput) error {
	if err := a.Store.SetStatus(ctx, in.Handle, in.Epoch, in.Status); err != nil {
		return fence(a.Log, in.Handle, in.Epoch, err)
	}
	if in.Status == seatStopped {
		// A seat that left the org will serve nothing: a certain teardown,
		// so its tickets fail, asking ones too, and their delegators hear.
		return a.Tickets.FailTarget(ctx, in.Handle, fmt.Sprintf("seat %s was removed from the org and stopped", in.Handle))
	}
	return nil
}

// seatStopped is the status the seat workflow records when its seat left
// the org.
const seatStopped = "stopped"

// fence turns a stale-epoch refusal into the non-retryable error the seat
// workflow recognises; other errors pass through and are retried.
func fence(log *slog.Logger, handle string, epoch int64, err error) error {
	if crewlet.ErrorCode(err) != crewlet.EFENCED {
		return err
	}
	log.Warn("seat_fenced", "seat", handle, "epoch", epoch)
	return temporal.NewNonRetryableApplicationError(crewlet.ErrorMessage(err), crewlet.FencedErrorType, nil)
}
