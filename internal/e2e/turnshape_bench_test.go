package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// BenchmarkTurnShape prices the child workflow per turn on this stack, with
// no crewlet in the way: 100 workflows loop over a turn's steps doing
// nothing, once as crewlet runs a turn (3 local activities in the seat, then
// a child workflow of 2 local and 1 regular: BenchmarkThroughput's bare
// ceiling) and once with the same steps inline in the looping workflow (the
// shape before turns became child workflows). It runs child, inline, child
// for benchDuration each, since a stack can slow from phase to phase, and
// reports each shape's turns/s (the child's as the mean of its two phases)
// and inline/child, what a turn would gain by not being a child workflow.
//
//	go test ./internal/e2e -run '^$' -bench TurnShape -benchtime 1x -timeout 20m
func BenchmarkTurnShape(b *testing.B) {
	d := benchDuration(b)
	child1 := bareCeiling(b, d)
	inline := bareInlineCeiling(b, d)
	child2 := bareCeiling(b, d)
	child := (child1 + child2) / 2
	b.ReportMetric(child, "child-turns/s")
	b.ReportMetric(inline, "inline-turns/s")
	b.ReportMetric(inline/child, "inline/child")
	b.Logf("%d workflows, %s phases: child %.1f then %.1f turns/s, inline %.1f turns/s; inline/child %.2f",
		benchSeats, d, child1, child2, inline, inline/child)
}

// bareInlineWorkflow is bareWorkflow with the turn's steps run in the
// workflow itself instead of a child workflow.
func bareInlineWorkflow(ctx workflow.Context, turns int) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	for i := 0; i < turns; i++ {
		for range 3 {
			if err := workflow.ExecuteLocalActivity(lctx, bareActivity).Get(ctx, nil); err != nil {
				return err
			}
		}
		if err := bareTurn(ctx); err != nil {
			return err
		}
	}
	return nil
}

// bareInlineCeiling is bareCeiling for bareInlineWorkflow.
func bareInlineCeiling(b *testing.B, d time.Duration) float64 {
	return bareLoopRate(b, d, "crewlet-bare-inline-", bareInlineWorkflow, func(w worker.Worker) {
		w.RegisterWorkflow(bareInlineWorkflow)
		w.RegisterActivity(bareActivity)
	})
}

// bareLoopRate runs benchSeats workflows of type wf (taking a turn count) on
// a worker of their own that register sets up, each starting again as soon
// as it ends, for d, and returns the turns done per second.
func bareLoopRate(b *testing.B, d time.Duration, prefix string, wf any, register func(worker.Worker)) float64 {
	tc, queue, stop := bareWorker(b, prefix, worker.Options{}, register)
	defer stop()
	// Each workflow runs batches of turns until the time is up; a batch is
	// short so the phase ends close to d.
	const turnsPerRun = 20
	var done atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range benchSeats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for run := 0; time.Now().Before(deadline); run++ {
				r, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
					ID: fmt.Sprintf("%s/%d/%d", queue, i, run), TaskQueue: queue,
				}, wf, turnsPerRun)
				if err == nil {
					err = r.Get(context.Background(), nil)
				}
				if err != nil {
					b.Error(err)
					return
				}
				done.Add(turnsPerRun)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(deadline.Add(-d)).Seconds()
}
