package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/crewlet/crewlet"
)

// An idle seat costs nothing but its backstop: over 24 simulated hours it
// runs no activity at all (no Hold, nothing on its host), and wakes once an
// hour to read its mailbox: at most 24 + a constant timers and reads. (A
// wake is a workflow task of a timer and a local activity, about six
// history events; the point is one wake per backstop, not zero events.)
// The one activity is the Attach that started the tenure on its host, and
// none at all when the seat was placed on the node running its placement,
// which attached it in place.
func TestIdleSeatRunsNoActivityFor24Hours(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		placedHere []string
		want       []string
	}{
		{"attached on its host queue", nil, ids(crewlet.ActivityAttach)},
		{"attached in place", []string{"node-a"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSeatHarness(t)
			h.world.placedHere = tc.placedHere
			var mu sync.Mutex
			var activities []string
			timers := 0
			h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
				mu.Lock()
				defer mu.Unlock()
				activities = append(activities, info.ActivityType.Name)
			})
			h.env.SetOnTimerScheduledListener(func(string, time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				timers++
			})
			start := h.view(time.Minute)
			end := h.view(24*time.Hour + time.Minute)
			h.run(seatIn(), 24*time.Hour+2*time.Minute)

			eq(t, "status", end.state.Status, crewlet.StatusIdle)
			eq(t, "epoch (the tenure never ended)", end.state.Epoch, int64(1))
			mu.Lock()
			defer mu.Unlock()
			eq(t, "activities in 24 idle hours", activities, tc.want)
			if reads := end.reads - start.reads; reads > 24+2 {
				t.Errorf("mailbox reads in 24 idle hours: %d; want at most one per backstop hour (24) + 2", reads)
			}
			if timers > 24+4 {
				t.Errorf("timers in 24 idle hours: %d; want at most one per backstop hour (24) + 4", timers)
			}
			t.Logf("24 idle hours: %d activities, %d mailbox reads, %d timers", len(activities), end.reads-start.reads, timers)
		})
	}
}

// A seat placed on the node that runs its placement is attached there by
// the placement itself: no Attach activity, the tenure the placement
// reports is the seat's, and its turns run on that node's host queue as
// after any attach.
func TestSeatPlacedOnItsOwnNodeAttachesInPlace(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.placedHere = []string{"node-a"}
	var mu sync.Mutex
	var attaches int
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		mu.Lock()
		defer mu.Unlock()
		if info.ActivityType.Name == crewlet.ActivityAttach {
			attaches++
		}
	})
	h.publish(time.Minute, "m1")
	after := h.view(2 * time.Minute)
	h.run(seatIn(), 3*time.Minute)

	eq(t, "establish", h.events()[:2], ids("place exclude=[]", "attach e1 node-a in place"))
	eq(t, "Attach activities", attaches, 0)
	eq(t, "node", after.state.Node, "node-a")
	eq(t, "epoch", after.state.Epoch, int64(1))
	eq(t, "host queue", after.state.HostQueue, hostQueue("node-a"))
	eq(t, "turns", after.ran, ids("m1"))
	eq(t, "task queue of the turn", h.world.turnQueues(), ids(hostQueue("node-a")))
}

// An attach in place that fails is an attach that failed: the seat notes
// it and places itself again without that node, where it attaches on the
// host queue.
func TestSeatWhoseInPlaceAttachFailsPlacesElsewhere(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.placedHere = []string{"node-a"}
	h.world.attachHereErr = "start the MCP servers of cto: exit status 1"
	after := h.view(time.Minute)
	h.run(seatIn(), 2*time.Minute)

	eq(t, "establish", h.events()[:4], ids(
		"place exclude=[]", "attach here failed node-a",
		"place exclude=[node-a]", "attach e1 node-b queue="+hostQueue("node-b")))
	eq(t, "node", after.state.Node, "node-b")
	eq(t, "status", after.state.Status, crewlet.StatusIdle)
	eq(t, "last error (cleared by the attach)", after.state.LastError, "")
}

// The failure detector's host_lost for a node the seat is not on (one it
// left, or another seat's) changes nothing; one for its node moves it.
func TestSeatIgnoresHostLostForAnotherNode(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.signal(time.Minute, crewlet.SignalHostLost, crewlet.HostLostRequest{Node: "node-z", By: "detector"})
	kept := h.view(2 * time.Minute)
	h.signal(3*time.Minute, crewlet.SignalHostLost, crewlet.HostLostRequest{Node: "node-a", By: "detector"})
	moved := h.view(4 * time.Minute)
	h.run(seatIn(), 5*time.Minute)

	eq(t, "node after a host_lost for another node", kept.state.Node, "node-a")
	eq(t, "epoch after a host_lost for another node", kept.state.Epoch, int64(1))
	eq(t, "node after a host_lost for its own", moved.state.Node, "node-b")
	eq(t, "epoch after a host_lost for its own", moved.state.Epoch, int64(2))
	eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{firstPlacement, {Handle: testHandle, Exclude: []string{"node-a"}}})
}

// A fresh run starts with its search attributes (SeatSearchAttributes) and
// does not write them again: its first upsert is the attach's node, epoch
// and idle status. A run begun before that version rewrote them first.
func TestFreshSeatRunDoesNotRewriteItsStartAttributes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		legacy bool
		want   []string
	}{
		{"fresh run", false, ids("")},
		{"run begun before node-level liveness", true, ids(testHandle, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSeatHarnessOf(t, tc.legacy)
			idle := h.view(time.Minute)
			h.run(seatIn(), 2*time.Minute)

			eq(t, "status", idle.state.Status, crewlet.StatusIdle)
			eq(t, "status written", idle.status, string(crewlet.StatusIdle))
			h.saMu.Lock()
			defer h.saMu.Unlock()
			eq(t, "handle written by each upsert", h.saHandles, tc.want)
		})
	}
}
