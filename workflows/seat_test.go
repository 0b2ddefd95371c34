package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

func TestSeatMailRunsInBatchesAndAcks(t *testing.T) {
	t.Parallel()
	type publish struct {
		at  time.Duration
		ids []string
	}
	cases := []struct {
		name      string
		readBatch int
		mail      []publish
		want      []string
		// wantTurns are the turns, one per read: "m1,m2" is one turn
		// answering both, in mailbox order.
		wantTurns []string
	}{
		{name: "one message", mail: []publish{{time.Second, ids("m1")}}, want: ids("m1"), wantTurns: ids("m1")},
		{name: "mail in one publish is one turn in mailbox order",
			mail: []publish{{time.Second, ids("m1", "m2", "m3")}}, want: ids("m1", "m2", "m3"), wantTurns: ids("m1,m2,m3")},
		{name: "mail spread over several wakes",
			mail: []publish{{time.Second, ids("m1")}, {time.Minute, ids("m2", "m3")}, {20 * time.Minute, ids("m4")}},
			want: ids("m1", "m2", "m3", "m4"), wantTurns: ids("m1", "m2,m3", "m4")},
		{name: "more mail than one read takes is one turn per read", readBatch: 2,
			mail: []publish{{time.Second, ids("m1", "m2", "m3", "m4", "m5")}},
			want: ids("m1", "m2", "m3", "m4", "m5"), wantTurns: ids("m1,m2", "m3,m4", "m5")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newSeatHarness(t)
			for _, p := range tc.mail {
				h.publish(p.at, p.ids...)
			}
			before := h.view(500 * time.Millisecond)
			after := h.view(50 * time.Minute)
			in := seatIn()
			in.ReadBatch = tc.readBatch
			h.run(in, time.Hour)

			eq(t, "status at start", before.state.Status, crewlet.StatusIdle)
			eq(t, "host queue at start", before.state.HostQueue, hostQueue("node-a"))
			eq(t, "holds at start", before.holds, ids("e1@node-a"))
			eq(t, "turns run", after.turns, tc.wantTurns)
			eq(t, "answered", after.ran, tc.want)
			eq(t, "mail acked", after.acked, tc.want)
			eq(t, "acks (one per turn, after it)", after.acks, tc.wantTurns)
			eq(t, "counters", after.state.Counters, crewlet.SeatCounters{
				Turns: int64(len(tc.wantTurns)), Triggers: int64(len(tc.want)), Establishes: 1})
			eq(t, "status", after.state.Status, crewlet.StatusIdle)
			eq(t, "epoch", after.state.Epoch, int64(1))
			eq(t, "node", after.state.Node, "node-a")
			eq(t, "handle", after.state.Handle, testHandle)
			eq(t, "role", after.state.Role, testRole)
			eq(t, "turn in flight", after.state.Turn, (*crewlet.CurrentTurn)(nil))
			eq(t, "queued mail", after.state.QueuedMail, int64(0))
			eq(t, "last error", after.state.LastError, "")
			eq(t, "attaches", after.attaches, 1)
			eq(t, "holds (one for the whole tenure)", after.holds, ids("e1@node-a"))
			eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{firstPlacement})
			eq(t, "detaches", after.detaches, 0)
			for _, id := range tc.want {
				eq(t, "deliveries of "+id, h.world.deliveries[id], 1)
			}
			for i, q := range h.world.turnQueues() {
				eq(t, fmt.Sprintf("task queue of turn %d", i), q, hostQueue("node-a"))
			}
			h.world.mu.Lock()
			for _, turn := range h.world.turns {
				key := crewlet.WorkKey(strings.Split(turn.names, ","))
				eq(t, "work key of turn "+turn.names, turn.workKey, key)
				eq(t, "id of turn "+turn.names, turn.turnID, "turn/"+testHandle+"/"+key)
			}
			eq(t, "prepared (every read, before its turn)", h.world.prepares, tc.wantTurns)
			h.world.mu.Unlock()
			eq(t, "establish", h.events()[:2], ids("place exclude=[]", "attach e1 node-a queue="+hostQueue("node-a")))
		})
	}
}

func TestSeatPauseAndResume(t *testing.T) {
	t.Parallel()
	pause := crewlet.PauseRequest{Reason: "budget review", By: "olga"}

	t.Run("pause holds new mail and reports the hold", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		h.signal(10*time.Second, crewlet.SignalPause, pause)
		h.publish(20*time.Second, "m2", "m3")
		held := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run while paused", held.ran, ids("m1"))
		eq(t, "status", held.state.Status, crewlet.StatusPaused)
		if held.state.Pause == nil {
			t.Fatalf("state.Pause: got nil, want the hold by %q", pause.By)
		}
		eq(t, "pause by", held.state.Pause.By, pause.By)
		eq(t, "pause reason", held.state.Pause.Reason, pause.Reason)
		eq(t, "pause since", held.state.Pause.Since.IsZero(), false)
		eq(t, "CrewletPaused search attribute", held.paused, "true")
		eq(t, "recorded statuses", statusNames(h.world), ids("paused"))
		eq(t, "holds (a pause keeps the tenure)", held.holds, ids("e1@node-a"))
	})

	t.Run("a pause during a turn lets it finish and holds mail that came meanwhile", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.duringTurn = func(id string) {
			if id == "m1" {
				h.world.publish("m2", "m3")
				h.env.SignalWorkflow(crewlet.SignalWake, nil)
				h.env.SignalWorkflow(crewlet.SignalPause, pause)
			}
		}
		h.publish(time.Second, "m1")
		held := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run", held.turns, ids("m1"))
		eq(t, "acked", held.acked, ids("m1"))
		eq(t, "status", held.state.Status, crewlet.StatusPaused)
		eq(t, "turn in flight", held.state.Turn, (*crewlet.CurrentTurn)(nil))
	})

	t.Run("resume releases every held message once, in order", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		h.signal(10*time.Second, crewlet.SignalPause, pause)
		h.publish(20*time.Second, "m2", "m3")
		h.publish(2*time.Minute, "m4")
		held := h.view(30 * time.Minute)
		h.signal(31*time.Minute, crewlet.SignalResume, crewlet.ResumeRequest{By: "olga"})
		after := h.view(40 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run while paused", held.turns, ids("m1"))
		eq(t, "turns run after resume (the held mail is one batch)", after.turns, ids("m1", "m2,m3,m4"))
		eq(t, "acked", after.acked, ids("m1", "m2", "m3", "m4"))
		eq(t, "acks", after.acks, ids("m1", "m2,m3,m4"))
		eq(t, "counters", after.state.Counters, crewlet.SeatCounters{Turns: 2, Triggers: 4, Establishes: 1})
		for _, id := range after.ran {
			eq(t, "deliveries of "+id, h.world.deliveries[id], 1)
		}
		eq(t, "status", after.state.Status, crewlet.StatusIdle)
		eq(t, "pause", after.state.Pause, (*crewlet.PauseHold)(nil))
		eq(t, "CrewletPaused search attribute", after.paused, "false")
		eq(t, "epoch (a pause keeps the tenure)", after.state.Epoch, int64(1))
		eq(t, "attaches", after.attaches, 1)
		eq(t, "holds", after.holds, ids("e1@node-a"))
		eq(t, "recorded statuses", statusNames(h.world), ids("paused", "active"))
	})
}

func TestSeatDrain(t *testing.T) {
	t.Parallel()
	drain := crewlet.DrainRequest{Reason: "node maintenance", By: "ops"}
	h := newSeatHarness(t)
	h.world.duringTurn = func(id string) {
		if id == "m1" {
			h.world.publish("m2", "m3")
			h.env.SignalWorkflow(crewlet.SignalWake, nil)
			h.env.SignalWorkflow(crewlet.SignalDrain, drain)
		}
	}
	h.publish(time.Second, "m1")
	h.publish(5*time.Minute, "m4")
	drained := h.view(20 * time.Minute)
	h.signal(21*time.Minute, crewlet.SignalResume, crewlet.ResumeRequest{By: "ops"})
	after := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	t.Run("the turn in flight finishes and no new turn starts", func(t *testing.T) {
		eq(t, "turns run", drained.turns, ids("m1"))
		eq(t, "acked", drained.acked, ids("m1"))
		eq(t, "turns counter", drained.state.Counters.Turns, int64(1))
		// One empty read on attach, one that got m1; none after the turn.
		eq(t, "mailbox reads", drained.reads, 2)
	})
	t.Run("the seat ends drained and releases its host", func(t *testing.T) {
		eq(t, "status", drained.state.Status, crewlet.StatusDrained)
		eq(t, "node", drained.state.Node, "")
		eq(t, "host queue", drained.state.HostQueue, "")
		if drained.state.Drain == nil {
			t.Fatalf("state.Drain: got nil, want the drain by %q", drain.By)
		}
		eq(t, "drain by", drained.state.Drain.By, drain.By)
		eq(t, "drain reason", drained.state.Drain.Reason, drain.Reason)
		eq(t, "holds", drained.holds, ids("e1@node-a:cancelled"))
		eq(t, "detaches", drained.detaches, 1)
		h.world.mu.Lock()
		defer h.world.mu.Unlock()
		eq(t, "detach", h.world.detaches[0], crewlet.DetachInput{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Reason: "drain"})
		if len(h.world.statuses) == 0 {
			t.Fatalf("SetSeatStatus: never called, want drained at epoch 1")
		}
		eq(t, "first recorded status", h.world.statuses[0], crewlet.SeatStatusInput{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Status: "drained"})
	})
	t.Run("resume re-establishes with a new epoch and runs the held mail", func(t *testing.T) {
		eq(t, "turns run", after.turns, ids("m1", "m2,m3,m4"))
		eq(t, "acked", after.acked, ids("m1", "m2", "m3", "m4"))
		eq(t, "epoch", after.state.Epoch, int64(2))
		eq(t, "node (a drain excludes no node)", after.state.Node, "node-a")
		eq(t, "status", after.state.Status, crewlet.StatusIdle)
		eq(t, "drain", after.state.Drain, (*crewlet.DrainHold)(nil))
		eq(t, "attaches", after.attaches, 2)
		eq(t, "establishes", after.state.Counters.Establishes, int64(2))
		eq(t, "epochs the turns ran under", h.world.turnEpochs(), []int64{1, 2})
		eq(t, "holds", after.holds, ids("e1@node-a:cancelled", "e2@node-a"))
		eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{firstPlacement, firstPlacement})
		q := hostQueue("node-a")
		eq(t, "order", h.events()[:7], ids(
			"place exclude=[]", "attach e1 node-a queue="+q,
			"turn m1 e1 ok", "ack m1 e1",
			`detach e1 "drain" queue=`+q,
			"place exclude=[]", "attach e2 node-a queue="+q))
	})
}

// decodeCarry checks err is a continue-as-new of Seat and returns its input.
func decodeCarry(t *testing.T, err error) crewlet.SeatInput {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("seat ended with %v (%T); want a *workflow.ContinueAsNewError", err, err)
	}
	if can.WorkflowType == nil || can.WorkflowType.Name != crewlet.WorkflowSeat {
		t.Fatalf("continue-as-new workflow type: got %+v, want Seat", can.WorkflowType)
	}
	var next crewlet.SeatInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatalf("decode continue-as-new input: %v", err)
	}
	if next.Carry == nil {
		t.Fatalf("continue-as-new input has no carry: %+v", next)
	}
	return next
}

// A hand_over signal, which the current build's nodes send, ends a run
// of the child-turn shape (below node-liveness 5) at the top of its loop:
// the turn in flight (a Turn child) finishes and its mail is acked first,
// and the tenure is carried, so the next run, of the inline shape, goes on
// with it. The signal is in the run's history, so a replay takes the same
// path; a version marker could not do it: a run replaying its old loop
// cycles on the new build would take the old branch at the first call,
// and keep it.
func TestSeatOfTheChildShapeHandsOverWhenAsked(t *testing.T) {
	t.Parallel()
	h := newLegacySeatHarness(t)
	h.publish(time.Second, "m1")
	h.signal(time.Second, crewlet.SignalHandOver, nil)
	next := decodeCarry(t, h.run(seatIn(), 0))

	c := next.Carry
	eq(t, "attached", c.Attached, true)
	eq(t, "epoch", c.State.Epoch, int64(1))
	eq(t, "node", c.State.Node, "node-a")
	eq(t, "turns run before the hand-over", h.world.turnNames(), ids("m1"))
	eq(t, "acked", slices.Contains(h.events(), "ack m1 e1"), true)
}

// An inline seat hands over when asked too, idle or not: a node of the
// current build asks the seats on other builds, and an operator may.
func TestSeatHandsOverWhenAsked(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.publish(time.Second, "m1")
	h.signal(time.Minute, crewlet.SignalHandOver, nil)
	next := decodeCarry(t, h.run(seatIn(), 0))

	eq(t, "attached", next.Carry.Attached, true)
	eq(t, "turns run before the hand-over", h.world.turnNames(), ids("m1"))
}

func TestSeatContinueAsNew(t *testing.T) {
	t.Parallel()
	t.Run("an idle seat hands over when Temporal suggests it, however many cycles it ran, with its state", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1", "m2")
		// No cancel: backstop timers drive the loop, a minute apart, well
		// past the bound runs below node-liveness 5 kept (cyclesPerRun),
		// until Temporal suggests continue-as-new.
		in := seatIn()
		in.HeartbeatTimeout = 7 * time.Second
		in.ReleaseWait = time.Minute
		in.Backstop = time.Minute
		suggestAt := time.Duration(2*cyclesPerRun) * time.Minute
		h.at(suggestAt, func() { h.env.SetContinueAsNewSuggested(true) })
		next := decodeCarry(t, h.run(in, 0))

		eq(t, "handle", next.Handle, testHandle)
		eq(t, "role", next.Role, testRole)
		eq(t, "heartbeat timeout", next.HeartbeatTimeout, 7*time.Second)
		eq(t, "release wait", next.ReleaseWait, time.Minute)
		c := next.Carry
		eq(t, "attached", c.Attached, true)
		eq(t, "move", c.Move, (*crewlet.MoveRequest)(nil))
		eq(t, "epoch", c.State.Epoch, int64(1))
		eq(t, "node", c.State.Node, "node-a")
		eq(t, "host queue", c.State.HostQueue, hostQueue("node-a"))
		eq(t, "counters", c.State.Counters, crewlet.SeatCounters{Turns: 1, Triggers: 2, Establishes: 1})
		eq(t, "turns run", h.world.turnNames(), ids("m1,m2"))
		eq(t, "holds (the next run takes the tenure over)", h.world.holdNames(), ids("e1@node-a"))
		eq(t, "detaches", len(h.world.detaches), 0)
		// Every backstop is one mailbox read.
		if h.world.reads < 2*cyclesPerRun-2 || h.world.reads > 2*cyclesPerRun+2 {
			t.Errorf("mailbox reads before the hand-over: got %d, want about one a minute for %s (%d)", h.world.reads, suggestAt, 2*cyclesPerRun)
		}
	})

	t.Run("a pause that arrives before the hand-over is carried", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1", "m2", "m3")
		h.at(10*time.Minute, func() {
			h.env.SetContinueAsNewSuggested(true)
			h.env.SignalWorkflow(crewlet.SignalPause, crewlet.PauseRequest{Reason: "upgrade", By: "olga"})
		})
		next := decodeCarry(t, h.run(seatIn(), 0))

		c := next.Carry
		eq(t, "attached", c.Attached, true)
		eq(t, "epoch", c.State.Epoch, int64(1))
		eq(t, "counters", c.State.Counters, crewlet.SeatCounters{Turns: 1, Triggers: 3, Establishes: 1})
		if c.State.Pause == nil {
			t.Fatalf("carried pause: got nil, want the hold by olga")
		}
		eq(t, "carried pause by", c.State.Pause.By, "olga")
		eq(t, "carried pause reason", c.State.Pause.Reason, "upgrade")
	})

	t.Run("a pause still in the signal channel at the hand-over is carried", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		// The pause is only buffered; the next backstop timer (at about 10 min)
		// unblocks the loop in the same workflow task, so the loop reaches the
		// hand-over before the signal coroutine has seen the pause.
		h.at(7*time.Minute, func() {
			h.env.SetContinueAsNewSuggested(true)
			h.env.SignalWorkflowSkippingWorkflowTask(crewlet.SignalPause, crewlet.PauseRequest{Reason: "upgrade", By: "olga"})
		})
		next := decodeCarry(t, h.run(seatIn(), 0))

		c := next.Carry
		if c.State.Pause == nil {
			t.Fatalf("carried pause: got nil, want the hold by olga")
		}
		eq(t, "carried pause by", c.State.Pause.By, "olga")
		eq(t, "counters", c.State.Counters, crewlet.SeatCounters{Turns: 1, Triggers: 1, Establishes: 1})
	})

	t.Run("a move still in the signal channel at the hand-over is carried", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		move := crewlet.MoveRequest{ExcludeNode: "node-a", Reason: "rebalance", By: "rebalancer"}
		h.at(7*time.Minute, func() {
			h.env.SetContinueAsNewSuggested(true)
			h.env.SignalWorkflowSkippingWorkflowTask(crewlet.SignalMove, move)
		})
		next := decodeCarry(t, h.run(seatIn(), 0))

		c := next.Carry
		eq(t, "carried move", c.Move, &move)
		eq(t, "attached (the next run moves)", c.Attached, true)
		eq(t, "detaches", len(h.world.detaches), 0)
	})

	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("a seat started with a carry keeps its tenure (legacy %v)", legacy), func(t *testing.T) {
			carriedTenure(t, legacy)
		})
	}

	t.Run("a seat started with a carried move moves first", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.epoch, h.world.attaches, h.world.node = 3, 3, "node-a"
		in := seatIn()
		in.Carry = &crewlet.SeatCarry{
			Attached: true,
			Move:     &crewlet.MoveRequest{ExcludeNode: "node-a", Reason: "rebalance", By: "rebalancer"},
			State: crewlet.SeatState{
				Handle: testHandle, Role: testRole, Status: crewlet.StatusIdle,
				Epoch: 3, Node: "node-a", HostQueue: hostQueue("node-a"),
			},
		}
		h.publish(time.Minute, "m1")
		after := h.view(10 * time.Minute)
		h.run(in, time.Hour)

		eq(t, "node", after.state.Node, "node-b")
		eq(t, "epoch", after.state.Epoch, int64(4))
		// The carried tenure's Hold is cancelled at once, racing its start in
		// the test environment: it may show cancelled, uncancelled or not at
		// all.
		holds := slices.DeleteFunc(slices.Clone(after.holds), func(h string) bool {
			return h == "e3@node-a:cancelled" || h == "e3@node-a"
		})
		eq(t, "holds (the carried one cancelled or never started)", holds, ids("e4@node-b"))
		eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{{Handle: testHandle, Exclude: ids("node-a")}})
		eq(t, "detaches", h.world.detaches, []crewlet.DetachInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 3}, Reason: "move: rebalance"}})
		eq(t, "turns run", after.ran, ids("m1"))
		eq(t, "epochs the turns ran under", h.world.turnEpochs(), []int64{4})
	})
}

// carriedTenure runs a seat started with a carry: it keeps the carried
// tenure, and a legacy run holds it with a Hold of its own.
func carriedTenure(t *testing.T, legacy bool) {
	h := newSeatHarnessOf(t, legacy)
	h.world.epoch = 3 // the tenure the previous run held
	h.world.attaches = 3
	h.world.node = "node-b"
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	in := seatIn()
	in.Carry = &crewlet.SeatCarry{
		Attached: true,
		State: crewlet.SeatState{
			Handle: testHandle, Role: testRole, Status: crewlet.StatusPaused,
			Epoch: 3, Node: "node-b", HostQueue: hostQueue("node-b"),
			Pause:    &crewlet.PauseHold{By: "olga", Reason: "upgrade", Since: since},
			Counters: crewlet.SeatCounters{Turns: 7, Triggers: 8, Establishes: 3, ContinuedRuns: 1},
		},
	}
	h.publish(time.Second, "m1")
	held := h.view(10 * time.Minute)
	h.signal(11*time.Minute, crewlet.SignalResume, crewlet.ResumeRequest{By: "olga"})
	after := h.view(20 * time.Minute)
	h.run(in, time.Hour)

	eq(t, "status", held.state.Status, crewlet.StatusPaused)
	eq(t, "pause", held.state.Pause, &crewlet.PauseHold{By: "olga", Reason: "upgrade", Since: since})
	eq(t, "epoch", held.state.Epoch, int64(3))
	eq(t, "node", held.state.Node, "node-b")
	eq(t, "counters", held.state.Counters, crewlet.SeatCounters{Turns: 7, Triggers: 8, Establishes: 3, ContinuedRuns: 2})
	eq(t, "turns run while paused", held.ran, []string(nil))
	eq(t, "CrewletPaused search attribute", held.paused, "true")
	if legacy {
		eq(t, "holds (this run holds the carried tenure)", held.holds, ids("e3@node-b"))
	} else {
		eq(t, "holds (nothing holds an idle tenure)", held.holds, []string(nil))
	}
	eq(t, "placements", held.placements, 0)

	eq(t, "turns run after resume", after.ran, ids("m1"))
	eq(t, "epoch after resume", after.state.Epoch, int64(3))
	eq(t, "attaches (none by this run)", after.attaches, 3)
	eq(t, "turns counter", after.state.Counters.Turns, int64(8))
	eq(t, "status after resume", after.state.Status, crewlet.StatusIdle)
	eq(t, "task queue of the turn", h.world.turnQueues(), ids(hostQueue("node-b")))
}

func TestSeatFencedReestablishes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		wantEpoch int64
		// wantNode and wantExclude: a fenced seat may come back to its node;
		// a seat whose host timed out must not.
		wantNode    string
		wantExclude []string
		setup       func(w *fakeSeatWorld)
	}{
		{name: "fenced mailbox read", wantEpoch: 2, wantNode: "node-a", setup: func(w *fakeSeatWorld) {
			var done bool
			w.readHook = func(w *fakeSeatWorld) error {
				if len(w.fresh) == 0 {
					return nil
				}
				return fenceOnce(&done, "read mail")
			}
		}},
		{name: "fenced turn", wantEpoch: 2, wantNode: "node-a", setup: func(w *fakeSeatWorld) {
			var done bool
			w.turnHook = func(_ *fakeSeatWorld, ref crewlet.MailRef) error {
				if ref.EventID != "m1" {
					return nil
				}
				return fenceOnce(&done, "run turn")
			}
		}},
		{name: "tenure taken by another attach", wantEpoch: 3, wantNode: "node-a", setup: func(w *fakeSeatWorld) {
			var done bool
			w.readHook = func(w *fakeSeatWorld) error {
				if len(w.fresh) > 0 && !done {
					done = true
					w.epoch++ // someone else attached; the seat's epoch is stale now
				}
				return nil
			}
		}},
		{name: "turn timed out on its host", wantEpoch: 2, wantNode: "node-b", wantExclude: ids("node-a"), setup: func(w *fakeSeatWorld) {
			w.turnHook = func(w *fakeSeatWorld, ref crewlet.MailRef) error {
				if ref.EventID == "m1" && w.epoch == 1 {
					return temporal.NewHeartbeatTimeoutError()
				}
				return nil
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" makes the seat re-attach and carry on", func(t *testing.T) {
			h := newSeatHarness(t)
			tc.setup(h.world)
			h.publish(time.Second, "m1", "m2")
			after := h.view(30 * time.Minute)
			h.run(seatIn(), time.Hour)

			eq(t, "turns run", after.turns, ids("m1,m2"))
			eq(t, "acked", after.acked, ids("m1", "m2"))
			eq(t, "acks", after.acks, ids("m1,m2"))
			eq(t, "attaches", after.attaches, 2)
			eq(t, "epoch", after.state.Epoch, tc.wantEpoch)
			eq(t, "node", after.state.Node, tc.wantNode)
			eq(t, "epochs the turns ran under", h.world.turnEpochs(), []int64{tc.wantEpoch})
			eq(t, "establishes", after.state.Counters.Establishes, int64(2))
			eq(t, "turns counter", after.state.Counters.Turns, int64(1))
			eq(t, "triggers counter", after.state.Counters.Triggers, int64(2))
			eq(t, "failures", after.state.Counters.Failures, int64(0))
			eq(t, "status", after.state.Status, crewlet.StatusIdle)
			eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{firstPlacement, {Handle: testHandle, Exclude: tc.wantExclude}})
			eq(t, "holds (the lost tenure's is cancelled)", after.holds,
				ids("e1@node-a:cancelled", fmt.Sprintf("e%d@%s", tc.wantEpoch, tc.wantNode)))
			eq(t, "detaches (a lost tenure is abandoned)", after.detaches, 0)
		})
	}
}

// A timeout that is not the host's (a local activity or a turn whose
// retries ran out while Postgres was down for every node) is a failure the
// seat retries on the same tenure: no re-establish, no lost host, and the
// mail is answered once the store is back (outage-not-host-loss 1).
func TestSeatOutageTimeoutKeepsTheTenure(t *testing.T) {
	t.Parallel()
	storeDown := temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, errors.New("connection refused"))
	cases := []struct {
		name  string
		setup func(w *fakeSeatWorld)
	}{
		{"mailbox read", func(w *fakeSeatWorld) {
			var done bool
			w.readHook = func(w *fakeSeatWorld) error {
				if len(w.fresh) == 0 || done {
					return nil
				}
				done = true
				return storeDown
			}
		}},
		{"turn", func(w *fakeSeatWorld) {
			w.turnHook = func(w *fakeSeatWorld, ref crewlet.MailRef) error {
				if w.deliveries[ref.EventID] == 1 {
					return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, errors.New("connection refused"))
				}
				return nil
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newSeatHarness(t)
			tc.setup(h.world)
			h.publish(time.Second, "m1")
			after := h.view(30 * time.Minute)
			h.run(seatIn(), time.Hour)

			eq(t, "acked", after.acked, ids("m1"))
			eq(t, "attaches", after.attaches, 1)
			eq(t, "epoch", after.state.Epoch, int64(1))
			eq(t, "node", after.state.Node, "node-a")
			eq(t, "establishes", after.state.Counters.Establishes, int64(1))
			eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{firstPlacement})
		})
	}
}

func TestSeatFailedTurn(t *testing.T) {
	t.Parallel()
	modelDown := errors.New("model provider unavailable")

	t.Run("a failing batch stays unacked, then the seat reads one at a time until a turn succeeds", func(t *testing.T) {
		h := newSeatHarness(t)
		// RunTurn is not retried by Temporal: each failure is one delivery.
		h.world.turnHook = func(w *fakeSeatWorld, ref crewlet.MailRef) error {
			if ref.EventID == "m1" && w.deliveries["m1"] <= 2 {
				return modelDown
			}
			return nil
		}
		h.publish(time.Second, "m1", "m2")
		// Failures at 1s (batch m1,m2) and (after 2s of back-off) at 3s (m1
		// alone); then 4s of back-off, m1 runs alone, then m2.
		failing := h.view(2 * time.Second)
		backingOff := h.view(6 * time.Second)
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run after the first failure", failing.ran, []string(nil))
		eq(t, "acked after the first failure", failing.acked, []string(nil))
		eq(t, "failures after the first failure", failing.state.Counters.Failures, int64(1))
		if !strings.Contains(failing.state.LastError, modelDown.Error()) {
			t.Errorf("last error after the first failure: got %q, want it to mention %q", failing.state.LastError, modelDown)
		}
		eq(t, "status after the first failure", failing.state.Status, crewlet.StatusIdle)
		eq(t, "failures during the second back-off", backingOff.state.Counters.Failures, int64(2))
		eq(t, "turns run during the second back-off", backingOff.ran, []string(nil))

		eq(t, "turns run", after.turns, ids("m1", "m2"))
		eq(t, "acked", after.acked, ids("m1", "m2"))
		eq(t, "acks", after.acks, ids("m1", "m2"))
		eq(t, "failures", after.state.Counters.Failures, int64(2))
		eq(t, "turns counter", after.state.Counters.Turns, int64(2))
		eq(t, "triggers counter", after.state.Counters.Triggers, int64(2))
		eq(t, "last error (cleared by a good turn)", after.state.LastError, "")
		eq(t, "deliveries of m1", h.world.deliveries["m1"], 3)
		eq(t, "attempts of m1", h.world.attempts["m1"], 3)
		eq(t, "deliveries of m2", h.world.deliveries["m2"], 2)
		eq(t, "attempts of m2", h.world.attempts["m2"], 2)
		eq(t, "order", h.events()[2:], ids(
			"turn m1,m2 e1 failed", "turn m1 e1 failed", "turn m1 e1 ok", "ack m1 e1", "turn m2 e1 ok", "ack m2 e1"))
		h.world.mu.Lock()
		eq(t, "read sizes (attach, batch, after each failure, after success)", h.world.readMax[:5], []int{16, 16, 1, 1, 16})
		h.world.mu.Unlock()
		eq(t, "epoch (a failed turn keeps the tenure)", after.state.Epoch, int64(1))
		eq(t, "holds", after.holds, ids("e1@node-a"))
	})

	t.Run("a message that always fails does not end the seat", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.turnHook = func(_ *fakeSeatWorld, ref crewlet.MailRef) error {
			if ref.EventID == "m1" {
				return modelDown
			}
			return nil
		}
		h.publish(time.Second, "m1")
		// A failing cycle takes at most failureBackoff, so cancel well before
		// cyclesPerRun of them would hand over the run.
		after := h.view(15 * time.Minute)
		h.run(seatIn(), 20*time.Minute) // still running until cancelled

		eq(t, "turns run", after.ran, []string(nil))
		eq(t, "acked", after.acked, []string(nil))
		if after.state.Counters.Failures < 2 {
			t.Errorf("failures: got %d, want the seat to keep retrying (>= 2)", after.state.Counters.Failures)
		}
		if after.state.LastError == "" {
			t.Errorf("last error: got empty, want the turn failure")
		}
		if st := after.state.Status; st != crewlet.StatusIdle && st != crewlet.StatusRunning {
			t.Errorf("status: got %q, want idle or running (still serving)", st)
		}
		if d := h.world.deliveries["m1"]; d < 2 {
			t.Errorf("deliveries of m1: got %d, want it handed out again after each failure (>= 2)", d)
		}
		eq(t, "epoch (failed turns keep the tenure)", after.state.Epoch, int64(1))
	})
}

func TestSeatHostLost(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("while idle the seat re-establishes elsewhere and runs held mail once (legacy %v)", legacy), func(t *testing.T) {
			idleHostLost(t, legacy)
		})
	}

	t.Run("while paused the seat re-establishes and stays paused", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		h.signal(10*time.Second, crewlet.SignalPause, crewlet.PauseRequest{Reason: "review", By: "olga"})
		h.publish(20*time.Second, "m2")
		paused := h.view(30 * time.Second)
		h.loseHost(time.Minute, "node-a")
		held := h.view(20 * time.Minute)
		h.signal(21*time.Minute, crewlet.SignalResume, crewlet.ResumeRequest{By: "olga"})
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "status before the loss", paused.state.Status, crewlet.StatusPaused)
		eq(t, "status", held.state.Status, crewlet.StatusPaused)
		if held.state.Pause == nil || held.state.Pause.By != "olga" {
			t.Errorf("pause: got %+v, want the hold by olga kept", held.state.Pause)
		}
		eq(t, "CrewletPaused search attribute", held.paused, "true")
		eq(t, "epoch", held.state.Epoch, int64(2))
		eq(t, "node", held.state.Node, "node-b")
		eq(t, "holds", held.holds, ids("e1@node-a:lost", "e2@node-b"))
		eq(t, "mailbox reads while paused", held.reads, paused.reads)
		eq(t, "turns run while paused", held.ran, ids("m1"))
		eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{firstPlacement, {Handle: testHandle, Exclude: ids("node-a")}})
		h.world.mu.Lock()
		eq(t, "recorded statuses (the new tenure records the pause too)", h.world.statuses, []crewlet.SeatStatusInput{
			{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Status: "paused"},
			{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 2}, Status: "paused"},
			{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 2}, Status: "active"},
		})
		h.world.mu.Unlock()

		eq(t, "turns run after resume", after.ran, ids("m1", "m2"))
		eq(t, "turns", after.turns, ids("m1", "m2"))
		eq(t, "epochs the turns ran under", h.world.turnEpochs(), []int64{1, 2})
		eq(t, "status after resume", after.state.Status, crewlet.StatusIdle)
		eq(t, "deliveries of m2", h.world.deliveries["m2"], 1)
	})
}

// idleHostLost loses an idle seat's host: a legacy run learns it from its
// Hold's heartbeat timeout, a run since node-level liveness from the
// failure detector's host_lost signal; either re-establishes elsewhere.
func idleHostLost(t *testing.T, legacy bool) {
	h := newSeatHarnessOf(t, legacy)

	h.publish(time.Second, "m1")
	// Mail that reached the stream while the wake went nowhere.
	h.at(2*time.Minute, func() { h.world.publish("m2") })
	h.loseHost(3*time.Minute, "node-a")
	moved := h.view(3*time.Minute + time.Second)
	h.publish(10*time.Minute, "m3")
	after := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	eq(t, "status", moved.state.Status, crewlet.StatusIdle)
	eq(t, "epoch", moved.state.Epoch, int64(2))
	eq(t, "node", moved.state.Node, "node-b")
	eq(t, "host queue", moved.state.HostQueue, hostQueue("node-b"))
	eq(t, "holds", moved.holds, ids("e1@node-a:lost", "e2@node-b"))
	eq(t, "detaches (a lost host is abandoned)", moved.detaches, 0)
	eq(t, "placements", h.world.placements, []crewlet.PlaceSeatInput{firstPlacement, {Handle: testHandle, Exclude: ids("node-a")}})
	eq(t, "held mail run on the new tenure at once", moved.ran, ids("m1", "m2"))

	eq(t, "turns run", after.ran, ids("m1", "m2", "m3"))
	eq(t, "acked", after.acked, ids("m1", "m2", "m3"))
	eq(t, "turns", after.turns, ids("m1", "m2", "m3"))
	eq(t, "epochs the turns ran under", h.world.turnEpochs(), []int64{1, 2, 2})
	eq(t, "task queues of the turns", h.world.turnQueues(), ids(hostQueue("node-a"), hostQueue("node-b"), hostQueue("node-b")))
	for _, id := range after.ran {
		eq(t, "deliveries of "+id, h.world.deliveries[id], 1)
		eq(t, "attempts of "+id, h.world.attempts[id], 1)
	}
	eq(t, "establishes", after.state.Counters.Establishes, int64(2))
	eq(t, "attaches", after.attaches, 2)
	eq(t, "last error", after.state.LastError, "")
	eq(t, "epoch at the end", after.state.Epoch, int64(2))
	eq(t, "holds at the end", after.holds, ids("e1@node-a:lost", "e2@node-b"))
}

func TestSeatMove(t *testing.T) {
	t.Parallel()
	move := crewlet.MoveRequest{ExcludeNode: "node-a", Reason: "rebalance", By: "rebalancer"}

	t.Run("the turn in flight finishes, then the seat detaches and re-establishes elsewhere", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.duringTurn = func(id string) {
			if id == "m1" {
				h.world.publish("m2")
				h.env.SignalWorkflow(crewlet.SignalWake, nil)
				h.env.SignalWorkflow(crewlet.SignalMove, move)
			}
		}
		h.publish(time.Second, "m1")
		moved := h.view(time.Minute)
		h.publish(5*time.Minute, "m3")
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		qa, qb := hostQueue("node-a"), hostQueue("node-b")
		eq(t, "order", h.events(), ids(
			"place exclude=[]", "attach e1 node-a queue="+qa,
			"turn m1 e1 ok", "ack m1 e1",
			`detach e1 "move: rebalance" queue=`+qa,
			"place exclude=[node-a]", "attach e2 node-b queue="+qb,
			"turn m2 e2 ok", "ack m2 e2",
			"turn m3 e2 ok", "ack m3 e2"))
		eq(t, "detaches", h.world.detaches, []crewlet.DetachInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Reason: "move: rebalance"}})
		eq(t, "holds", moved.holds, ids("e1@node-a:cancelled", "e2@node-b"))
		eq(t, "status", moved.state.Status, crewlet.StatusIdle)
		eq(t, "epoch", moved.state.Epoch, int64(2))
		eq(t, "node", moved.state.Node, "node-b")
		eq(t, "failures", after.state.Counters.Failures, int64(0))
		eq(t, "last error", after.state.LastError, "")
		eq(t, "turns run", after.ran, ids("m1", "m2", "m3"))
		for _, id := range after.ran {
			eq(t, "attempts of "+id, h.world.attempts[id], 1)
		}
		eq(t, "establishes", after.state.Counters.Establishes, int64(2))
	})

	t.Run("a move naming another node is ignored", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		h.signal(2*time.Minute, crewlet.SignalMove, crewlet.MoveRequest{ExcludeNode: "node-z", Reason: "node drain", By: "node-z"})
		h.publish(5*time.Minute, "m2")
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "detaches", after.detaches, 0)
		eq(t, "holds", after.holds, ids("e1@node-a"))
		eq(t, "placements", after.placements, 1)
		eq(t, "epoch", after.state.Epoch, int64(1))
		eq(t, "node", after.state.Node, "node-a")
		eq(t, "turns run", after.turns, ids("m1", "m2"))
		eq(t, "epochs the turns ran under", h.world.turnEpochs(), []int64{1, 1})
		eq(t, "status", after.state.Status, crewlet.StatusIdle)
	})
}

// A move for a node the seat is not on must not cut its turn short either:
// the move is ignored, so the turn would be wasted.
func TestSeatMoveForAnotherNodeKeepsLongTurn(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.slowTurn = func(in crewlet.TurnInput) bool { return in.Mail[0].EventID == "m1" }
	h.world.slowTurnFor = 500 * time.Millisecond
	h.world.duringTurn = func(id string) {
		h.world.mu.Lock()
		first := h.world.attempts[id] == 0
		h.world.mu.Unlock()
		if id == "m1" && first {
			h.env.SignalWorkflow(crewlet.SignalMove, crewlet.MoveRequest{ExcludeNode: "node-z", Reason: "node drain", By: "node-z"})
		}
	}
	h.publish(time.Second, "m1", "m2")
	after := h.view(30 * time.Minute)
	in := seatIn()
	in.HeartbeatTimeout = time.Second
	in.ReleaseWait = 100 * time.Millisecond
	h.run(in, time.Hour)

	h.world.mu.Lock()
	eq(t, "turns that saw their context cancelled", h.world.cancelled, []string(nil))
	h.world.mu.Unlock()
	eq(t, "turns run", after.turns, ids("m1,m2"))
	eq(t, "attempts of m1", h.world.attempts["m1"], 1)
	eq(t, "epochs the turns ran under", h.world.turnEpochs(), []int64{1})
	eq(t, "detaches", after.detaches, 0)
	eq(t, "holds", after.holds, ids("e1@node-a"))
	eq(t, "failures", after.state.Counters.Failures, int64(0))
}

// A move for another node that is still pending must not swallow a move for
// the seat's own node that arrives with it.
func TestSeatMoveBehindStaleMove(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.publish(time.Second, "m1")
	h.at(2*time.Minute, func() {
		// Both arrive before the seat's next workflow task.
		h.env.SignalWorkflowSkippingWorkflowTask(crewlet.SignalMove, crewlet.MoveRequest{ExcludeNode: "node-z", Reason: "node drain", By: "node-z"})
		h.env.SignalWorkflow(crewlet.SignalMove, crewlet.MoveRequest{ExcludeNode: "node-a", Reason: "rebalance", By: "rebalancer"})
	})
	after := h.view(10 * time.Minute)
	h.run(seatIn(), time.Hour)

	eq(t, "detaches", h.world.detaches, []crewlet.DetachInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Reason: "move: rebalance"}})
	eq(t, "node", after.state.Node, "node-b")
	eq(t, "epoch", after.state.Epoch, int64(2))
}

func TestSeatUnplaceable(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	refusals := 2
	h.world.placeHook = func(w *fakeSeatWorld, _ crewlet.PlaceSeatInput) error {
		if len(w.placements) <= refusals {
			return unplaceableErr()
		}
		return nil
	}
	h.publish(1500*time.Millisecond, "m1")
	// Placements at 0s, 1s (after 1s of back-off) and 1.5s: the mail's
	// wake ends the second wait, 2s long, early.
	first := h.view(500 * time.Millisecond)
	second := h.view(1200 * time.Millisecond)
	placed := h.view(2500 * time.Millisecond)
	h.run(seatIn(), time.Hour)

	for _, v := range []*seatView{first, second} {
		eq(t, fmt.Sprintf("status at %v", v.at), v.state.Status, crewlet.StatusUnplaceable)
		if !strings.Contains(v.state.LastError, "no live node") {
			t.Errorf("last error at %v: got %q, want the placement failure", v.at, v.state.LastError)
		}
		eq(t, fmt.Sprintf("attaches at %v", v.at), v.attaches, 0)
		eq(t, fmt.Sprintf("holds at %v", v.at), v.holds, []string(nil))
		eq(t, fmt.Sprintf("epoch at %v", v.at), v.state.Epoch, int64(0))
	}
	eq(t, "placements at 0.5s", first.placements, 1)
	eq(t, "placements at 1.2s", second.placements, 2)

	eq(t, "placements", placed.placements, 3)
	eq(t, "status", placed.state.Status, crewlet.StatusIdle)
	eq(t, "epoch", placed.state.Epoch, int64(1))
	eq(t, "node", placed.state.Node, "node-a")
	eq(t, "last error", placed.state.LastError, "")
	eq(t, "holds", placed.holds, ids("e1@node-a"))
	eq(t, "turns run", placed.ran, ids("m1"))
	eq(t, "acked", placed.acked, ids("m1"))
	eq(t, "establishes", placed.state.Counters.Establishes, int64(1))
	// From the first placement to the attach after the third.
	eq(t, "establish time recorded", h.scrape("crewlet_seat_establish_seconds_sum"), "1.5")
	eq(t, "establishes timed", h.scrape("crewlet_seat_establish_seconds_count"), "1")
}

// A run begun before unplaceable-backoff keeps its waits: at most 5 s, and
// no wake ends one. COMPAT(unplaceable-backoff@1)
func TestSeatUnplaceableBeforeBackoff(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.env.OnGetVersion(changeUnplaceable, workflow.DefaultVersion, unplaceableVersion).Return(workflow.DefaultVersion)
	refusals := 7
	var at []time.Duration
	start := h.env.Now()
	h.world.placeHook = func(w *fakeSeatWorld, _ crewlet.PlaceSeatInput) error {
		at = append(at, w.env.Now().Sub(start))
		if len(w.placements) <= refusals {
			return unplaceableErr()
		}
		return nil
	}
	h.publish(2500*time.Millisecond, "m1")
	during := h.view(2 * time.Second)
	h.run(seatIn(), time.Hour)

	eq(t, "placed at", at, []time.Duration{0, time.Second, 3 * time.Second, 6 * time.Second, 10 * time.Second,
		15 * time.Second, 20 * time.Second, 25 * time.Second})
	eq(t, "status while refused", during.state.Status, crewlet.StatusEstablishing)
	eq(t, "turns run", h.world.ran, ids("m1"))
}

// Mail read in one read is answered by one turn; mail that arrives while a
// turn runs waits for the next read and is answered by the next turn.
func TestSeatBatchesMailThatArrivesMidTurn(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.slowTurn = func(in crewlet.TurnInput) bool { return names(in.Mail) == "m1" }
	h.world.slowTurnFor = 200 * time.Millisecond
	h.world.duringTurn = func(id string) {
		if id != "m1" {
			return
		}
		// Three publishes, each with its wake, while m1's turn runs.
		for _, next := range ids("m2", "m3", "m4") {
			h.world.publish(next)
			h.env.SignalWorkflow(crewlet.SignalWake, nil)
		}
	}
	h.publish(time.Second, "m1")
	after := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	eq(t, "turns run", after.turns, ids("m1", "m2,m3,m4"))
	eq(t, "acks (one per turn)", after.acks, ids("m1", "m2,m3,m4"))
	eq(t, "acked", after.acked, ids("m1", "m2", "m3", "m4"))
	h.world.mu.Lock()
	eq(t, "prepared", h.world.prepares, ids("m1", "m2,m3,m4"))
	if len(h.world.turns) == 2 {
		second := h.world.turns[1]
		key := crewlet.WorkKey(ids("m2", "m3", "m4"))
		eq(t, "work key of the batched turn", second.workKey, key)
		eq(t, "turn id of the batched turn", second.turnID, "turn/"+testHandle+"/"+key)
		eq(t, "work key of the first turn", h.world.turns[0].workKey, crewlet.WorkKey(ids("m1")))
	}
	for _, id := range after.ran {
		eq(t, "deliveries of "+id, h.world.deliveries[id], 1)
		eq(t, "attempts of "+id, h.world.attempts[id], 1)
	}
	h.world.mu.Unlock()
	eq(t, "counters", after.state.Counters, crewlet.SeatCounters{Turns: 2, Triggers: 4, Establishes: 1})
	eq(t, "status", after.state.Status, crewlet.StatusIdle)
}

// PrepareTurn drops the triggers the completion ledger already holds: only
// the rest run, and everything read is acked in one AckMail.
func TestSeatSkipsTriggersTheLedgerHolds(t *testing.T) {
	t.Parallel()
	t.Run("a read overlapping finished work runs only the new part and acks all", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.ledger["A"], h.world.ledger["B"] = true, true
		h.publish(time.Second, "A", "B", "C")
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run", after.turns, ids("C"))
		h.world.mu.Lock()
		eq(t, "prepared", h.world.prepares, ids("A,B,C"))
		if len(h.world.turns) == 1 {
			key := crewlet.WorkKey(ids("C"))
			eq(t, "work key", h.world.turns[0].workKey, key)
			eq(t, "turn id", h.world.turns[0].turnID, "turn/"+testHandle+"/"+key)
		}
		eq(t, "attempts of A", h.world.attempts["A"], 0)
		eq(t, "attempts of B", h.world.attempts["B"], 0)
		eq(t, "entries left pending", len(h.world.pending), 0)
		h.world.mu.Unlock()
		eq(t, "acks (one, for everything read)", after.acks, ids("A,B,C"))
		eq(t, "counters", after.state.Counters, crewlet.SeatCounters{Turns: 1, Triggers: 1, Skipped: 2, Establishes: 1})
		eq(t, "status", after.state.Status, crewlet.StatusIdle)
	})

	t.Run("a read the ledger holds entirely runs no turn and acks it", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.ledger["A"], h.world.ledger["B"] = true, true
		h.publish(time.Second, "A", "B")
		skipped := h.view(time.Minute)
		h.publish(2*time.Minute, "C")
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run", skipped.turns, []string(nil))
		eq(t, "acks", skipped.acks, ids("A,B"))
		eq(t, "counters", skipped.state.Counters, crewlet.SeatCounters{Skipped: 2, Establishes: 1})
		eq(t, "status", skipped.state.Status, crewlet.StatusIdle)
		eq(t, "turn in flight", skipped.state.Turn, (*crewlet.CurrentTurn)(nil))
		eq(t, "attempts of A", h.world.attempts["A"], 0)

		eq(t, "turns run later", after.turns, ids("C"))
		eq(t, "acks later", after.acks, ids("A,B", "C"))
		eq(t, "counters later", after.state.Counters, crewlet.SeatCounters{Turns: 1, Triggers: 1, Skipped: 2, Establishes: 1})
	})

	t.Run("a batch whose ack was lost is not run again by the next tenure", func(t *testing.T) {
		h := newSeatHarness(t)
		// Every ack of the first tenure fails: the turn's own, as it
		// finishes, and the seat's after it.
		h.world.ackHook = func(w *fakeSeatWorld, in crewlet.AckMailInput) error {
			if in.Epoch == 1 {
				return temporal.NewNonRetryableApplicationError("ack mail: seat moved on", crewlet.ErrorTypeFenced, nil)
			}
			return nil
		}
		h.publish(time.Second, "m1", "m2")
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run", after.turns, ids("m1,m2"))
		eq(t, "acks (the fenced one acked nothing)", after.acks, ids("m1,m2"))
		h.world.mu.Lock()
		eq(t, "prepared (again on the new tenure)", h.world.prepares, ids("m1,m2", "m1,m2"))
		eq(t, "attempts of m1", h.world.attempts["m1"], 1)
		eq(t, "deliveries of m1", h.world.deliveries["m1"], 2)
		h.world.mu.Unlock()
		eq(t, "epoch", after.state.Epoch, int64(2))
		eq(t, "skipped", after.state.Counters.Skipped, int64(2))
		eq(t, "turns counter", after.state.Counters.Turns, int64(1))
	})
}

// The seat hands its last error to the next read, which records it as the
// reason of an entry it dead-letters.
func TestSeatLastErrorReachesTheRead(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.turnHook = func(w *fakeSeatWorld, ref crewlet.MailRef) error {
		if w.deliveries[ref.EventID] == 1 {
			return errors.New("model provider unavailable")
		}
		return nil
	}
	h.publish(time.Second, "m1")
	failing := h.view(2 * time.Second)
	after := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	if !strings.Contains(failing.state.LastError, "model provider unavailable") {
		t.Fatalf("last error after the failure: got %q, want the turn failure", failing.state.LastError)
	}
	h.world.mu.Lock()
	defer h.world.mu.Unlock()
	// Reads: empty on attach, m1 (fails), m1 again after the back-off
	// (runs), then empty.
	if len(h.world.readErrs) < 4 {
		t.Fatalf("reads: got %d (%q), want at least 4", len(h.world.readErrs), h.world.readErrs)
	}
	eq(t, "last error passed to the reads", h.world.readErrs[:4], ids("", "", failing.state.LastError, ""))
	eq(t, "turns run", after.turns, ids("m1"))
	eq(t, "last error at the end", after.state.LastError, "")
}

// A turn recorded failed is acked (its sender was told), and the seat keeps
// saying so in last_error, naming the turn, until a turn succeeds.
func TestSeatKeepsTheErrorOfAFailedAndAckedTurn(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	note := "No answer was produced: the model returned an empty answer twice"
	h.world.failedTurns = map[string]string{"m1": note}
	h.publish(time.Second, "m1")
	h.publish(time.Hour, "m2")
	failed := h.view(30 * time.Minute)
	after := h.view(2 * time.Hour)
	h.run(seatIn(), 3*time.Hour)

	eq(t, "acked after the failed turn", failed.acked, ids("m1"))
	eq(t, "status after the failed turn", failed.state.Status, crewlet.StatusIdle)
	if !strings.Contains(failed.state.LastError, note) {
		t.Errorf("last error half an hour after the failed turn = %q; want it to carry %q", failed.state.LastError, note)
	}
	eq(t, "failed turn", failed.state.FailedTurn, crewlet.TurnWorkflowID("ana", crewlet.WorkKey([]string{"m1"})))
	eq(t, "acked at the end", after.acked, ids("m1", "m2"))
	eq(t, "last error after a good turn", after.state.LastError, "")
	eq(t, "failed turn after a good turn", after.state.FailedTurn, "")
	// The acked turn's error is no reason to dead-letter another entry.
	h.world.mu.Lock()
	defer h.world.mu.Unlock()
	for i, e := range h.world.readErrs {
		if e != "" {
			t.Errorf("read %d was given last error %q; want none while it reports an acked turn", i, e)
		}
	}
}

// A failed turn backs off min(RetryBackoff, failures*2s) before the seat
// reads again. Reads run in mock time, so the gaps are exact.
func TestSeatBackoffAfterFailedTurn(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		backoff  time.Duration
		failures int
		want     []time.Duration
	}{
		{name: "100ms", backoff: 100 * time.Millisecond, failures: 5,
			want: []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}},
		{name: "5s caps the linear back-off", backoff: 5 * time.Second, failures: 4,
			want: []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{name: "default 10s", failures: 6,
			want: []time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newSeatHarness(t)
			h.world.turnHook = func(w *fakeSeatWorld, ref crewlet.MailRef) error {
				if w.deliveries["m1"] <= tc.failures {
					return errors.New("model provider unavailable")
				}
				return nil
			}
			h.publish(time.Second, "m1")
			after := h.view(30 * time.Minute)
			in := seatIn()
			in.RetryBackoff = tc.backoff
			h.run(in, time.Hour)

			eq(t, "turns run", after.turns, ids("m1"))
			eq(t, "failures", after.state.Counters.Failures, int64(tc.failures))
			h.world.mu.Lock()
			defer h.world.mu.Unlock()
			// readAt[0] is the empty read on attach; then one read of m1
			// per attempt.
			attempts := tc.failures + 1
			if len(h.world.readAt) < 1+attempts {
				t.Fatalf("reads: got %d, want at least %d", len(h.world.readAt), 1+attempts)
			}
			var gaps []time.Duration
			for i := 2; i <= attempts; i++ {
				gaps = append(gaps, h.world.readAt[i].Sub(h.world.readAt[i-1]))
			}
			eq(t, "waits between the reads of m1", gaps, tc.want)
		})
	}
}

// stop: the seat left the org. At its next step it records "stopped",
// detaches and the workflow completes.
func TestSeatStop(t *testing.T) {
	t.Parallel()
	stop := crewlet.StopRequest{Reason: "removed from org.yaml", By: "config"}
	qa := hostQueue("node-a")

	// runStopped runs the seat until it ends and checks it ended by itself,
	// without error, stopped.
	runStopped := func(t *testing.T, h *seatHarness, in crewlet.SeatInput) *seatView {
		t.Helper()
		// The seat must end well before this; a cancel would be an error.
		h.at(20*time.Hour, h.env.CancelWorkflow)
		if err := h.run(in, 0); err != nil {
			t.Fatalf("seat ended with %v; want it completed", err)
		}
		end := h.final()
		eq(t, "status", end.state.Status, crewlet.StatusStopped)
		eq(t, "CrewletStatus search attribute", end.status, string(crewlet.StatusStopped))
		eq(t, "node", end.state.Node, "")
		eq(t, "host queue", end.state.HostQueue, "")
		// The Hold is cancelled as the workflow completes; the test
		// environment drops that cancel with the run, so its record stays
		// "held" (a real host's Hold ends on its next heartbeat).
		return end
	}

	t.Run("an idle seat records stopped, detaches and completes", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		before := h.view(59 * time.Second)
		h.signal(time.Minute, crewlet.SignalStop, stop)
		end := runStopped(t, h, seatIn())

		eq(t, "statuses", h.world.statuses, []crewlet.SeatStatusInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Status: "stopped"}})
		eq(t, "detaches", h.world.detaches, []crewlet.DetachInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Reason: "stopped: " + stop.Reason}})
		eq(t, "order", h.events(), ids(
			"place exclude=[]", "attach e1 node-a queue="+qa,
			"turn m1 e1 ok", "ack m1 e1",
			`detach e1 "stopped: removed from org.yaml" queue=`+qa))
		eq(t, "reads after the stop", end.reads, before.reads)
		eq(t, "ended at (mock time)", h.env.Now().Sub(h.world.readAt[0]) < 2*time.Minute, true)
		eq(t, "counters", end.state.Counters, crewlet.SeatCounters{Turns: 1, Triggers: 1, Establishes: 1})
	})

	t.Run("a turn in flight finishes before the stop takes effect", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.slowTurn = func(in crewlet.TurnInput) bool { return true }
		h.world.slowTurnFor = 100 * time.Millisecond
		h.world.duringTurn = func(id string) {
			if id == "m1" {
				h.world.publish("m2")
				h.env.SignalWorkflow(crewlet.SignalWake, nil)
				h.env.SignalWorkflow(crewlet.SignalStop, stop)
			}
		}
		h.publish(time.Second, "m1")
		end := runStopped(t, h, seatIn())

		eq(t, "order", h.events(), ids(
			"place exclude=[]", "attach e1 node-a queue="+qa,
			"turn m1 e1 ok", "ack m1 e1",
			`detach e1 "stopped: removed from org.yaml" queue=`+qa))
		h.world.mu.Lock()
		eq(t, "turns cut short", h.world.cancelled, []string(nil))
		eq(t, "mail kept in the mailbox for a seat added back", h.world.fresh, []crewlet.MailRef{{StreamID: "2-0", EventID: "m2"}})
		h.world.mu.Unlock()
		eq(t, "statuses", statusNames(h.world), ids("stopped"))
		eq(t, "turns run", end.turns, ids("m1"))
		eq(t, "turn in flight", end.state.Turn, (*crewlet.CurrentTurn)(nil))
	})

	t.Run("a drained seat completes without attaching again", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		h.signal(time.Minute, crewlet.SignalDrain, crewlet.DrainRequest{Reason: "maintenance", By: "ops"})
		drained := h.view(5 * time.Minute)
		h.signal(10*time.Minute, crewlet.SignalStop, stop)
		end := runStopped(t, h, seatIn())

		eq(t, "status while drained", drained.state.Status, crewlet.StatusDrained)
		eq(t, "detaches (only the drain's)", h.world.detaches, []crewlet.DetachInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Reason: "drain"}})
		eq(t, "attaches", end.attaches, 1)
		eq(t, "placements", end.placements, 1)
		eq(t, "holds", end.holds, ids("e1@node-a:cancelled"))
		eq(t, "statuses", statusNames(h.world), ids("drained", "stopped"))
	})

	t.Run("a paused seat records stopped, detaches and completes", func(t *testing.T) {
		h := newSeatHarness(t)
		h.signal(time.Minute, crewlet.SignalPause, crewlet.PauseRequest{Reason: "review", By: "olga"})
		h.publish(2*time.Minute, "m1")
		h.signal(10*time.Minute, crewlet.SignalStop, stop)
		end := runStopped(t, h, seatIn())

		eq(t, "statuses", statusNames(h.world), ids("paused", "stopped"))
		eq(t, "detaches", h.world.detaches, []crewlet.DetachInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Reason: "stopped: " + stop.Reason}})
		eq(t, "turns run", end.turns, []string(nil))
	})

	t.Run("a seat that cannot be placed completes", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.placeHook = func(*fakeSeatWorld, crewlet.PlaceSeatInput) error { return unplaceableErr() }
		h.signal(10*time.Second, crewlet.SignalStop, stop)
		end := runStopped(t, h, seatIn())

		eq(t, "attaches", end.attaches, 0)
		eq(t, "detaches", end.detaches, 0)
		eq(t, "statuses", statusNames(h.world), []string(nil))
	})

	t.Run("a stop still in the signal channel at the hand-over ends the seat", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1")
		// As with pause and move: the backstop timer unblocks the loop in the
		// same workflow task, before the signal coroutine saw the stop.
		h.at(7*time.Minute, func() {
			h.env.SetContinueAsNewSuggested(true)
			h.env.SignalWorkflowSkippingWorkflowTask(crewlet.SignalStop, stop)
		})
		end := runStopped(t, h, seatIn())

		eq(t, "detaches", h.world.detaches, []crewlet.DetachInput{{Tenure: crewlet.Tenure{Handle: testHandle, Epoch: 1}, Reason: "stopped: " + stop.Reason}})
		eq(t, "statuses", statusNames(h.world), ids("stopped"))
		eq(t, "turns run", end.turns, ids("m1"))
	})
}

// A turn over a budget cap is held: its mail stays unacked, the seat says
// which cap holds it and when it resets, reads nothing meanwhile, and runs
// the turn once the window turns.
func TestSeatBudgetHoldWaitsForTheWindowToTurn(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.heldTurns = 1
	h.world.holdFor = 50 * time.Minute
	h.publish(time.Second, "m1")
	h.publish(time.Minute, "m2")
	held := h.view(30 * time.Minute)
	stillHeld := h.view(45 * time.Minute)
	after := h.view(3 * time.Hour)
	h.run(seatIn(), 4*time.Hour)

	if held.state.Budget == nil {
		t.Fatalf("state while held: no budget_hold; want the cap that holds the seat")
	}
	eq(t, "hold window", held.state.Budget.Window, crewlet.WindowDay)
	eq(t, "acked while held", held.acked, []string(nil))
	eq(t, "turns while held", held.turns, []string(nil))
	eq(t, "status while held", held.state.Status, crewlet.StatusIdle)
	eq(t, "reads while held (the seat reads nothing until the window turns)", stillHeld.reads, held.reads)
	eq(t, "turns after the window turned", after.turns, ids("m1,m2"))
	eq(t, "acked after the window turned", after.acked, ids("m1", "m2"))
	eq(t, "budget_hold after", after.state.Budget, (*crewlet.BudgetHold)(nil))
	eq(t, "budget checks", h.world.checks, 1)
}

// A money cap holds the seat as a token cap does: the seat's state names
// the unit, cap, used and why, its mail stays unacked, and the turn runs
// once the window turns.
func TestSeatMoneyHoldShowsInItsState(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.heldTurns = 1
	h.world.holdFor = 50 * time.Minute
	reason := "alice answered no to going on past $4.00 of the seat's day budget of $5.00 (ticket t-1); turns wait until the window turns"
	h.world.heldBy = &crewlet.BudgetHold{Scope: crewlet.ScopeSeat, Window: crewlet.WindowDay, Unit: crewlet.UnitNanoUSD,
		Cap: 5_000_000_000, Used: 4_000_000_000, Reason: reason}
	h.publish(time.Second, "m1")
	held := h.view(30 * time.Minute)
	after := h.view(3 * time.Hour)
	h.run(seatIn(), 4*time.Hour)

	if held.state.Budget == nil {
		t.Fatalf("state while held: no budget_hold; want the money cap that holds the seat")
	}
	got := *held.state.Budget
	eq(t, "hold unit", got.Unit, crewlet.UnitNanoUSD)
	eq(t, "hold cap and used", [2]int64{got.Cap, got.Used}, [2]int64{5_000_000_000, 4_000_000_000})
	eq(t, "hold reason", got.Reason, reason)
	eq(t, "acked while held", held.acked, []string(nil))
	eq(t, "turns after the window turned", after.turns, ids("m1"))
	eq(t, "budget_hold after", after.state.Budget, (*crewlet.BudgetHold)(nil))
}

// A hold longer than the recheck period is checked again without reading
// the mailbox, so a month-long hold does not spend the held triggers'
// delivery budget; the turn runs once a check finds the cap released.
func TestSeatLongBudgetHoldChecksWithoutReadingMail(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.heldTurns = 1
	h.world.holdFor = 3 * time.Hour
	h.world.heldChecks = 2
	h.publish(time.Second, "m1")
	held := h.view(30 * time.Minute)
	stillHeld := h.view(150 * time.Minute)
	after := h.view(8 * time.Hour)
	h.run(seatIn(), 9*time.Hour)

	eq(t, "hold while held", held.state.Budget != nil && stillHeld.state.Budget != nil, true)
	eq(t, "hold scope after a check", stillHeld.state.Budget.Scope, crewlet.ScopeCompany)
	eq(t, "reads while held", stillHeld.reads, held.reads)
	eq(t, "turns after release", after.turns, ids("m1"))
	eq(t, "budget checks", h.world.checks, 3)
}

// pause {stop_turn: true} during a turn stops it: the seat forwards the stop
// to the turn, acks its triggers (the person stopped it so it would not go
// on) and stays paused.
func TestSeatPauseWithStopTurnStopsTheTurnInFlight(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	// The turn's activity ends by itself: the test environment does not
	// deliver a child workflow's activity cancellation.
	h.world.slowTurn = func(in crewlet.TurnInput) bool { return true }
	h.world.slowTurnFor = time.Second
	stopped := false
	h.world.duringTurn = func(id string) {
		if id == "m1" && !stopped {
			stopped = true
			h.env.SignalWorkflow(crewlet.SignalPause, crewlet.PauseRequest{StopTurn: true, Reason: "wrong repo", By: "olga"})
		}
	}
	h.publish(time.Second, "m1")
	v := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	h.world.mu.Lock()
	eq(t, "turns stopped by", h.world.stoppedBy, ids("olga"))
	h.world.mu.Unlock()
	eq(t, "acked", v.acked, ids("m1"))
	eq(t, "status", v.state.Status, crewlet.StatusPaused)
}
