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
func TestIdleSeatRunsNoActivityFor24Hours(t *testing.T) {
	h := newSeatHarness(t)
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
	// The one activity is the Attach that started the tenure, on the host.
	eq(t, "activities in 24 idle hours", activities, ids(crewlet.ActivityAttach))
	if reads := end.reads - start.reads; reads > 24+2 {
		t.Errorf("mailbox reads in 24 idle hours: %d; want at most one per backstop hour (24) + 2", reads)
	}
	if timers > 24+4 {
		t.Errorf("timers in 24 idle hours: %d; want at most one per backstop hour (24) + 4", timers)
	}
	t.Logf("24 idle hours: %d activities (the attach), %d mailbox reads, %d timers", len(activities), end.reads-start.reads, timers)
}

// The failure detector's host_lost for a node the seat is not on (one it
// left, or another seat's) changes nothing; one for its node moves it.
func TestSeatIgnoresHostLostForAnotherNode(t *testing.T) {
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
