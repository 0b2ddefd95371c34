package workflows

import (
	"context"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// InterruptTurn records the interruption the turn asked for.
func (w *fakeTurnWorld) InterruptTurn(_ context.Context, in crewlet.InterruptTurnInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("interrupt t%d rounds=%d mail=%s", in.Thread, in.Rounds, names(in.Mail))
	return nil
}

// newInterruptHarness is a turn harness whose world also records
// interruptions.
func newInterruptHarness(t *testing.T) *turnHarness {
	h := newTurnHarness(t)
	h.env.RegisterActivityWithOptions(h.world.InterruptTurn, activity.RegisterOptions{Name: crewlet.ActivityInterruptTurn})
	return h
}

var m2 = crewlet.InterruptTurnRequest{Mail: []crewlet.MailRef{{StreamID: "2-0", EventID: "m2"}}}

// New mail that interrupts a turn stops it at the next round boundary: the
// round in flight finishes its tool call, InterruptTurn records the new
// mail with the round count, no further model call is made, and the turn
// ends interrupted without FinishTurn (nothing answered, ledgered or acked)
// and gives its profile back.
func TestTurnInterruptedStopsAtTheNextRoundBoundary(t *testing.T) {
	t.Parallel()
	h := newInterruptHarness(t)
	h.world.rounds = []roundScript{
		{calls: []crewlet.ToolCallRef{write(0, "fs__write")}},
		{calls: []crewlet.ToolCallRef{write(0, "fs__write")}},
	}
	h.world.duringRound = func(round int) {
		if round == 1 {
			h.env.SignalWorkflow(crewlet.SignalInterruptTurn, m2)
		}
	}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids(
		"begin",
		"acquire p1",
		"model t0 r1 p1",
		"tool t0 r1 c0 fs__write attempt=1 queue=crewlet.host.n1",
		"interrupt t0 rounds=1 mail=m2",
		"release"))
	eq(t, "status", out.Status, crewlet.TurnInterrupted)
	eq(t, "rounds", out.Rounds, 1)
	if h.world.finished != nil {
		t.Fatalf("FinishTurn ran (%+v); an interrupted turn answers nothing", *h.world.finished)
	}
}

// An interrupt_turn payload that fails its check is dropped and logged; the
// turn runs to its end.
func TestTurnDropsAnInterruptWithoutMail(t *testing.T) {
	t.Parallel()
	h := newInterruptHarness(t)
	h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{read(0, "fs__read")}}}
	h.world.duringRound = func(round int) {
		if round == 1 {
			h.env.SignalWorkflow(crewlet.SignalInterruptTurn, crewlet.InterruptTurnRequest{})
			h.env.SignalWorkflow(crewlet.SignalInterruptTurn, crewlet.InterruptTurnRequest{Mail: []crewlet.MailRef{{StreamID: "2-0", EventID: "m 2"}}})
		}
	}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnDone)
	eq(t, "steps", h.world.log, ids(
		"begin",
		"acquire p1",
		"model t0 r1 p1",
		"tool t0 r1 c0 fs__read attempt=1 queue=crewlet.host.n1",
		"model t0 r2 p1",
		"finish done rounds=2",
		"release"))
}

// A turn begun before turn-interrupt ignores interrupt_turn: a worker of
// the older code recorded the signal and went on, so the replay must too.
func TestTurnBeforeTheChangeIgnoresInterrupts(t *testing.T) {
	t.Parallel()
	h := newInterruptHarness(t)
	h.env.OnGetVersion(changeTurnInterrupt, workflow.DefaultVersion, turnInterruptVersion).Return(workflow.DefaultVersion)
	h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{read(0, "fs__read")}}}
	h.world.duringRound = func(round int) {
		if round == 1 {
			h.env.SignalWorkflow(crewlet.SignalInterruptTurn, m2)
		}
	}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnDone)
	eq(t, "rounds", out.Rounds, 2)
}
