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
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet/internal/testenv"
)

// bareReplier is a seat's reply at its barest, in the shape a seat runs
// one (node-liveness 6), doing nothing: it waits for a wake signal, then
// reads (a local step), begins (a local step), calls the model (a regular
// activity), finishes (a local step, where crewlet records the reply) and
// reads again, and waits for the next wake.
func bareReplier(ctx workflow.Context) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteLocalActivity(lctx, bareReadyActivity).Get(ctx, nil); err != nil {
		return err
	}
	wake := workflow.GetSignalChannel(ctx, bareWake)
	for {
		wake.Receive(ctx, nil)
		steps := []func() workflow.Future{
			func() workflow.Future { return workflow.ExecuteLocalActivity(lctx, bareActivity) },
			func() workflow.Future { return workflow.ExecuteLocalActivity(lctx, bareActivity) },
			func() workflow.Future { return workflow.ExecuteActivity(actx, bareActivity) },
			func() workflow.Future { return workflow.ExecuteLocalActivity(lctx, bareRepliedActivity) },
			func() workflow.Future { return workflow.ExecuteLocalActivity(lctx, bareActivity) },
		}
		for _, step := range steps {
			if err := step().Get(ctx, nil); err != nil {
				return err
			}
		}
	}
}

const bareRepliedActivity = "bareReplied"

// bareUnloaded is the unloaded latency's ceiling on this stack: n bare
// repliers, woken one at a time round-robin as crewlet's seats are sent
// one message at a time, samples times; it returns, per wake, the time
// from just before the signal to the start of the step where crewlet
// records its reply.
func bareUnloaded(b *testing.B, n, samples int) []time.Duration {
	var ready atomic.Int64
	var mu sync.Mutex
	replied := map[string]chan time.Time{}
	tc, queue, stop := bareWorker(b, "crewlet-bare-unloaded-", worker.Options{}, func(w worker.Worker) {
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
	defer stop()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bare-unloaded/%s/%d", queue, i)
		replied[ids[i]] = make(chan time.Time, 1)
		if _, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: ids[i], TaskQueue: queue}, bareReplier); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, id := range ids {
			_ = tc.TerminateWorkflow(context.Background(), id, "", "benchmark over")
		}
	}()
	testenv.Eventually(b, time.Minute, "every bare replier started", func() error {
		if got := ready.Load(); got < int64(n) {
			return fmt.Errorf("%d of %d started", got, n)
		}
		return nil
	})
	out := make([]time.Duration, samples)
	for i := range out {
		id := ids[i%n]
		mu.Lock()
		ch := replied[id]
		mu.Unlock()
		t0 := time.Now()
		if err := tc.SignalWorkflow(context.Background(), id, "", bareWake, nil); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-ch:
			out[i] = at.Sub(t0)
		case <-time.After(30 * time.Second):
			b.Fatalf("bare replier %s did not reply to wake %d in 30 s", id, i)
		}
	}
	return out
}
