package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/crewlet/crewlet"
)

// fakeTurnWorld scripts a turn's activities: each round's answer, each tool
// call's result, and records what the turn asked for.
type fakeTurnWorld struct {
	mu      sync.Mutex
	threads int
	// maxRounds is the role's max_rounds; 0 means 4.
	maxRounds int
	hold      *crewlet.BudgetHold
	// rounds answers round n (1-based) of the first thread with
	// rounds[n-1]; past the end, and in other threads, a round asks for no
	// tool.
	rounds []roundScript
	// toolErr, when set, fails a tool call's attempt.
	toolErr func(in crewlet.ToolCallInput, attempt int32) error
	// duringRound runs without mu held while a round is asked.
	duringRound func(round int)
	// wait makes the first call of round 1 wait on a ticket.
	wait *crewlet.TicketWait
	// resolved records the waits ResolveWait ended.
	resolved []crewlet.ResolveWaitInput
	// gate, when set, answers a tool call with the approval it waits on
	// (nil: the call runs); approvals records what EndApproval got.
	gate      func(in crewlet.ToolCallInput) *crewlet.ApprovalWait
	approvals []crewlet.EndApprovalInput
	// refused ends these threads' first round without an answer.
	refused map[int]string
	// ended ends these threads' first round: the ticket each serves ended.
	ended map[int]string
	// reflect is the role's reflect; reflectErr fails the reflection.
	reflect    bool
	reflectErr error
	// acquire answers the turn's n-th ask for a profile (from 1); nil
	// gives profile p1 every time.
	acquire func(n int) crewlet.AcquireProfileOutput
	asked   int

	log      []string
	finished *crewlet.FinishTurnInput
}

type roundScript struct {
	calls []crewlet.ToolCallRef
	err   error
}

func (w *fakeTurnWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *fakeTurnWorld) BeginTurn(_ context.Context, in crewlet.BeginTurnInput) (crewlet.BeginTurnOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("begin")
	maxRounds := w.maxRounds
	if maxRounds == 0 {
		maxRounds = 4
	}
	return crewlet.BeginTurnOutput{Threads: w.threads, MaxRounds: maxRounds, Hold: w.hold, Reflect: w.reflect}, nil
}

func (w *fakeTurnWorld) ModelRound(_ context.Context, in crewlet.ModelRoundInput) (crewlet.ModelRoundOutput, error) {
	if w.duringRound != nil {
		w.duringRound(in.Round)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("model t%d r%d %s", in.Thread, in.Round, in.Profile)
	if note, ok := w.refused[in.Thread]; ok {
		return crewlet.ModelRoundOutput{Failed: note}, nil
	}
	if ticket, ok := w.ended[in.Thread]; ok {
		return crewlet.ModelRoundOutput{Failed: "cancelled", Ended: &crewlet.StopTurnRequest{By: ticket, Reason: "the ticket it served is cancelled"}}, nil
	}
	if in.Thread == 0 && in.Round <= len(w.rounds) {
		r := w.rounds[in.Round-1]
		return crewlet.ModelRoundOutput{Calls: r.calls}, r.err
	}
	return crewlet.ModelRoundOutput{}, nil
}

func (w *fakeTurnWorld) ToolCall(ctx context.Context, in crewlet.ToolCallInput) (crewlet.ToolCallOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	info := activity.GetInfo(ctx)
	w.logf("tool t%d r%d c%d %s attempt=%d queue=%s", in.Thread, in.Round, in.Call.Call, in.Call.Name, info.Attempt, info.TaskQueue)
	if w.toolErr != nil {
		if err := w.toolErr(in, info.Attempt); err != nil {
			return crewlet.ToolCallOutput{}, err
		}
	}
	if w.gate != nil {
		if wait := w.gate(in); wait != nil {
			return crewlet.ToolCallOutput{Approval: wait}, nil
		}
	}
	if w.wait != nil && in.Round == 1 && in.Call.Call == 0 {
		return crewlet.ToolCallOutput{Wrote: true, Wait: w.wait}, nil
	}
	return crewlet.ToolCallOutput{Wrote: !in.Call.ReadOnly}, nil
}

func (w *fakeTurnWorld) AcquireProfile(_ context.Context, in crewlet.AcquireProfileInput) (crewlet.AcquireProfileOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked++
	out := crewlet.AcquireProfileOutput{Profile: "p1"}
	if w.acquire != nil {
		out = w.acquire(w.asked)
	}
	if out.Profile == "" {
		w.logf("acquire held")
	} else {
		w.logf("acquire %s", out.Profile)
	}
	return out, nil
}

func (w *fakeTurnWorld) ReleaseProfile(_ context.Context, in crewlet.ReleaseProfileInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("release")
	return nil
}

func (w *fakeTurnWorld) ResolveWait(_ context.Context, in crewlet.ResolveWaitInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("resolve %s timed_out=%v stopped_by=%q", in.Wait.Ticket, in.TimedOut, in.StoppedBy)
	w.resolved = append(w.resolved, in)
	return nil
}

func (w *fakeTurnWorld) EndApproval(_ context.Context, in crewlet.EndApprovalInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("end approval %s timed_out=%v stopped_by=%q", in.Approval, in.TimedOut, in.StoppedBy)
	w.approvals = append(w.approvals, in)
	return nil
}

func (w *fakeTurnWorld) FinishTurn(_ context.Context, in crewlet.FinishTurnInput) (crewlet.FinishTurnOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("finish %s rounds=%d", in.Status, in.Rounds)
	w.finished = &in
	return crewlet.FinishTurnOutput{Answered: []string{"m1"}, Replies: 1}, nil
}

func (w *fakeTurnWorld) Reflect(_ context.Context, in crewlet.ReflectInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logf("reflect %s", in.WorkKey)
	return w.reflectErr
}

type turnHarness struct {
	t     *testing.T
	env   *testsuite.TestWorkflowEnvironment
	world *fakeTurnWorld
}

func newTurnHarness(t *testing.T) *turnHarness {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(10 * time.Second)
	h := &turnHarness{t: t, env: env, world: &fakeTurnWorld{threads: 1}}
	env.RegisterWorkflow(Turn)
	for name, fn := range map[string]any{
		crewlet.ActivityBeginTurn:  h.world.BeginTurn,
		crewlet.ActivityModelRound: h.world.ModelRound,
		crewlet.ActivityToolCall:   h.world.ToolCall,
		crewlet.ActivityFinishTurn: h.world.FinishTurn,
		crewlet.ActivityReflect:    h.world.Reflect,
	} {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	for name, fn := range map[string]any{
		crewlet.ActivityResolveWait:    h.world.ResolveWait,
		crewlet.ActivityEndApproval:    h.world.EndApproval,
		crewlet.ActivityAcquireProfile: h.world.AcquireProfile,
		crewlet.ActivityReleaseProfile: h.world.ReleaseProfile,
	} {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	return h
}

func (h *turnHarness) run() (crewlet.TurnOutput, error) {
	h.env.ExecuteWorkflow(Turn, crewlet.TurnInput{
		Tenure: crewlet.Tenure{Handle: "ana", Epoch: 3}, HostQueue: "crewlet.host.n1", TurnID: "turn/ana/k", WorkKey: "k",
		Mail: []crewlet.MailRef{{StreamID: "1-0", EventID: "m1"}}, HeartbeatTimeout: time.Second,
	})
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("turn did not complete")
	}
	var out crewlet.TurnOutput
	err := h.env.GetWorkflowResult(&out)
	return out, err
}

func write(call int, name string) crewlet.ToolCallRef {
	return crewlet.ToolCallRef{Call: call, Name: name}
}
func read(call int, name string) crewlet.ToolCallRef {
	return crewlet.ToolCallRef{Call: call, Name: name, ReadOnly: true}
}

// A round's tool calls run on the seat's host, in order; the turn ends when
// the model answers without asking for a tool.
func TestTurnRunsRoundsAndToolCallsOnTheHost(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.threads = 2
	h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "fs__write"), read(1, "recall")}}}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids(
		"begin",
		"acquire p1",
		"model t0 r1 p1",
		"tool t0 r1 c0 fs__write attempt=1 queue=crewlet.host.n1",
		"tool t0 r1 c1 recall attempt=1 queue=crewlet.host.n1",
		"model t0 r2 p1",
		"model t1 r1 p1",
		"finish done rounds=3",
		"release"))
	eq(t, "status", out.Status, crewlet.TurnDone)
	eq(t, "rounds", out.Rounds, 3)
	eq(t, "answered", out.Answered, ids("m1"))
}

// A read-only call is retried; a write is attempted once and the turn goes
// on: the next round tells the model the outcome is unknown.
func TestTurnRetriesReadsButNotWrites(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{read(0, "fs__read"), write(1, "fs__write")}}}
	h.world.toolErr = func(in crewlet.ToolCallInput, attempt int32) error {
		if in.Call.ReadOnly && attempt < 3 || !in.Call.ReadOnly {
			return errors.New("connection reset")
		}
		return nil
	}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "steps", h.world.log, ids(
		"begin",
		"acquire p1",
		"model t0 r1 p1",
		"tool t0 r1 c0 fs__read attempt=1 queue=crewlet.host.n1",
		"tool t0 r1 c0 fs__read attempt=2 queue=crewlet.host.n1",
		"tool t0 r1 c0 fs__read attempt=3 queue=crewlet.host.n1",
		"tool t0 r1 c1 fs__write attempt=1 queue=crewlet.host.n1",
		"model t0 r2 p1",
		"finish done rounds=2",
		"release"))
	eq(t, "status", out.Status, crewlet.TurnDone)
}

// A person's stop ends the turn at the next round boundary: the round in
// flight finishes its tool calls, no further model call is made, and the
// turn is recorded as stopped by that person.
func TestTurnStopsAtTheNextRoundBoundary(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.rounds = []roundScript{
		{calls: []crewlet.ToolCallRef{write(0, "fs__write")}},
		{calls: []crewlet.ToolCallRef{write(0, "fs__write")}},
	}
	var progress crewlet.TurnProgress
	h.world.duringRound = func(round int) {
		if round == 1 {
			if v, err := h.env.QueryWorkflow(crewlet.QueryState); err == nil {
				_ = v.Get(&progress)
			}
			h.env.SignalWorkflow(crewlet.SignalStopTurn, crewlet.StopTurnRequest{By: "alice", Reason: "wrong repo"})
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
		"finish stopped rounds=1",
		"release"))
	eq(t, "status", out.Status, crewlet.TurnStopped)
	eq(t, "stopped by", h.world.finished.StoppedBy, "alice")
	eq(t, "note", h.world.finished.Note, "Turn stopped by alice: wrong repo")
	eq(t, "progress queried in round 1", progress, crewlet.TurnProgress{Thread: 0, Threads: 1, Round: 1, Rounds: 1, MaxRounds: 4, Profile: "p1"})
}

// A turn that keeps calling tools ends at max_rounds with a note that says so.
func TestTurnEndsAtMaxRounds(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	for range 10 {
		h.world.rounds = append(h.world.rounds, roundScript{calls: []crewlet.ToolCallRef{read(0, "recall")}})
	}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "rounds", out.Rounds, 4)
	eq(t, "status", out.Status, crewlet.TurnDone)
	eq(t, "last steps", h.world.log[len(h.world.log)-2:], ids("finish done rounds=4", "release"))
	if !strings.Contains(h.world.finished.Note, "4 rounds") || !strings.Contains(h.world.finished.Note, "max_rounds") {
		t.Errorf("final note %q does not say the turn hit max_rounds (4)", h.world.finished.Note)
	}
}

// A turn whose tenure moved on stops before its next step and records
// nothing: its triggers are the successor's.
func TestTurnFencedStopsBeforeTheNextToolCall(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "fs__write"), write(1, "fs__write")}}}
	h.world.toolErr = func(in crewlet.ToolCallInput, _ int32) error {
		return fencedErr("tool call", 3, 4)
	}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnFenced)
	// The slot is given back even so: it is this run's own.
	eq(t, "steps", h.world.log, ids("begin", "acquire p1", "model t0 r1 p1", "tool t0 r1 c0 fs__write attempt=1 queue=crewlet.host.n1", "release"))
}

// A turn over a budget cap does not start: no model call, and the hold is
// returned for the seat to wait on.
func TestTurnHeldByBudget(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	hold := &crewlet.BudgetHold{Scope: crewlet.ScopeSeat, Window: crewlet.WindowDay, Cap: 100, Used: 120,
		ResetsAt: time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)}
	h.world.hold = hold
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnHeld)
	eq(t, "hold", out.Hold, hold)
	eq(t, "steps", h.world.log, ids("begin"))
}

// A turn that fails after a write may have reached outside is recorded and
// acked, never replayed; one that fails before anything reached outside
// fails, so its triggers are redelivered; a panic is recorded too.
func TestTurnFailureAfterAWriteIsRecorded(t *testing.T) {
	t.Parallel()
	badRequest := temporal.NewNonRetryableApplicationError("openai: bad_request (HTTP 400): context too long", crewlet.ErrorTypeProvider, nil)
	panicked := temporal.NewNonRetryableApplicationError("ModelRound panicked: boom", crewlet.ErrorTypePanic, nil)
	cases := []struct {
		name       string
		rounds     []roundScript
		wantErr    bool
		wantStatus crewlet.TurnStatus
	}{
		{"before any write: redelivered", []roundScript{{err: badRequest}}, true, ""},
		{"after a read only: redelivered", []roundScript{{calls: []crewlet.ToolCallRef{read(0, "recall")}}, {err: badRequest}}, true, ""},
		{"after a write: recorded", []roundScript{{calls: []crewlet.ToolCallRef{write(0, "fs__write")}}, {err: badRequest}}, false, crewlet.TurnFailed},
		{"panic: recorded", []roundScript{{err: panicked}}, false, crewlet.TurnFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newTurnHarness(t)
			h.world.rounds = tc.rounds
			out, err := h.run()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %+v; want the turn to fail", out)
				}
				if h.world.finished != nil {
					t.Fatalf("a turn that failed before anything reached outside was recorded: %+v", h.world.finished)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "status", out.Status, tc.wantStatus)
			if h.world.finished == nil || !strings.Contains(h.world.finished.Note, "will not be retried") {
				t.Fatalf("finished with %+v; want a recorded note that the turn will not be retried", h.world.finished)
			}
		})
	}
}

// A tool call the host queue does not answer (the seat's node died) ends the
// turn unrecorded, even after a write: the seat re-establishes and the turn
// resumes on the next tenure from what it recorded.
func TestTurnLeavesAHostLossToTheNextTenure(t *testing.T) {
	t.Parallel()
	for _, timeout := range []enums.TimeoutType{enums.TIMEOUT_TYPE_SCHEDULE_TO_START, enums.TIMEOUT_TYPE_HEARTBEAT} {
		t.Run(timeout.String(), func(t *testing.T) {
			h := newTurnHarness(t)
			h.world.rounds = []roundScript{
				{calls: []crewlet.ToolCallRef{write(0, "fs__write")}},
				{calls: []crewlet.ToolCallRef{write(0, "fs__write")}},
			}
			h.world.toolErr = func(in crewlet.ToolCallInput, _ int32) error {
				if in.Round == 2 {
					return temporal.NewTimeoutError(timeout, nil)
				}
				return nil
			}
			out, err := h.run()
			if err == nil {
				t.Fatalf("got %+v; want the turn to end with the host loss", out)
			}
			if h.world.finished != nil {
				t.Fatalf("a turn cut short by a host loss was recorded: %+v", h.world.finished)
			}
		})
	}
}

// A thread the model left unanswered (its trigger over the context budget,
// or two empty answers) does not stop the turn's other threads; the turn is
// recorded failed with the reason, so the seat shows it.
func TestTurnWithARefusedThreadIsRecordedFailed(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.threads = 2
	h.world.refused = map[int]string{0: "No answer was produced"}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnFailed)
	eq(t, "note", out.Note, "No answer was produced")
	eq(t, "steps", h.world.log, []string{"begin", "acquire p1", "model t0 r1 p1", "model t1 r1 p1", "finish failed rounds=2", "release"})
}

// A thread whose ticket ended meanwhile stops without an answer, and that
// is no failure: the turn whose every thread ended so is recorded stopped
// by the ticket; one with another thread answered is done.
func TestTurnWhoseTicketsEndedIsRecordedStopped(t *testing.T) {
	t.Parallel()
	h := newTurnHarness(t)
	h.world.ended = map[int]string{0: "t-1"}
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnStopped)
	eq(t, "note", out.Note, "Turn stopped by t-1: the ticket it served is cancelled")
	eq(t, "steps", h.world.log, []string{"begin", "acquire p1", "model t0 r1 p1", "finish stopped rounds=1", "release"})

	h = newTurnHarness(t)
	h.world.threads = 2
	h.world.ended = map[int]string{1: "t-2"}
	if out, err = h.run(); err != nil {
		t.Fatal(err)
	}
	eq(t, "status", out.Status, crewlet.TurnDone)
	eq(t, "steps", h.world.log, []string{"begin", "acquire p1", "model t0 r1 p1", "model t1 r1 p1", "finish done rounds=2", "release"})
}

// With the role's reflect on, a turn that answered asks for its reflection
// before it finishes (so a turn cut short re-runs it); a failed reflection
// leaves the turn done. With reflect off, or a turn that failed, there is
// none.
func TestTurnReflectsAfterAnAnsweredTurn(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		reflect bool
		refused bool
		err     error
		want    []string
	}{
		{"on", true, false, nil, []string{"begin", "acquire p1", "model t0 r1 p1", "reflect k", "finish done rounds=1", "release"}},
		{"on, reflection fails", true, false, errors.New("provider down"), []string{"begin", "acquire p1", "model t0 r1 p1", "reflect k", "finish done rounds=1", "release"}},
		{"off", false, false, nil, []string{"begin", "acquire p1", "model t0 r1 p1", "finish done rounds=1", "release"}},
		{"on, turn failed", true, true, nil, []string{"begin", "acquire p1", "model t0 r1 p1", "finish failed rounds=1", "release"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newTurnHarness(t)
			h.world.reflect = tt.reflect
			h.world.reflectErr = temporal.NewNonRetryableApplicationError("reflection failed", "test", tt.err)
			if tt.err == nil {
				h.world.reflectErr = nil
			}
			if tt.refused {
				h.world.refused = map[int]string{0: "too long"}
			}
			out, err := h.run()
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "steps", h.world.log, tt.want)
			if want := crewlet.TurnDone; !tt.refused && out.Status != want {
				t.Errorf("status = %s; want %s", out.Status, want)
			}
		})
	}
}

// A call that must wait on a ticket holds the turn until the ticket's
// signal (one for another ticket changes nothing), the wait's time, or a
// person's stop; then ResolveWait records the result and the turn goes on.
func TestTurnWaitsOnATicket(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		at   time.Duration
		send func(h *turnHarness)
		want string
	}{
		{"signal", 10 * time.Minute, func(h *turnHarness) {
			h.env.SignalWorkflow(crewlet.SignalTicket, crewlet.TicketSignal{Ticket: "t-other"})
			h.env.SignalWorkflow(crewlet.SignalTicket, crewlet.TicketSignal{Ticket: "t-1"})
		}, `resolve t-1 timed_out=false stopped_by=""`},
		{"timeout", 2 * time.Hour, func(*turnHarness) {}, `resolve t-1 timed_out=true stopped_by=""`},
		{"stop", 5 * time.Minute, func(h *turnHarness) {
			h.env.SignalWorkflow(crewlet.SignalStopTurn, crewlet.StopTurnRequest{By: "alice"})
		}, `resolve t-1 timed_out=false stopped_by="alice"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newTurnHarness(t)
			h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "delegate")}}}
			h.world.wait = &crewlet.TicketWait{Ticket: "t-1", Kind: crewlet.WaitSettle, For: time.Hour}
			var during crewlet.TurnProgress
			h.env.RegisterDelayedCallback(func() {
				v, err := h.env.QueryWorkflow(crewlet.QueryState)
				if err == nil {
					_ = v.Get(&during)
				}
				tt.send(h)
			}, min(tt.at, 59*time.Minute))
			out, err := h.run()
			if err != nil {
				t.Fatal(err)
			}
			if during.Waiting == nil || during.Waiting.Ticket != "t-1" || during.Waiting.Kind != crewlet.WaitSettle {
				t.Errorf("state while waiting: %+v; want waiting on t-1", during)
			}
			// The wait gives the profile slot back, and the next round
			// takes one again.
			want := []string{"begin", "acquire p1", "model t0 r1 p1", "tool t0 r1 c0 delegate attempt=1 queue=crewlet.host.n1", "release", tt.want}
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
