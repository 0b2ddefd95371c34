package workflows

import (
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
)

// heldFor is an AcquireProfile answer saying no profile can take the turn;
// until, when not zero, is when the soonest quarantine ends.
func heldFor(until time.Time) crewlet.AcquireProfileOutput {
	u := crewlet.ProfileUnavailable{Profile: "p1", Reason: crewlet.UnavailableMaxLoad}
	hold := &crewlet.ProfileHold{Profiles: []crewlet.ProfileUnavailable{u}}
	if !until.IsZero() {
		u.Reason, u.Until = crewlet.UnavailableQuarantined, &until
		hold = &crewlet.ProfileHold{Profiles: []crewlet.ProfileUnavailable{u}, Until: &until}
	}
	return crewlet.AcquireProfileOutput{Hold: hold}
}

func profileGone(profile string) error {
	return temporal.NewNonRetryableApplicationError("profile "+profile+": usage limit reached", crewlet.ErrorTypeProfileUnavailable, nil)
}

// A turn no profile can take waits inside itself, a timer to the soonest
// quarantine's end, and runs then: its triggers are not read again and it
// spends no round, and its state says which profiles hold it and until when.
func TestTurnHeldForAProfileRunsWhenTheQuarantineEnds(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	start := h.env.Now()
	until := start.Add(30 * time.Minute)
	h.world.acquire = func(int) crewlet.AcquireProfileOutput {
		if h.env.Now().Before(until) {
			return heldFor(until)
		}
		return crewlet.AcquireProfileOutput{Profile: "p2"}
	}
	var during crewlet.TurnProgress
	h.env.RegisterDelayedCallback(func() {
		if v, err := h.env.QueryWorkflow(crewlet.QueryState); err == nil {
			_ = v.Get(&during)
		}
	}, 10*time.Minute)
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids("begin", "acquire held", "acquire p2", "model t0 r1 p2", "finish done rounds=1", "release"))
	eq(t, "status", out.Status, crewlet.TurnDone)
	if during.Held == nil || during.Held.Until == nil || !during.Held.Until.Equal(until) || during.Held.Profiles[0].Reason != crewlet.UnavailableQuarantined || during.Profile != "" {
		t.Errorf("state while held: %+v; want held until %s by p1's quarantine", during, until)
	}
	if ran := h.env.Now().Sub(start); ran < 30*time.Minute || ran > 31*time.Minute {
		t.Errorf("the turn ran %s after it was held; want when the quarantine ended (30m)", ran)
	}
}

// A held turn with no known end (every profile at max_load) asks again as
// soon as a nudge says one freed, not at its recheck.
func TestTurnHeldForAProfileWakesOnTheFreedSignal(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	start := h.env.Now()
	h.world.acquire = func(n int) crewlet.AcquireProfileOutput {
		if n == 1 {
			return heldFor(time.Time{})
		}
		return crewlet.AcquireProfileOutput{Profile: "p1"}
	}
	var woke time.Time
	h.env.RegisterDelayedCallback(func() {
		woke = h.env.Now()
		h.env.SignalWorkflow(crewlet.SignalProfileFree, nil)
	}, 20*time.Second)
	if _, err := h.run(); err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids("begin", "acquire held", "acquire p1", "model t0 r1 p1", "finish done rounds=1", "release"))
	if ran := h.env.Now().Sub(start); ran >= profileRecheck || woke.IsZero() {
		t.Errorf("the turn ran %s after it was held; want at the nudge (20s), before the %s recheck", ran, profileRecheck)
	}
}

// A held turn with no nudge asks again at its recheck, so a lost signal
// makes it late, never stuck.
func TestTurnHeldForAProfileRechecksWithoutASignal(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	start := h.env.Now()
	h.world.acquire = func(n int) crewlet.AcquireProfileOutput {
		if n <= 2 {
			return heldFor(time.Time{})
		}
		return crewlet.AcquireProfileOutput{Profile: "p1"}
	}
	if _, err := h.run(); err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids("begin", "acquire held", "acquire held", "acquire p1", "model t0 r1 p1", "finish done rounds=1", "release"))
	if ran := h.env.Now().Sub(start); ran < 2*profileRecheck || ran > 2*profileRecheck+time.Minute {
		t.Errorf("the turn ran %s after it was held; want after two rechecks (%s)", ran, 2*profileRecheck)
	}
}

// A round whose profile became unusable mid-turn (a usage limit) fails over:
// the turn takes another profile of its pool and asks the same round again,
// counted once.
func TestTurnFailsOverMidTurn(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{read(0, "recall")}}, {err: profileGone("p1")}}
	h.world.acquire = func(n int) crewlet.AcquireProfileOutput {
		if n == 1 {
			return crewlet.AcquireProfileOutput{Profile: "p1"}
		}
		h.world.rounds[1].err = nil
		return crewlet.AcquireProfileOutput{Profile: "p2"}
	}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids("begin", "acquire p1", "model t0 r1 p1", "tool t0 r1 c0 recall attempt=1 queue=crewlet.host.n1",
		"model t0 r2 p1", "acquire p2", "model t0 r2 p2", "finish done rounds=2", "release"))
	eq(t, "rounds", out.Rounds, 2)
}

// A person's stop ends a turn held for a profile: recorded stopped, its
// waiter place given back.
func TestTurnHeldForAProfileStops(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		rounds []roundScript
		held   int // the ask that is held, from 1
		want   []string
	}{
		{"before its first round", nil, 1, ids("begin", "acquire held", "finish stopped rounds=0", "release")},
		{"after a failover found nothing", []roundScript{{err: profileGone("p1")}}, 2,
			ids("begin", "acquire p1", "model t0 r1 p1", "acquire held", "finish stopped rounds=1", "release")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newTurnHarness(t)
			h.world.rounds = tt.rounds
			h.world.acquire = func(n int) crewlet.AcquireProfileOutput {
				if n >= tt.held {
					return heldFor(time.Time{})
				}
				return crewlet.AcquireProfileOutput{Profile: "p1"}
			}
			h.env.RegisterDelayedCallback(func() {
				h.env.SignalWorkflow(crewlet.SignalStopTurn, crewlet.StopTurnRequest{By: "alice", Reason: "quota out"})
			}, time.Minute)
			out, err := h.run()
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "steps", h.world.log, tt.want)
			eq(t, "status", out.Status, crewlet.TurnStopped)
			eq(t, "note", h.world.finished.Note, "Turn stopped by alice: quota out")
		})
	}
}

// A turn of replies only makes no model call, so it takes no profile and
// is never held for one.
func TestTurnOfRepliesTakesNoProfile(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.threads = 0
	h.world.acquire = func(int) crewlet.AcquireProfileOutput { return heldFor(time.Time{}) }
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids("begin", "finish done rounds=0"))
	eq(t, "status", out.Status, crewlet.TurnDone)
}
