package workers

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/activities"
	"github.com/crewlet/crewlet/internal/metrics"
)

// guard is how the fence treats one activity that acts for a seat.
type guard struct {
	// hosted refuses the activity unless this node hosts the seat at the
	// input's epoch. It is checked first: such an activity runs on the
	// seat's host queue, and a node that lost the seat answers for itself
	// without asking Postgres.
	hosted bool
	// epoch refuses the activity unless the input's epoch is the seat's
	// current one in Postgres, read before the body runs: a round trip of
	// its own (crewlet_epoch_reads_total).
	epoch bool
	// inStep says how the activity's body refuses a stale epoch itself,
	// in its own statements (a read that returns the seat's epoch with
	// what it reads, a write fenced in its WHERE clause), before it has
	// any effect: so it costs no read of its own. Set instead of epoch.
	inStep string
	// recoverPanic makes a panic a non-retryable ErrorTypePanic error: a
	// turn step that panicked would panic again, so the turn records it as
	// failed and its triggers are acked, never replayed.
	recoverPanic bool
	// unfenced says why an activity that acts for a seat is let through
	// without a check. Set exactly when nothing else above is.
	unfenced string
}

// checks is how many of the ways to fence an activity its guard names.
func (g guard) checks() int {
	n := 0
	for _, set := range []bool{g.hosted || g.epoch, g.inStep != "", g.unfenced != ""} {
		if set {
			n++
		}
	}
	return n
}

// guards lists every activity that acts for a seat (its input embeds
// crewlet.Tenure or carries a seat handle) and how the fence treats it.
// Registering such an activity without an entry panics (see register), so a
// new one cannot skip the fence by forgetting it.
var guards = map[string]guard{
	// The seat loop's steps. Mail is read and acked in Redis, where no
	// statement of the step can carry the epoch: the fence reads it.
	crewlet.ActivityReadMail:       {epoch: true},
	crewlet.ActivityPrepareTurn:    {unfenced: "it only reads (the mailbox, the ledger) and records skips keyed on the trigger: the turn it prepares opens fenced (BeginTurn), and its skipped entries are acked fenced (AckMail)"},
	crewlet.ActivityAckMail:        {epoch: true},
	crewlet.ActivityDeadLetterMail: {epoch: true},

	// The turn's steps. Those on a reply's path check in their own first
	// statement; the others read the epoch first.
	crewlet.ActivityBeginTurn:      {inStep: "its reads and keyed inserts come first; opening the turn is fenced in its statement (store.OpenTurn), and nothing is told before it", recoverPanic: true},
	crewlet.ActivityAcquireProfile: {inStep: "its first read returns the seat's epoch with the turn (store.TenureTurn)", recoverPanic: true},
	crewlet.ActivityModelRound:     {inStep: "its first read returns the seat's epoch with the turn (store.TenureTurn), before the model is called", recoverPanic: true},
	crewlet.ActivityToolCall:       {hosted: true, epoch: true, recoverPanic: true},
	crewlet.ActivityResolveWait:    {epoch: true, recoverPanic: true},
	crewlet.ActivityEndApproval:    {epoch: true, recoverPanic: true},
	crewlet.ActivityReflect:        {epoch: true, recoverPanic: true},
	crewlet.ActivityFinishTurn:     {inStep: "its first read returns the seat's epoch with the turn (store.TenureTurn), before anything is sent", recoverPanic: true},
	crewlet.ActivityInterruptTurn:  {epoch: true, recoverPanic: true},
	// The busy policy's step of the seat loop.
	crewlet.ActivityBusyMail: {epoch: true},

	// Unfenced, deliberately.
	crewlet.ActivityReleaseProfile: {recoverPanic: true, unfenced: "a slot is its run's own: a run fenced out still gives its slot back"},
	crewlet.ActivitySetSeatStatus:  {unfenced: "its store write is fenced in SQL, in the same statement"},
	crewlet.ActivityPlaceSeat:      {unfenced: "placement comes before a tenure: there is no epoch yet"},
	crewlet.ActivityAttach:         {unfenced: "it starts a tenure: there is no epoch yet"},
	crewlet.ActivityHold:           {unfenced: "the host holds only a tenure it hosts, and checks that itself for as long as it holds"},
	crewlet.ActivityDetach:         {unfenced: "the host ends only a tenure it hosts, and checks that itself"},
	crewlet.ActivityCheckBudget:    {unfenced: "it only reads the seat's usage, and carries no epoch"},
}

// tenured is an activity input that embeds crewlet.Tenure.
type tenured interface{ SeatTenure() crewlet.Tenure }

var tenuredType = reflect.TypeFor[tenured]()

// checkGuarded panics unless an activity that acts for a seat has a guard
// that fences it or says why not, and unless a fenced one carries the
// tenure the fence checks. Registration is where a worker refuses a bad
// activity, as the SDK does.
func checkGuarded(name string, fn any) {
	g, listed := guards[name]
	t := reflect.TypeOf(fn)
	if t.Kind() != reflect.Func || t.NumIn() < 2 {
		if listed {
			panic(fmt.Sprintf("activity %s is in the fence's guards but takes no input", name))
		}
		return
	}
	in := t.In(1)
	hasTenure := in.Implements(tenuredType)
	switch {
	case listed && g.checks() != 1:
		panic(fmt.Sprintf("activity %s: its guard must fence it (hosted, epoch), say how its body fences it (inStep) or say why it is not fenced (unfenced): one of them", name))
	case (g.hosted || g.epoch || g.inStep != "") && !hasTenure:
		panic(fmt.Sprintf("activity %s is fenced but its input %s does not embed crewlet.Tenure", name, in))
	case !listed && (hasTenure || carriesHandle(in)):
		panic(fmt.Sprintf("activity %s acts for a seat (input %s) but is neither fenced nor listed as unfenced in workers/fence.go", name, in))
	}
}

// carriesHandle reports whether an input names a seat by handle.
func carriesHandle(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	_, ok := t.FieldByName("Handle")
	return ok
}

// seatFence refuses a seat's activity, before its body runs, when the
// tenure it carries is no longer the seat's, and turns a turn step's panic
// into the error the turn records. One interceptor on every worker, so a
// new activity cannot forget it.
type seatFence struct {
	interceptor.WorkerInterceptorBase
	epochs interface {
		CheckEpoch(ctx context.Context, handle string, epoch int64) error
	}
	host interface {
		CheckHosted(handle string, epoch int64) error
	}
	// metrics counts the epoch reads; nil counts none.
	metrics *metrics.Metrics
	log     *slog.Logger
}

func (f *seatFence) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &seatFenceActivity{fence: f}
	a.Next = next
	return a
}

type seatFenceActivity struct {
	interceptor.ActivityInboundInterceptorBase
	fence *seatFence
}

func (a *seatFenceActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (res any, err error) {
	name := activity.GetInfo(ctx).ActivityType.Name
	g, ok := guards[name]
	if !ok {
		return a.Next.ExecuteActivity(ctx, in)
	}
	var t crewlet.Tenure
	if len(in.Args) > 0 {
		if arg, ok := in.Args[0].(tenured); ok {
			t = arg.SeatTenure()
		}
	}
	if g.recoverPanic {
		defer a.fence.recoverPanic(t.Handle, name, &err)
	}
	if err := a.fence.check(ctx, name, g, t); err != nil {
		return nil, err
	}
	res, err = a.Next.ExecuteActivity(ctx, in)
	if g.inStep != "" {
		// The body's own statement refused the epoch: the same refusal
		// the check above makes.
		err = activities.Fence(a.fence.log, t.Handle, t.Epoch, err)
	}
	return res, err
}

// check is the guard's fence: the host's word first, then Postgres's.
func (f *seatFence) check(ctx context.Context, name string, g guard, t crewlet.Tenure) error {
	if g.hosted {
		if err := f.host.CheckHosted(t.Handle, t.Epoch); err != nil {
			return err
		}
	}
	if g.epoch {
		f.metrics.EpochRead(name)
		if err := f.epochs.CheckEpoch(ctx, t.Handle, t.Epoch); err != nil {
			return activities.Fence(f.log, t.Handle, t.Epoch, err)
		}
	}
	return nil
}

// recoverPanic turns a panic of a turn step into a non-retryable error the
// turn records and acks: a step that panicked would panic again.
func (f *seatFence) recoverPanic(handle, step string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	f.log.Error("turn_panicked", "seat", handle, "step", step, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	*err = temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s panicked: %v", step, r), crewlet.ErrorTypePanic, nil)
}
