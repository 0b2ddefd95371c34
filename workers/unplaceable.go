package workers

import (
	"context"
	"time"

	"github.com/crewlet/crewlet/internal/fanout"
	"github.com/crewlet/crewlet/internal/placement"
	"github.com/crewlet/crewlet/internal/seatclient"
)

// wakeUnplaceableWithin bounds the wakes a joining node sends.
const wakeUnplaceableWithin = 30 * time.Second

// startWakingUnplaceable wakes, once and off the start path, the seats
// that wait unplaceable (wakeUnplaceable). Call it once the node's
// presence is written: a placement must see the node live.
func (n *Node) startWakingUnplaceable() {
	n.loopsDone.Add(1)
	go func() {
		defer n.loopsDone.Done()
		ctx, cancel := context.WithTimeout(context.Background(), wakeUnplaceableWithin)
		defer cancel()
		go func() {
			select {
			case <-n.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		n.wakeUnplaceable(ctx)
	}()
}

// wakeUnplaceable tells the seats no node took that this node joined, so
// each tries a placement now instead of at the end of its back-off, up to
// a minute (docs/architecture.md, "Tenure: which node runs a seat"). It
// finds them with one visibility query on CrewletStatus and wakes those
// this node could host: its org has the seat and its labels match the
// seat's placement. It only reports: a seat it misses tries again at the
// end of its wait.
func (n *Node) wakeUnplaceable(ctx context.Context) {
	waiting, err := n.seats.Unplaceable(ctx)
	if err != nil {
		n.log.Warn("unplaceable_wake_failed", "error", err)
		return
	}
	org := n.org.Now()
	here := placement.Node{Labels: n.opts.Labels}
	var wake []string
	for _, handle := range waiting {
		seat, ok := org.AgentSeat(handle)
		if ok && placement.Matches(here, org.Roles[seat.Role].Placement.Labels) {
			wake = append(wake, handle)
		}
	}
	if len(wake) == 0 {
		return
	}
	err = fanout.Each(len(wake), tellSeatsAtOnce, func(i int) error {
		if err := n.seats.Nudge(ctx, wake[i]); err != nil && !seatclient.Gone(err) {
			return err
		}
		return nil
	})
	if err != nil {
		n.log.Warn("unplaceable_wake_failed", "seats", len(wake), "error", err)
		return
	}
	n.log.Info("unplaceable_woken", "seats", wake, "waiting", len(waiting))
}
