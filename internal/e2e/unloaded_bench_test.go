package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// bareReplier is a seat's reply at its barest, in the shape a seat runs
// one (node-liveness 6), doing nothing: it waits for a wake signal, then
// reads (a local step), begins (a local step), calls the model (a regular
// activity), finishes (a local step, where crewlet records the reply) and
// reads again, and waits for the next wake. With attributes it also makes
// the two search attribute upserts of a seat's turn, CrewletTurn set as
// the model call is scheduled and unset after the finish: the visibility
// writes docs/architecture.md promises for every turn.
func bareReplier(ctx workflow.Context, attributes bool) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteLocalActivity(lctx, bareReadyActivity).Get(ctx, nil); err != nil {
		return err
	}
	wake := workflow.GetSignalChannel(ctx, bareWake)
	upsert := func(updates ...temporal.SearchAttributeUpdate) error {
		if !attributes {
			return nil
		}
		return workflow.UpsertTypedSearchAttributes(ctx, updates...)
	}
	for turn := 0; ; turn++ {
		wake.Receive(ctx, nil)
		steps := []func() workflow.Future{
			func() workflow.Future { return workflow.ExecuteLocalActivity(lctx, bareActivity) },
			func() workflow.Future { return workflow.ExecuteLocalActivity(lctx, bareActivity) },
			func() workflow.Future {
				if err := upsert(saBareTurn.ValueSet(fmt.Sprint(turn)), saBareTurnSince.ValueSet(workflow.Now(ctx))); err != nil {
					return failed(ctx, err)
				}
				return workflow.ExecuteActivity(actx, bareActivity)
			},
			func() workflow.Future { return workflow.ExecuteLocalActivity(lctx, bareRepliedActivity) },
			func() workflow.Future {
				if err := upsert(saBareTurn.ValueUnset(), saBareTurnSince.ValueUnset()); err != nil {
					return failed(ctx, err)
				}
				return workflow.ExecuteLocalActivity(lctx, bareActivity)
			},
		}
		for _, step := range steps {
			if err := step().Get(ctx, nil); err != nil {
				return err
			}
		}
	}
}

var (
	saBareTurn      = temporal.NewSearchAttributeKeyKeyword(crewlet.SATurn)
	saBareTurnSince = temporal.NewSearchAttributeKeyTime(crewlet.SATurnSince)
)

// failed is a future already settled with err.
func failed(ctx workflow.Context, err error) workflow.Future {
	f, settle := workflow.NewFuture(ctx)
	settle.SetError(err)
	return f
}

const bareRepliedActivity = "bareReplied"

// bareRepliers starts n bare repliers (with attributes or not) on a worker
// of their own and waits until each is ready. wake signals one and returns
// the moment it reaches the step where crewlet records its reply (zero,
// the benchmark failed, when it does not within 30 s); stop ends them all.
func bareRepliers(b *testing.B, n int, attributes bool) (ids []string, wake func(id string) time.Time, stop func()) {
	var ready atomic.Int64
	var mu sync.Mutex
	replied := map[string]chan time.Time{}
	tc, queue, stopWorker := bareWorker(b, "crewlet-bare-replier-", worker.Options{}, func(w worker.Worker) {
		w.RegisterWorkflow(bareReplier)
		w.RegisterActivity(bareActivity)
		w.RegisterActivityWithOptions(func(context.Context) error { ready.Add(1); return nil },
			activity.RegisterOptions{Name: bareReadyActivity})
		w.RegisterActivityWithOptions(func(ctx context.Context) error {
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			replied[activity.GetInfo(ctx).WorkflowExecution.ID] <- at
			return nil
		}, activity.RegisterOptions{Name: bareRepliedActivity})
	})
	ids = make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bare-replier/%s/%d", queue, i)
		replied[ids[i]] = make(chan time.Time, 1)
	}
	stop = func() {
		for _, id := range ids {
			_ = tc.TerminateWorkflow(context.Background(), id, "", "benchmark over")
		}
		stopWorker()
	}
	for _, id := range ids {
		if _, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, bareReplier, attributes); err != nil {
			stop()
			b.Fatal(err)
		}
	}
	testenv.Eventually(b, time.Minute, "every bare replier started", func() error {
		if got := ready.Load(); got < int64(n) {
			return fmt.Errorf("%d of %d started", got, n)
		}
		return nil
	})
	wake = func(id string) time.Time {
		mu.Lock()
		ch := replied[id]
		mu.Unlock()
		if err := tc.SignalWorkflow(context.Background(), id, "", bareWake, nil); err != nil {
			b.Error(err)
			return time.Time{}
		}
		select {
		case at := <-ch:
			return at
		case <-time.After(30 * time.Second):
			b.Errorf("bare replier %s did not reply to a wake in 30 s", id)
			return time.Time{}
		}
	}
	return ids, wake, stop
}

// bareUnloaded is the unloaded latency's ceiling on this stack: n bare
// repliers, woken one at a time round-robin as crewlet's seats are sent
// one message at a time, samples times; it returns, per wake, the time
// from just before the signal to the start of the step where crewlet
// records its reply.
func bareUnloaded(b *testing.B, n, samples int) []time.Duration {
	ids, wake, stop := bareRepliers(b, n, false)
	defer stop()
	out := make([]time.Duration, samples)
	for i := range out {
		t0 := time.Now()
		at := wake(ids[i%n])
		if at.IsZero() {
			b.FailNow()
		}
		out[i] = at.Sub(t0)
	}
	return out
}

// bareReplyCeiling is the throughput ceiling of a reply's Temporal work on
// this stack: benchSeats bare repliers with a turn's attribute upserts,
// each woken again as soon as it replies (as BenchmarkThroughput's senders
// send again), for d; it returns replies per second.
func bareReplyCeiling(b *testing.B, d time.Duration) float64 {
	ids, wake, stop := bareRepliers(b, benchSeats, true)
	defer stop()
	var done atomic.Int64
	began := time.Now()
	deadline := began.Add(d)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && !wake(id).IsZero() {
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return float64(done.Load()) / time.Since(began).Seconds()
}
