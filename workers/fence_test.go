package workers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/activities"
	"github.com/crewlet/crewlet/internal/liveness"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/watchdog"
)

// recorder is a registry that keeps the names of the activities registered.
type recorder struct {
	worker.Registry
	activities []string
}

func (r *recorder) RegisterActivityWithOptions(_ any, o activity.RegisterOptions) {
	r.activities = append(r.activities, o.Name)
}

func (r *recorder) RegisterWorkflowWithOptions(any, workflow.RegisterOptions) {}

// The real lists register, and every guard names an activity they
// register: a guard left behind by a renamed activity would fence nothing.
func TestEveryGuardIsRegistered(t *testing.T) {
	var r recorder
	RegisterShared(&r, Deps{})
	RegisterHost(&r, Deps{})
	for name := range guards {
		if !slices.Contains(r.activities, name) {
			t.Errorf("guard for %s: no such activity is registered", name)
		}
	}
}

type withHandle struct {
	Handle string `json:"handle"`
	Text   string `json:"text"`
}

type withTenure struct {
	crewlet.Tenure
	Text string `json:"text"`
}

// A seat's activity that is neither fenced nor listed as unfenced cannot be
// registered; neither can a fenced one whose input has no tenure to check.
func TestRegisterRefusesAnUnguardedSeatActivity(t *testing.T) {
	cases := []struct {
		name, activity string
		fn             any
		wantPanic      string
	}{
		{"input embeds Tenure", "Unguarded", func(context.Context, withTenure) error { return nil }, "neither fenced nor listed"},
		{"input carries a seat handle", "Unguarded", func(context.Context, withHandle) error { return nil }, "neither fenced nor listed"},
		{"fenced input without Tenure", crewlet.ActivityReadMail, func(context.Context, withHandle) error { return nil }, "does not embed crewlet.Tenure"},
		{"no seat in the input", "Unseated", func(context.Context, crewlet.TicketNoteInput) error { return nil }, ""},
		{"no input at all", "Bare", func(context.Context) error { return nil }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			got := func() (msg string) {
				defer func() {
					if p := recover(); p != nil {
						msg, _ = p.(string)
						if msg == "" {
							msg = "panic"
						}
					}
				}()
				register(&r, map[string]any{tc.activity: tc.fn})
				return ""
			}()
			switch {
			case tc.wantPanic == "" && got != "":
				t.Fatalf("register %s: panicked %q; want it registered", tc.activity, got)
			case tc.wantPanic != "" && !strings.Contains(got, tc.wantPanic):
				t.Fatalf("register %s: got panic %q; want one saying %q", tc.activity, got, tc.wantPanic)
			case tc.wantPanic != "" && len(r.activities) != 0:
				t.Fatalf("register %s: registered %v; want nothing", tc.activity, r.activities)
			}
		})
	}
}

// fenceEnv is a seat, cto, attached first on n1 and then on n2: n1 still
// believes it hosts cto at the old epoch (a zombie).
type fenceEnv struct {
	ctx      context.Context
	store    *store.Store
	n1, n2   *activities.Host
	old, cur int64
	log      *testenv.Log
}

func setupFence(t *testing.T) fenceEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st := testenv.Store(t, testenv.Database(t))
	if err := st.EnsureSeat(ctx, "cto", "worker", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	e := fenceEnv{ctx: ctx, store: st, log: &testenv.Log{}}
	host := func(incarnation string) *activities.Host {
		log := slog.New(slog.NewTextHandler(e.log, nil))
		h := &activities.Host{
			Store: st, Incarnation: incarnation, NodeID: strings.Split(incarnation, ":")[0], Beat: 50 * time.Millisecond,
			Watchdog: watchdog.New(time.Second, io.Discard, func(int) {}), Log: log,
		}
		h.Tenures = liveness.NewTenures(incarnation, liveness.RealClock{}, h.Teardown, log, nil)
		return h
	}
	e.n1, e.n2 = host("n1:aaaa"), host("n2:bbbb")
	for _, a := range []struct {
		h     *activities.Host
		epoch *int64
	}{{e.n1, &e.old}, {e.n2, &e.cur}} {
		out, err := a.h.Attach(ctx, crewlet.AttachInput{Handle: "cto"})
		if err != nil {
			t.Fatal(err)
		}
		*a.epoch = out.Epoch
	}
	return e
}

// run runs the activity registered as name, with body, through the fence
// of a node whose host is h, as a worker would.
func (e fenceEnv) run(h *activities.Host, name string, body func(context.Context, crewlet.Tenure) error, t crewlet.Tenure) error {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		&seatFence{epochs: e.store, host: h, log: slog.New(slog.NewTextHandler(e.log, nil))},
	}})
	env.RegisterActivityWithOptions(body, activity.RegisterOptions{Name: name})
	_, err := env.ExecuteActivity(name, t)
	return err
}

func sortedGuards() []string {
	names := make([]string, 0, len(guards))
	for name := range guards {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Every fenced activity is refused before its body runs when its tenure is
// stale, and runs at the current one; one fenced in its body has the body's
// refusal reported as fenced; an unfenced one runs either way.
func TestFenceRefusesAStaleTenureBeforeTheBodyRuns(t *testing.T) {
	e := setupFence(t)
	for _, name := range sortedGuards() {
		g := guards[name]
		t.Run(name, func(t *testing.T) {
			ran := 0
			body := func(context.Context, crewlet.Tenure) error { ran++; return nil }
			if g.inStep != "" {
				// The body runs and refuses the epoch in its own statement
				// (each one's own test shows it does): the fence reports
				// that refusal as its own.
				refusing := func(ctx context.Context, ten crewlet.Tenure) error {
					ran++
					return e.store.CheckEpoch(ctx, ten.Handle, ten.Epoch)
				}
				err := e.run(e.n1, name, refusing, crewlet.Tenure{Handle: "cto", Epoch: e.old})
				testenv.WantErrorType(t, name+" whose body refused a stale epoch", err, crewlet.ErrorTypeFenced)
				if ran != 1 {
					t.Fatalf("%s (fenced in its body) at a stale epoch: the body ran %d times; want once", name, ran)
				}
				return
			}
			// On the host queue the zombie node n1 passes its own check
			// at the old epoch: Postgres refuses it.
			err := e.run(e.n1, name, body, crewlet.Tenure{Handle: "cto", Epoch: e.old})
			if g.unfenced != "" {
				if err != nil || ran != 1 {
					t.Fatalf("unfenced %s at a stale epoch: ran %d times, error %v; want it run once (%s)", name, ran, err, g.unfenced)
				}
				return
			}
			testenv.WantErrorType(t, name+" at a stale epoch", err, crewlet.ErrorTypeFenced)
			if ran != 0 {
				t.Fatalf("%s at a stale epoch: the body ran %d times; want never", name, ran)
			}
			if err := e.run(e.n2, name, body, crewlet.Tenure{Handle: "cto", Epoch: e.cur}); err != nil || ran != 1 {
				t.Fatalf("%s at the current epoch on its host: ran %d times, error %v; want it run once", name, ran, err)
			}
		})
	}
	if !strings.Contains(e.log.String(), "seat_fenced") {
		t.Fatalf("log after fenced activities has no seat_fenced line:\n%s", e.log)
	}
}

// On the host queue the node must host the seat at the epoch, and that is
// asked first: a node that lost the seat refuses a tool call even at the
// seat's current epoch, without its body running.
func TestFenceRefusesAToolCallOnANodeThatDoesNotHostTheSeat(t *testing.T) {
	e := setupFence(t)
	ran := 0
	body := func(context.Context, crewlet.Tenure) error { ran++; return nil }
	cases := []struct {
		name string
		host *activities.Host
		ten  crewlet.Tenure
	}{
		{"current epoch, on the node the seat left", e.n1, crewlet.Tenure{Handle: "cto", Epoch: e.cur}},
		{"stale epoch, on the seat's host", e.n2, crewlet.Tenure{Handle: "cto", Epoch: e.old}},
		{"a seat no node hosts", e.n2, crewlet.Tenure{Handle: "nobody", Epoch: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := e.run(tc.host, crewlet.ActivityToolCall, body, tc.ten)
			testenv.WantErrorType(t, "ToolCall "+tc.name, err, crewlet.ErrorTypeFenced)
			// The host's refusal names the node; Postgres's would not.
			if want := "does not host seat"; !strings.Contains(err.Error(), want) {
				t.Fatalf("ToolCall %s: got %v; want the host's refusal (%q), asked before Postgres", tc.name, err, want)
			}
			if ran != 0 {
				t.Fatalf("ToolCall %s: the body ran %d times; want never", tc.name, ran)
			}
		})
	}
}

// A turn step that panics fails for good with the panic error, logged with
// its stack; a seat-loop step's panic is left to the retry policy as
// before.
func TestFenceTurnsATurnStepsPanicIntoThePanicError(t *testing.T) {
	e := setupFence(t)
	body := func(context.Context, crewlet.Tenure) error { panic("boom") }
	for _, name := range sortedGuards() {
		g := guards[name]
		t.Run(name, func(t *testing.T) {
			err := e.run(e.n2, name, body, crewlet.Tenure{Handle: "cto", Epoch: e.cur})
			if !g.recoverPanic {
				var appErr *temporal.ApplicationError
				if errors.As(err, &appErr) && appErr.Type() == crewlet.ErrorTypePanic {
					t.Fatalf("%s panicked: got %v; want the SDK's own panic error, not the turn's", name, err)
				}
				return
			}
			testenv.WantErrorType(t, name+" that panicked", err, crewlet.ErrorTypePanic)
			if !strings.Contains(err.Error(), name+" panicked: boom") {
				t.Fatalf("%s that panicked: got %v; want it to say %q", name, err, name+" panicked: boom")
			}
		})
	}
	if log := e.log.String(); !strings.Contains(log, "turn_panicked") || !strings.Contains(log, "fence_test.go") {
		t.Fatalf("log after panicking turn steps has no turn_panicked line with the stack:\n%s", log)
	}
}

// A zombie tenure's mail steps are refused and leave the mailbox as it was:
// the entry it read stays pending for the next tenure, and it reads no more.
func TestStaleEpochMailActivitiesAreFencedAndMailStaysPending(t *testing.T) {
	e := setupFence(t)
	mb, err := mailbox.Open(e.ctx, testenv.Stack(t).RedisURL, "fencetest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	if err := mb.Ensure(e.ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ev-1", "ev-2"} {
		if _, _, err := mb.Publish(e.ctx, crewlet.Message{EventID: id, Type: crewlet.MessageChat, From: "ceo", To: "cto",
			Conversation: "c1", Body: "hello " + id, SentAt: time.Now()}, mailbox.Quotas{}); err != nil {
			t.Fatal(err)
		}
	}
	mail := &activities.Mail{Store: e.store, Mailbox: mb, Log: slog.New(slog.NewTextHandler(e.log, nil))}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&seatFence{epochs: e.store, host: e.n2, log: slog.Default()}}})
	env.RegisterActivityWithOptions(mail.ReadMail, activity.RegisterOptions{Name: crewlet.ActivityReadMail})
	env.RegisterActivityWithOptions(mail.AckMail, activity.RegisterOptions{Name: crewlet.ActivityAckMail})

	// The current tenure reads the first entry: it is pending, unacked.
	val, err := env.ExecuteActivity(crewlet.ActivityReadMail, crewlet.ReadMailInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.cur}, Consumer: "n2:e1", Max: 1})
	if err != nil {
		t.Fatalf("ReadMail at the current epoch: %v", err)
	}
	var read crewlet.ReadMailOutput
	if err := val.Get(&read); err != nil || len(read.Mail) != 1 || read.Mail[0].EventID != "ev-1" {
		t.Fatalf("ReadMail at the current epoch: got %+v (%v); want ev-1", read.Mail, err)
	}
	stale := crewlet.Tenure{Handle: "cto", Epoch: e.old}
	_, err = env.ExecuteActivity(crewlet.ActivityAckMail, crewlet.AckMailInput{Tenure: stale, StreamIDs: []string{read.Mail[0].StreamID}})
	testenv.WantErrorType(t, "AckMail with a stale epoch", err, crewlet.ErrorTypeFenced)
	_, err = env.ExecuteActivity(crewlet.ActivityReadMail, crewlet.ReadMailInput{Tenure: stale, Consumer: "n1:e1", Max: 16})
	testenv.WantErrorType(t, "ReadMail with a stale epoch", err, crewlet.ErrorTypeFenced)
	_, err = env.ExecuteActivity(crewlet.ActivityAckMail, crewlet.AckMailInput{Tenure: crewlet.Tenure{Handle: "nobody", Epoch: 1}, StreamIDs: []string{"0-1"}})
	testenv.WantErrorType(t, "AckMail for a seat with no row", err, crewlet.ErrorTypeFenced)
	// Nothing was acked or read for the zombie: ev-1 is still the one
	// pending entry, ev-2 never delivered.
	if n, err := mb.Pending(e.ctx, "cto"); err != nil || n != 1 {
		t.Fatalf("pending entries after fenced mail steps: got %d (%v); want 1, still pending for the current tenure", n, err)
	}
}
