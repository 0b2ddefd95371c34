package workflows

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// fakeSeatWorld stands in for everything the seat's activities touch: the
// seat row in Postgres (epoch, node, status) and its Redis mailbox. Its
// methods are registered under the real activity names. The activities run on
// their own goroutines while test callbacks read the fake, hence the mutex.
type fakeSeatWorld struct {
	mu sync.Mutex

	// Tenure.
	node     string
	epoch    int64 // the seat's current epoch; the last one Attach handed out
	attaches int

	// Mailbox: pending entries were handed out and not acked, fresh ones were
	// never handed out. Both are in stream order.
	seq        int
	pending    []crewlet.MailRef
	fresh      []crewlet.MailRef
	deliveries map[string]int // by event id
	reads      int

	// What the seat did.
	ran       []string // event ids of turns that succeeded, in order
	acked     []string // event ids acked, in order
	attempts  map[string]int
	turnEpoch []int64 // epoch each successful turn ran under
	statuses  []crewlet.SeatStatusInput

	// Fault injection, called with mu held. A nil hook never fails.
	readHook func(w *fakeSeatWorld) error
	turnHook func(w *fakeSeatWorld, ref crewlet.MailRef) error
	// duringTurn runs without mu held while the turn for an event id is in
	// flight (e.g. to signal the workflow from "inside" the turn).
	duringTurn func(eventID string)
}

func newFakeSeatWorld() *fakeSeatWorld {
	return &fakeSeatWorld{node: "node-a", deliveries: map[string]int{}, attempts: map[string]int{}}
}

func fencedErr(what string, got, want int64) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s: epoch %d is not the seat's epoch %d", what, got, want), crewlet.FencedErrorType, nil)
}

// publish appends entries to the mailbox, as the publisher's XADD would.
func (w *fakeSeatWorld) publish(eventIDs ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range eventIDs {
		w.seq++
		w.fresh = append(w.fresh, crewlet.MailRef{StreamID: fmt.Sprintf("%d-0", w.seq), EventID: id})
	}
}

func (w *fakeSeatWorld) Attach(_ context.Context, in crewlet.AttachInput) (crewlet.AttachOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.epoch++
	w.attaches++
	return crewlet.AttachOutput{Epoch: w.epoch, Node: w.node}, nil
}

// ReadMail mirrors mailbox.Read: entries handed out earlier and never acked
// come first, then new ones, at most Max in all.
func (w *fakeSeatWorld) ReadMail(_ context.Context, in crewlet.ReadMailInput) (crewlet.ReadMailOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	if in.Epoch != w.epoch {
		return crewlet.ReadMailOutput{}, fencedErr("read mail", in.Epoch, w.epoch)
	}
	if w.readHook != nil {
		if err := w.readHook(w); err != nil {
			return crewlet.ReadMailOutput{}, err
		}
	}
	var out []crewlet.MailRef
	for _, ref := range w.pending {
		if len(out) == in.Max {
			break
		}
		out = append(out, ref)
	}
	for len(out) < in.Max && len(w.fresh) > 0 {
		ref := w.fresh[0]
		w.fresh = w.fresh[1:]
		w.pending = append(w.pending, ref)
		out = append(out, ref)
	}
	for _, ref := range out {
		w.deliveries[ref.EventID]++
	}
	return crewlet.ReadMailOutput{Mail: out, Lag: int64(len(w.fresh))}, nil
}

func (w *fakeSeatWorld) AckMail(_ context.Context, in crewlet.AckMailInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return fencedErr("ack mail", in.Epoch, w.epoch)
	}
	for _, sid := range in.StreamIDs {
		for i, ref := range w.pending {
			if ref.StreamID == sid {
				w.acked = append(w.acked, ref.EventID)
				w.pending = append(w.pending[:i:i], w.pending[i+1:]...)
				break
			}
		}
	}
	return nil
}

func (w *fakeSeatWorld) RunTurn(_ context.Context, in crewlet.TurnInput) (crewlet.TurnOutput, error) {
	if w.duringTurn != nil {
		for _, ref := range in.Mail {
			w.duringTurn(ref.EventID)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return crewlet.TurnOutput{}, fencedErr("run turn", in.Epoch, w.epoch)
	}
	var ids []string
	for _, ref := range in.Mail {
		w.attempts[ref.EventID]++
		if w.turnHook != nil {
			if err := w.turnHook(w, ref); err != nil {
				return crewlet.TurnOutput{}, err
			}
		}
		ids = append(ids, ref.EventID)
	}
	w.ran = append(w.ran, ids...)
	for range ids {
		w.turnEpoch = append(w.turnEpoch, in.Epoch)
	}
	return crewlet.TurnOutput{Answered: ids}, nil
}

func (w *fakeSeatWorld) SetSeatStatus(_ context.Context, in crewlet.SeatStatusInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return fencedErr("set seat status", in.Epoch, w.epoch)
	}
	w.statuses = append(w.statuses, in)
	return nil
}

// seatView is what a test sees at one moment: the state query's answer and
// the fake's record up to then.
type seatView struct {
	at       time.Duration
	state    crewlet.SeatState
	ran      []string
	acked    []string
	attaches int
	paused   string // last CrewletPaused value upserted: "true", "false" or "never"
}

// seatHarness runs one Seat workflow in the test environment on a timeline
// of delayed callbacks (mock time from the start of the workflow).
type seatHarness struct {
	t     *testing.T
	env   *testsuite.TestWorkflowEnvironment
	world *fakeSeatWorld
	views []*seatView

	saMu     sync.Mutex
	saPaused *bool
}

func newSeatHarness(t *testing.T) *seatHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(10 * time.Second)
	h := &seatHarness{t: t, env: env, world: newFakeSeatWorld()}
	env.RegisterWorkflow(Seat)
	env.RegisterActivityWithOptions(h.world.Attach, activity.RegisterOptions{Name: crewlet.ActivityAttach})
	env.RegisterActivityWithOptions(h.world.ReadMail, activity.RegisterOptions{Name: crewlet.ActivityReadMail})
	env.RegisterActivityWithOptions(h.world.AckMail, activity.RegisterOptions{Name: crewlet.ActivityAckMail})
	env.RegisterActivityWithOptions(h.world.RunTurn, activity.RegisterOptions{Name: crewlet.ActivityRunTurn})
	env.RegisterActivityWithOptions(h.world.SetSeatStatus, activity.RegisterOptions{Name: crewlet.ActivitySetSeatStatus})
	// The test environment keeps search attributes to itself; a mock on the
	// upsert is the way to see what the workflow wrote.
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa, ok := args.Get(0).(temporal.SearchAttributes)
		if !ok {
			return
		}
		if v, ok := sa.GetBool(saPaused); ok {
			h.saMu.Lock()
			h.saPaused = &v
			h.saMu.Unlock()
		}
	}).Return(nil)
	return h
}

func (h *seatHarness) at(d time.Duration, fn func()) { h.env.RegisterDelayedCallback(fn, d) }

// publish appends mail to the mailbox at d and signals wake, as the publisher does.
func (h *seatHarness) publish(d time.Duration, eventIDs ...string) {
	h.at(d, func() {
		h.world.publish(eventIDs...)
		h.env.SignalWorkflow(crewlet.SignalWake, nil)
	})
}

func (h *seatHarness) signal(d time.Duration, name string, arg any) {
	h.at(d, func() { h.env.SignalWorkflow(name, arg) })
}

// view queries the state at d; the returned view is filled when the run ends.
func (h *seatHarness) view(d time.Duration) *seatView {
	v := &seatView{at: d}
	h.views = append(h.views, v)
	h.at(d, func() {
		enc, err := h.env.QueryWorkflow(crewlet.QueryState)
		if err != nil {
			h.t.Errorf("query state at %v: %v", d, err)
			return
		}
		if err := enc.Get(&v.state); err != nil {
			h.t.Errorf("decode state at %v: %v", d, err)
			return
		}
		h.world.mu.Lock()
		v.ran = append([]string(nil), h.world.ran...)
		v.acked = append([]string(nil), h.world.acked...)
		v.attaches = h.world.attaches
		h.world.mu.Unlock()
		h.saMu.Lock()
		v.paused = "never"
		if h.saPaused != nil {
			v.paused = fmt.Sprint(*h.saPaused)
		}
		h.saMu.Unlock()
	})
	return v
}

// run executes the seat and returns the error it ended with. With cancelAt
// > 0 the workflow is cancelled then, and a cancel is the expected end.
func (h *seatHarness) run(in SeatInput, cancelAt time.Duration) error {
	h.t.Helper()
	if cancelAt > 0 {
		h.at(cancelAt, h.env.CancelWorkflow)
	}
	h.env.ExecuteWorkflow(Seat, in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatalf("seat workflow did not complete")
	}
	err := h.env.GetWorkflowError()
	if cancelAt > 0 && !temporal.IsCanceledError(err) {
		h.t.Fatalf("seat ended with %v; want it cancelled at %v", err, cancelAt)
	}
	for _, v := range h.views {
		if v.state.Handle == "" {
			h.t.Fatalf("state query at %v never answered (did the workflow end earlier?)", v.at)
		}
	}
	return err
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %#v, want %#v", what, got, want)
	}
}

func ids(s ...string) []string { return s }

func fenceOnce(done *bool, what string) error {
	if *done {
		return nil
	}
	*done = true
	return temporal.NewNonRetryableApplicationError(what+": seat moved on", crewlet.FencedErrorType, nil)
}

const (
	testHandle = "ana"
	testRole   = "writer"
)

func seatIn() SeatInput { return SeatInput{Handle: testHandle, Role: testRole} }

func TestSeatRunsMailOneTurnEachAndAcks(t *testing.T) {
	type publish struct {
		at  time.Duration
		ids []string
	}
	cases := []struct {
		name      string
		readBatch int
		mail      []publish
		want      []string
	}{
		{name: "one message", mail: []publish{{time.Second, ids("m1")}}, want: ids("m1")},
		{name: "a batch in one publish runs in mailbox order",
			mail: []publish{{time.Second, ids("m1", "m2", "m3")}}, want: ids("m1", "m2", "m3")},
		{name: "mail spread over several wakes",
			mail: []publish{{time.Second, ids("m1")}, {time.Minute, ids("m2", "m3")}, {20 * time.Minute, ids("m4")}},
			want: ids("m1", "m2", "m3", "m4")},
		{name: "more mail than one read takes", readBatch: 2,
			mail: []publish{{time.Second, ids("m1", "m2", "m3", "m4", "m5")}}, want: ids("m1", "m2", "m3", "m4", "m5")},
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
			eq(t, "turns run", after.ran, tc.want)
			eq(t, "mail acked", after.acked, tc.want)
			n := int64(len(tc.want))
			eq(t, "counters", after.state.Counters, crewlet.SeatCounters{Turns: n, Triggers: n, Establishes: 1})
			eq(t, "status", after.state.Status, crewlet.StatusIdle)
			eq(t, "epoch", after.state.Epoch, int64(1))
			eq(t, "node", after.state.Node, "node-a")
			eq(t, "handle", after.state.Handle, testHandle)
			eq(t, "role", after.state.Role, testRole)
			eq(t, "turn in flight", after.state.Turn, (*crewlet.CurrentTurn)(nil))
			eq(t, "queued mail", after.state.QueuedMail, int64(0))
			eq(t, "last error", after.state.LastError, "")
			eq(t, "attaches", after.attaches, 1)
			for _, id := range tc.want {
				eq(t, "deliveries of "+id, h.world.deliveries[id], 1)
			}
		})
	}
}

func TestSeatPauseAndResume(t *testing.T) {
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
	})

	t.Run("a pause during a turn lets it finish and holds the rest of the batch", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.duringTurn = func(id string) {
			if id == "m1" {
				h.env.SignalWorkflow(crewlet.SignalPause, pause)
			}
		}
		h.publish(time.Second, "m1", "m2", "m3")
		held := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run", held.ran, ids("m1"))
		eq(t, "acked", held.acked, ids("m1"))
		eq(t, "status", held.state.Status, crewlet.StatusPaused)
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

		eq(t, "turns run while paused", held.ran, ids("m1"))
		eq(t, "turns run after resume", after.ran, ids("m1", "m2", "m3", "m4"))
		eq(t, "acked", after.acked, ids("m1", "m2", "m3", "m4"))
		for _, id := range after.ran {
			eq(t, "deliveries of "+id, h.world.deliveries[id], 1)
		}
		eq(t, "status", after.state.Status, crewlet.StatusIdle)
		eq(t, "pause", after.state.Pause, (*crewlet.PauseHold)(nil))
		eq(t, "CrewletPaused search attribute", after.paused, "false")
		eq(t, "epoch (a pause keeps the tenure)", after.state.Epoch, int64(1))
		eq(t, "attaches", after.attaches, 1)
		eq(t, "recorded statuses", statusNames(h.world), ids("paused", "active"))
	})
}

func TestSeatDrain(t *testing.T) {
	drain := crewlet.DrainRequest{Reason: "node maintenance", By: "ops"}
	h := newSeatHarness(t)
	h.world.duringTurn = func(id string) {
		if id == "m1" {
			h.env.SignalWorkflow(crewlet.SignalDrain, drain)
		}
	}
	h.publish(time.Second, "m1", "m2", "m3")
	h.publish(5*time.Minute, "m4")
	drained := h.view(20 * time.Minute)
	h.signal(21*time.Minute, crewlet.SignalResume, crewlet.ResumeRequest{By: "ops"})
	after := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	t.Run("the turn in flight finishes and no new turn starts", func(t *testing.T) {
		eq(t, "turns run", drained.ran, ids("m1"))
		eq(t, "acked", drained.acked, ids("m1"))
		eq(t, "turns counter", drained.state.Counters.Turns, int64(1))
	})
	t.Run("the seat ends drained and releases its host", func(t *testing.T) {
		eq(t, "status", drained.state.Status, crewlet.StatusDrained)
		eq(t, "node", drained.state.Node, "")
		if drained.state.Drain == nil {
			t.Fatalf("state.Drain: got nil, want the drain by %q", drain.By)
		}
		eq(t, "drain by", drained.state.Drain.By, drain.By)
		eq(t, "drain reason", drained.state.Drain.Reason, drain.Reason)
		h.world.mu.Lock()
		defer h.world.mu.Unlock()
		if len(h.world.statuses) == 0 {
			t.Fatalf("SetSeatStatus: never called, want drained at epoch 1")
		}
		eq(t, "first recorded status", h.world.statuses[0], crewlet.SeatStatusInput{Handle: testHandle, Epoch: 1, Status: "drained"})
	})
	t.Run("resume re-establishes with a new epoch and runs the held mail", func(t *testing.T) {
		eq(t, "turns run", after.ran, ids("m1", "m2", "m3", "m4"))
		eq(t, "acked", after.acked, ids("m1", "m2", "m3", "m4"))
		eq(t, "epoch", after.state.Epoch, int64(2))
		eq(t, "node", after.state.Node, "node-a")
		eq(t, "status", after.state.Status, crewlet.StatusIdle)
		eq(t, "drain", after.state.Drain, (*crewlet.DrainHold)(nil))
		eq(t, "attaches", after.attaches, 2)
		eq(t, "establishes", after.state.Counters.Establishes, int64(2))
		eq(t, "epochs the turns ran under", h.world.turnEpoch, []int64{1, 2, 2, 2})
	})
}

// decodeCarry checks err is a continue-as-new of Seat and returns its input.
func decodeCarry(t *testing.T, err error) SeatInput {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("seat ended with %v (%T); want a *workflow.ContinueAsNewError", err, err)
	}
	if can.WorkflowType == nil || can.WorkflowType.Name != "Seat" {
		t.Fatalf("continue-as-new workflow type: got %+v, want Seat", can.WorkflowType)
	}
	var next SeatInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatalf("decode continue-as-new input: %v", err)
	}
	if next.Carry == nil {
		t.Fatalf("continue-as-new input has no carry: %+v", next)
	}
	return next
}

func TestSeatContinueAsNew(t *testing.T) {
	t.Run("an idle seat hands over after cyclesPerRun cycles with its state", func(t *testing.T) {
		h := newSeatHarness(t)
		h.publish(time.Second, "m1", "m2")
		// No cancel: backstop timers drive the loop until the cycle bound.
		next := decodeCarry(t, h.run(seatIn(), 0))

		eq(t, "handle", next.Handle, testHandle)
		eq(t, "role", next.Role, testRole)
		c := next.Carry
		eq(t, "attached", c.Attached, true)
		eq(t, "epoch", c.State.Epoch, int64(1))
		eq(t, "node", c.State.Node, "node-a")
		eq(t, "counters", c.State.Counters, crewlet.SeatCounters{Turns: 2, Triggers: 2, Establishes: 1})
		eq(t, "turns run", h.world.ran, ids("m1", "m2"))
		// Every cycle after the first (attach) is one mailbox read.
		if h.world.reads < cyclesPerRun-2 || h.world.reads > cyclesPerRun {
			t.Errorf("mailbox reads before the hand-over: got %d, want about cyclesPerRun (%d)", h.world.reads, cyclesPerRun)
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
		eq(t, "counters", c.State.Counters, crewlet.SeatCounters{Turns: 3, Triggers: 3, Establishes: 1})
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

	t.Run("a seat started with a carry keeps its hold and tenure", func(t *testing.T) {
		h := newSeatHarness(t)
		h.world.epoch = 3 // the tenure the previous run held
		h.world.attaches = 3
		since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		in := seatIn()
		in.Carry = &SeatCarry{
			Attached: true,
			State: crewlet.SeatState{
				Handle: testHandle, Role: testRole, Status: crewlet.StatusPaused,
				Epoch: 3, Node: "node-b",
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

		eq(t, "turns run after resume", after.ran, ids("m1"))
		eq(t, "epoch after resume", after.state.Epoch, int64(3))
		eq(t, "attaches (none by this run)", after.attaches, 3)
		eq(t, "turns counter", after.state.Counters.Turns, int64(8))
		eq(t, "status after resume", after.state.Status, crewlet.StatusIdle)
	})
}

func TestSeatFencedReestablishes(t *testing.T) {
	cases := []struct {
		name      string
		wantEpoch int64
		setup     func(w *fakeSeatWorld)
	}{
		{name: "fenced mailbox read", wantEpoch: 2, setup: func(w *fakeSeatWorld) {
			var done bool
			w.readHook = func(w *fakeSeatWorld) error {
				if len(w.fresh) == 0 {
					return nil
				}
				return fenceOnce(&done, "read mail")
			}
		}},
		{name: "fenced turn", wantEpoch: 2, setup: func(w *fakeSeatWorld) {
			var done bool
			w.turnHook = func(_ *fakeSeatWorld, ref crewlet.MailRef) error {
				if ref.EventID != "m1" {
					return nil
				}
				return fenceOnce(&done, "run turn")
			}
		}},
		{name: "tenure taken by another attach", wantEpoch: 3, setup: func(w *fakeSeatWorld) {
			var done bool
			w.readHook = func(w *fakeSeatWorld) error {
				if len(w.fresh) > 0 && !done {
					done = true
					w.epoch++ // someone else attached; the seat's epoch is stale now
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

			eq(t, "turns run", after.ran, ids("m1", "m2"))
			eq(t, "acked", after.acked, ids("m1", "m2"))
			eq(t, "attaches", after.attaches, 2)
			eq(t, "epoch", after.state.Epoch, tc.wantEpoch)
			eq(t, "epochs the turns ran under", h.world.turnEpoch, []int64{tc.wantEpoch, tc.wantEpoch})
			eq(t, "establishes", after.state.Counters.Establishes, int64(2))
			eq(t, "turns counter", after.state.Counters.Turns, int64(2))
			eq(t, "failures", after.state.Counters.Failures, int64(0))
			eq(t, "status", after.state.Status, crewlet.StatusIdle)
		})
	}
}

func TestSeatFailedTurn(t *testing.T) {
	modelDown := errors.New("model provider unavailable")

	t.Run("a message that fails twice stays unacked, then runs once", func(t *testing.T) {
		h := newSeatHarness(t)
		// Fails on its first two deliveries (every retry of the activity).
		h.world.turnHook = func(w *fakeSeatWorld, ref crewlet.MailRef) error {
			if ref.EventID == "m1" && w.deliveries["m1"] <= 2 {
				return modelDown
			}
			return nil
		}
		h.publish(time.Second, "m1", "m2")
		failing := h.view(8 * time.Second) // after the first turn's retries gave up
		after := h.view(30 * time.Minute)
		h.run(seatIn(), time.Hour)

		eq(t, "turns run after the first failure", failing.ran, []string(nil))
		eq(t, "acked after the first failure", failing.acked, []string(nil))
		eq(t, "failures after the first failure", failing.state.Counters.Failures, int64(1))
		if !strings.Contains(failing.state.LastError, modelDown.Error()) {
			t.Errorf("last error after the first failure: got %q, want it to mention %q", failing.state.LastError, modelDown)
		}
		eq(t, "status after the first failure", failing.state.Status, crewlet.StatusIdle)

		eq(t, "turns run", after.ran, ids("m1", "m2"))
		eq(t, "acked", after.acked, ids("m1", "m2"))
		eq(t, "failures", after.state.Counters.Failures, int64(2))
		eq(t, "turns counter", after.state.Counters.Turns, int64(2))
		eq(t, "last error (cleared by a good turn)", after.state.LastError, "")
		eq(t, "deliveries of m1", h.world.deliveries["m1"], 3)
		eq(t, "epoch (a failed turn keeps the tenure)", after.state.Epoch, int64(1))
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
		// A failing cycle takes about 13 s (retries plus failureBackoff), so
		// cancel well before cyclesPerRun of them would hand over the run.
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
	})
}

func statusNames(w *fakeSeatWorld) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.statuses {
		out = append(out, s.Status)
	}
	return out
}
