// Package activities holds crewlet's Temporal activities: small structs
// grouped by what they depend on, registered by name in workers.Register.
package activities

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/placement"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/views"
)

// Seats holds the seat activities that need no host: placement and the
// lifecycle status record.
type Seats struct {
	Store *store.Store
	Org   config.Source
	// Tickets fails the open tickets of a seat that stopped.
	Tickets *tickets.Service
	// LiveWithin is the host heartbeat timeout: a node whose presence row is
	// older is not live.
	LiveWithin time.Duration
	// Here is this node's host. A seat placed on the node that places it
	// attaches at once, in the placement: no Attach activity on the host
	// queue, so establishing a seat costs one workflow task. nil attaches
	// nothing in place.
	Here *Host
	Log  *slog.Logger

	placer placer
}

// PlaceSeat chooses the node a seat establishes on
// (docs/architecture.md, "Tenure: which node runs a seat") and reserves it,
// under a lock so concurrent placements respect fair shares; when it chose this
// node, it attaches the seat here too.
func (a *Seats) PlaceSeat(ctx context.Context, in crewlet.PlaceSeatInput) (crewlet.PlaceSeatOutput, error) {
	req := a.askPlacement(in)
	select {
	case <-req.done:
	case <-ctx.Done():
		return crewlet.PlaceSeatOutput{}, ctx.Err()
	}
	if req.err != nil {
		return crewlet.PlaceSeatOutput{}, req.err
	}
	if !req.ok {
		group, _ := a.Org.Now().SeatPlacement(in.Handle)
		a.Log.Warn("seats_unplaceable", "seat", in.Handle, "labels", group.Key, "excluded", in.Exclude, "why", req.why)
		return crewlet.PlaceSeatOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no live node can run seat %s (placement %q): %s", in.Handle, group.Key, req.why), crewlet.ErrorTypeUnplaceable, nil)
	}
	out := crewlet.PlaceSeatOutput{Node: req.node.Incarnation, HostQueue: req.node.HostQueue}
	if a.Here != nil && req.node.Incarnation == a.Here.Incarnation {
		// The placement runs as a local activity, so this is the node
		// running the seat's workflow task: attaching here is the Attach
		// activity without the trip through the host queue. Its outcome is
		// recorded with the placement, so a replay on any node attaches
		// nothing again.
		attached, err := a.Here.Attach(ctx, crewlet.AttachInput{Handle: in.Handle})
		if err != nil {
			out.AttachError = err.Error()
		} else {
			out.Attached = &attached
		}
	}
	return out, nil
}

// placer places together the seats that ask while a placement runs: when a
// node establishes many seats at once (at boot, or taking over a dead
// node's), they share one lock and one read of the nodes' load, not one
// each. Seats placed together are chosen one after another over the same
// view, each seeing the ones before it, so fair shares hold as if each had
// taken the lock alone.
type placer struct {
	mu      sync.Mutex
	waiting []*placeRequest
	busy    bool
}

type placeRequest struct {
	in   crewlet.PlaceSeatInput
	done chan struct{}
	node placement.Node
	ok   bool
	// why says why no node was found when ok is false.
	why string
	err error
}

// placeTimeout bounds one placement of a batch of seats.
const placeTimeout = 30 * time.Second

// askPlacement queues a seat for the next placement, starting one unless
// one runs.
func (a *Seats) askPlacement(in crewlet.PlaceSeatInput) *placeRequest {
	req := &placeRequest{in: in, done: make(chan struct{})}
	p := &a.placer
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting = append(p.waiting, req)
	if !p.busy {
		p.busy = true
		go a.placeWaiting()
	}
	return req
}

// placeWaiting places the waiting seats, batch after batch, until none
// wait. It serves every asker, so it runs on no asker's context.
func (a *Seats) placeWaiting() {
	p := &a.placer
	for {
		p.mu.Lock()
		batch := p.waiting
		p.waiting = nil
		if len(batch) == 0 {
			p.busy = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		a.placeBatch(batch)
	}
}

func (a *Seats) placeBatch(batch []*placeRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), placeTimeout)
	defer cancel()
	handles := make([]string, len(batch))
	for i, r := range batch {
		handles[i] = r.in.Handle
	}
	_, err := a.Store.Reserve(ctx, handles, a.LiveWithin, func(nodes []store.NodeRow, load []store.RoleLoad, hosts, preferred map[string]string) map[string]string {
		org := a.Org.Now()
		snap := views.Placement(org, nodes, hosts)
		snap.Load = groupLoad(org, load)
		chosen := map[string]string{}
		for _, r := range batch {
			r.node, r.ok = snap.Choose(r.in.Handle, r.in.Exclude, preferred[r.in.Handle])
			if r.ok {
				snap.Place(r.in.Handle, r.node.Incarnation)
				chosen[r.in.Handle] = r.node.Incarnation
			} else {
				r.why = snap.Refusal(r.in.Handle, r.in.Exclude)
			}
		}
		return chosen
	})
	for _, r := range batch {
		r.err = err
		close(r.done)
	}
}

// groupLoad counts the seats each node holds by placement group: a role's
// seats are in the group of its placement labels. Seats of a role the org
// no longer has (a seat being stopped) take room in no group.
func groupLoad(org *config.Config, rows []store.RoleLoad) placement.Load {
	load := placement.NewLoad()
	for _, r := range rows {
		role, ok := org.Roles[r.Role]
		if !ok {
			load.AddUngrouped(r.Node, r.Seats)
			continue
		}
		load.Add(r.Node, config.LabelsKey(role.Placement.Labels), r.Seats)
	}
	return load
}

// SetSeatStatus records the seat's lifecycle status, fenced by epoch.
func (a *Seats) SetSeatStatus(ctx context.Context, in crewlet.SeatStatusInput) error {
	if err := a.Store.SetStatus(ctx, in.Handle, in.Epoch, in.Status); err != nil {
		return Fence(a.Log, in.Handle, in.Epoch, err)
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

// Fence turns a stale-epoch refusal into the non-retryable error the seat
// workflow recognises; other errors pass through and are retried.
func Fence(log *slog.Logger, handle string, epoch int64, err error) error {
	if crewlet.ErrorCode(err) != crewlet.EFENCED {
		return err
	}
	log.Warn("seat_fenced", "seat", handle, "epoch", epoch)
	return temporal.NewNonRetryableApplicationError(crewlet.ErrorMessage(err), crewlet.ErrorTypeFenced, nil)
}
