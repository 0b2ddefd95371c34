package workflows

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// backoffProbe records, in workflow time, when the seat placed and how
// many timers it started, fired and cancelled.
type backoffProbe struct {
	mu                       sync.Mutex
	placedAt                 []time.Duration
	started, fired, canceled int
	start                    time.Time
}

// probeBackoff hooks the probe into h; refuse decides, per placement
// (counted from 1), whether it is refused as unplaceable.
func probeBackoff(h *seatHarness, refuse func(n int) bool) *backoffProbe {
	p := &backoffProbe{start: h.env.Now()}
	h.world.placeHook = func(w *fakeSeatWorld, _ crewlet.PlaceSeatInput) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.placedAt = append(p.placedAt, w.env.Now().Sub(p.start))
		if refuse(len(w.placements)) {
			return unplaceableErr()
		}
		return nil
	}
	h.env.SetOnTimerScheduledListener(func(string, time.Duration) { p.mu.Lock(); p.started++; p.mu.Unlock() })
	h.env.SetOnTimerFiredListener(func(string) { p.mu.Lock(); p.fired++; p.mu.Unlock() })
	h.env.SetOnTimerCanceledListener(func(string) { p.mu.Lock(); p.canceled++; p.mu.Unlock() })
	return p
}

// gaps are the waits between consecutive placements.
func (p *backoffProbe) gaps() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(p.placedAt); i++ {
		out = append(out, p.placedAt[i]-p.placedAt[i-1])
	}
	return out
}

func seconds(s ...int) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, x := range s {
		out[i] = time.Duration(x) * time.Second
	}
	return out
}

// A seat no live node matches tries again after 1 s, 2 s, 4 s ... up to a
// minute, and no more often: one placement and one timer per wait, and no
// visibility write per attempt. It shows unplaceable with the placement's
// reason meanwhile.
func TestSeatUnplaceableBacksOffDoublingToAMinute(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	p := probeBackoff(h, func(int) bool { return true })
	var upserts int
	var timers [3]int
	during := h.view(90 * time.Second)
	h.at(10*time.Minute-time.Millisecond, func() {
		h.saMu.Lock()
		upserts = len(h.saHandles)
		h.saMu.Unlock()
		p.mu.Lock()
		timers = [3]int{p.started, p.fired, p.canceled}
		p.mu.Unlock()
	})
	h.run(seatIn(), 10*time.Minute)

	// Placements at 0, 1, 3, 7, 15, 31, 63, 123, 183 ... 543 s.
	want := seconds(1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 60, 60, 60, 60)
	eq(t, "waits between placements", p.gaps(), want)
	// One timer per wait, the last still running at 10 minutes.
	eq(t, "timers started, fired, cancelled", timers, [3]int{len(want) + 1, len(want), 0})
	eq(t, "status", during.state.Status, crewlet.StatusUnplaceable)
	eq(t, "status attribute", during.status, string(crewlet.StatusUnplaceable))
	if !strings.Contains(during.state.LastError, "no live node") {
		t.Errorf("last error: got %q; want the placement's reason", during.state.LastError)
	}
	if u := during.state.Unplaceable; u == nil || u.Attempts != 7 || u.Waits != 7 || !u.Since.Equal(p.start) || u.Retry.Sub(p.start) != 123*time.Second {
		t.Errorf("unplaceable at 90s: got %+v; want 7 attempts and waits since the start, next at 123s", u)
	}
	// The start's attributes, then unplaceable once: none per attempt.
	eq(t, "search attribute upserts", upserts, 1)
}

// A seat whose handle no node's org has: each node it is placed on refuses
// the tenure. Before unplaceable-backoff it went place → refused → place
// without that node → unplaceable → place ..., with no wait at all, and
// spun through its run's 200 cycles at once. Now the refusal is retried at
// once on another node, and then it backs off like any unplaceable seat.
func TestSeatEveryNodeRefusingBacksOff(t *testing.T) {
	t.Parallel()
	for _, nodes := range [][]string{{"node-a"}, {"node-a", "node-b"}} {
		t.Run(fmt.Sprint(len(nodes), " nodes"), func(t *testing.T) {
			h := newSeatHarness(t)
			h.world.nodes = nodes
			h.world.placedHere = nodes
			h.world.attachHereErr = "node's org file has no agent seat ana; restart it with the current org file"
			p := probeBackoff(h, func(int) bool { return false })
			during := h.view(5 * time.Minute)
			h.run(seatIn(), 10*time.Minute)

			gaps := p.gaps()
			if len(gaps) == 0 || gaps[0] != 0 {
				t.Fatalf("waits: got %v; want the first refusal retried at once", gaps)
			}
			eq(t, "waits after the first retry", gaps[1:8], seconds(1, 2, 4, 8, 16, 32, 60))
			if n := len(p.placedAt); n > 17 {
				t.Errorf("placements in 10 minutes: got %d; want one per wait (at most 17)", n)
			}
			eq(t, "status", during.state.Status, crewlet.StatusUnplaceable)
			if !strings.Contains(during.state.LastError, "org file has no agent seat") && !strings.Contains(during.state.LastError, "no live node") {
				t.Errorf("last error: got %q; want the refusal", during.state.LastError)
			}
			eq(t, "attaches", during.attaches, 0)
		})
	}
}

// A wake ends the wait at once (a node joining sends one to unplaceable
// seats; so does mail): the seat places then, and its timer is cancelled
// rather than left to fire.
func TestSeatUnplaceableWaitEndsOnAWake(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	joined := false // guarded by h.world.mu, as the hook runs under it
	p := probeBackoff(h, func(int) bool { return !joined })
	// At 200 s the seat waits 60 s from 183 s; a node joins and wakes it.
	h.at(200*time.Second, func() {
		h.world.mu.Lock()
		joined = true
		h.world.mu.Unlock()
		h.env.SignalWorkflow(crewlet.SignalWake, nil)
	})
	h.publish(300*time.Second, "m1")
	placed := h.view(201 * time.Second)
	var canceled int
	h.at(250*time.Second, func() { p.mu.Lock(); canceled = p.canceled; p.mu.Unlock() })
	h.run(seatIn(), 30*time.Minute)

	p.mu.Lock()
	last := p.placedAt[len(p.placedAt)-1]
	p.mu.Unlock()
	eq(t, "placed at", last, 200*time.Second)
	eq(t, "timers cancelled", canceled, 1)
	eq(t, "status", placed.state.Status, crewlet.StatusIdle)
	eq(t, "node", placed.state.Node, "node-a")
	eq(t, "last error", placed.state.LastError, "")
	if placed.state.Unplaceable != nil {
		t.Errorf("unplaceable once placed: got %+v; want nil", placed.state.Unplaceable)
	}
	eq(t, "status attribute", placed.status, string(crewlet.StatusIdle))
	eq(t, "turns run", h.world.ran, ids("m1"))
}

// A seat unplaceable for hours continues as new when Temporal suggests it,
// as an idle seat does, and the next run goes on waiting a minute: its
// history grows by a constant per wait and ends with the run.
func TestSeatUnplaceableForHoursContinuesAsNew(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	p := probeBackoff(h, func(int) bool { return true })
	// A minute apart after the first minute: well past the bound runs below
	// node-liveness 5 kept (cyclesPerRun).
	h.at(time.Duration(cyclesPerRun+10)*time.Minute, func() { h.env.SetContinueAsNewSuggested(true) })
	err := h.run(seatIn(), 0)
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("seat ended with %v; want continue-as-new", err)
	}
	attempts := len(p.placedAt)
	if attempts <= cyclesPerRun {
		t.Errorf("placements in the run: got %d, want more than %d (no fixed bound)", attempts, cyclesPerRun)
	}
	var next crewlet.SeatInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	u := next.Carry.State.Unplaceable
	if u == nil || u.Attempts != attempts || next.Carry.State.Status != crewlet.StatusUnplaceable {
		t.Fatalf("carried: status %s, unplaceable %+v; want unplaceable after %d attempts", next.Carry.State.Status, u, attempts)
	}
	t.Logf("continued as new after %s unplaceable", p.placedAt[len(p.placedAt)-1])

	// The next run's first failure waits the full minute.
	h2 := newSeatHarness(t)
	p2 := probeBackoff(h2, func(int) bool { return true })
	h2.run(next, 150*time.Second)
	eq(t, "the next run's waits", p2.gaps(), seconds(60, 60))
}

// A drain ends the wait at once; the drained seat shows no back-off, and
// after a resume it tries at once and starts the back-off afresh.
func TestSeatUnplaceableDrainedAndResumed(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	p := probeBackoff(h, func(int) bool { return true })
	// At 100 s the seat waits 60 s from 63 s.
	h.signal(100*time.Second, crewlet.SignalDrain, crewlet.DrainRequest{Reason: "maintenance", By: "olga"})
	drained := h.view(101 * time.Second)
	h.signal(200*time.Second, crewlet.SignalResume, crewlet.ResumeRequest{By: "olga"})
	h.run(seatIn(), 210*time.Second)

	eq(t, "status drained", drained.state.Status, crewlet.StatusDrained)
	if drained.state.Unplaceable != nil {
		t.Errorf("drained seat shows a back-off: %+v", drained.state.Unplaceable)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	eq(t, "placed at", p.placedAt, seconds(0, 1, 3, 7, 15, 31, 63, 200, 201, 203, 207))
}

// A wake that arrives while a placement runs (a node joined after the
// placement read the nodes) is not lost: the wait after that placement
// ends at once.
func TestSeatWakeDuringAPlacementEndsTheNextWait(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	var at []time.Duration
	start := h.env.Now()
	h.world.placeHook = func(w *fakeSeatWorld, _ crewlet.PlaceSeatInput) error {
		at = append(at, w.env.Now().Sub(start))
		switch len(w.placements) {
		case 4: // at 7 s: refused, and a node joins meanwhile
			w.env.SignalWorkflow(crewlet.SignalWake, nil)
			return unplaceableErr()
		case 5:
			return nil
		}
		return unplaceableErr()
	}
	placed := h.view(8 * time.Second)
	h.run(seatIn(), time.Minute)

	eq(t, "placed at", at, seconds(0, 1, 3, 7, 7))
	eq(t, "status", placed.state.Status, crewlet.StatusIdle)
}
