package workflows

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/crewlet/crewlet"
)

// approvalGate makes round 1's first call wait on approval ap-1 until
// the test's start plus for, once; asked again, it runs.
func approvalGate(h *turnHarness, start time.Time, wait time.Duration) {
	asked := 0
	h.world.gate = func(in crewlet.ToolCallInput) *crewlet.ApprovalWait {
		if in.Round != 1 || in.Call.Call != 0 {
			return nil
		}
		asked++
		if asked > 1 {
			return nil
		}
		return &crewlet.ApprovalWait{ID: "ap-1", Tool: in.Call.Name, Until: start.Add(wait)}
	}
}

// A turn waits 24 simulated hours on an approval, then its decision's
// signal comes. While it waits the turn does nothing: no activity, no local
// activity, no timer but the wait's one; its state query says what it
// waits on; the signal ends the wait, the call is asked
// again, and the next round takes a profile again.
func TestTurnWaiting24HoursOnAnApprovalAddsOnlyTheSignalAndTimer(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.env.SetTestTimeout(30 * time.Second)
	start := h.env.Now()
	approvalGate(h, start, 48*time.Hour)
	h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "tracker__write")}}}

	var timers []time.Duration
	var steps []string
	waiting := false
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) {
		timers = append(timers, d)
		waiting = true
	})
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if waiting {
			steps = append(steps, "activity "+info.ActivityType.Name)
		}
	})
	h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if waiting {
			steps = append(steps, "local "+info.ActivityType.Name)
		}
	})
	var during crewlet.TurnProgress
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(crewlet.QueryState)
		if err == nil {
			_ = v.Get(&during)
		}
		if len(steps) != 0 || len(timers) != 1 {
			t.Errorf("after 24h waiting: steps %v, timers %v; want none but the wait's one timer", steps, timers)
		}
		waiting = false
		h.env.SignalWorkflow(crewlet.SignalApproval, crewlet.ApprovalSignal{Approval: "ap-other"})
		h.env.SignalWorkflow(crewlet.SignalApproval, crewlet.ApprovalSignal{Approval: "ap-1"})
	}, 24*time.Hour)
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnDone)
	eq(t, "timers", timers, []time.Duration{48 * time.Hour})
	if during.Approval == nil || during.Approval.Approval != "ap-1" || during.Approval.Tool != "tracker__write" || !during.Approval.Until.Equal(start.Add(48*time.Hour)) {
		t.Errorf("state while waiting: %+v; want waiting on ap-1", during.Approval)
	}
	eq(t, "steps", h.world.log, []string{
		"begin", "acquire p1", "model t0 r1 p1",
		"tool t0 r1 c0 tracker__write attempt=1 queue=crewlet.host.n1", "release",
		"tool t0 r1 c0 tracker__write attempt=1 queue=crewlet.host.n1", "acquire p1",
		"model t0 r2 p1", "finish done rounds=2", "release",
	})
	eq(t, "ended approvals", len(h.world.approvals), 0)
}

// With no decision the wait ends at the approval's until and
// EndApproval applies the policy's on_timeout; a person's stop ends it
// as a denial by them. Either way the call is asked again.
func TestTurnApprovalWaitEndsOnTimeoutOrStop(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		at   time.Duration
		send func(h *turnHarness)
		want string
	}{
		{"timeout", 2 * time.Hour, func(*turnHarness) {}, `end approval ap-1 timed_out=true stopped_by=""`},
		{"stop", 5 * time.Minute, func(h *turnHarness) {
			h.env.SignalWorkflow(crewlet.SignalStopTurn, crewlet.StopTurnRequest{By: "alice"})
		}, `end approval ap-1 timed_out=false stopped_by="alice"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newTurnHarness(t)
			approvalGate(h, h.env.Now(), time.Hour)
			h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "tracker__write")}}}
			h.env.RegisterDelayedCallback(func() { tt.send(h) }, min(tt.at, 59*time.Minute))
			out, err := h.run()
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"begin", "acquire p1", "model t0 r1 p1", "tool t0 r1 c0 tracker__write attempt=1 queue=crewlet.host.n1", "release",
				tt.want, "tool t0 r1 c0 tracker__write attempt=1 queue=crewlet.host.n1"}
			// A stopped turn takes no profile again: it ends at the round
			// boundary.
			if tt.name == "stop" {
				want = append(want, "finish stopped rounds=1", "release")
				eq(t, "status", out.Status, crewlet.TurnStopped)
			} else {
				want = append(want, "acquire p1", "model t0 r2 p1", "finish done rounds=2", "release")
			}
			eq(t, "steps", h.world.log, want)
		})
	}
}
