package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// approvalBenchCalls is how many gated writes BenchmarkApproveToToolCall
// approves, one at a time.
const approvalBenchCalls = 20

// BenchmarkApproveToToolCall measures the time from a person's approve
// (POST /approvals/{id}/approve sent) until the gated MCP write starts (the
// test server's count file grows), over approvalBenchCalls gated writes of
// one seat on one node; then the bare ceiling on the same stack: a
// workflow waiting on a signal that runs one activity once it comes, from
// the signal sent until the activity starts. Run it with
//
//	go test ./internal/e2e -run '^$' -bench ApproveToToolCall -benchtime 1x
func BenchmarkApproveToToolCall(b *testing.B) {
	c, countFile := newApprovalsCompany(b)
	defer c.stopAll()
	c.worker("n1")
	c.waitAttached(60 * time.Second)

	var took []time.Duration
	for i := range approvalBenchCalls {
		text := fmt.Sprintf("invoice %d", i)
		msg := c.send("s01", "record "+text, from("olga"))
		a := c.pendingApproval("s01", text)
		size := fileSize(countFile)
		start := time.Now()
		if err := c.as(approvalOlgaToken, http.MethodPost, "/approvals/"+a.ID+"/approve", wire.ApprovalDecision{}, nil); err != nil {
			b.Fatal(err)
		}
		for fileSize(countFile) == size {
			if time.Since(start) > 30*time.Second {
				b.Fatalf("the write of %s did not start within 30s of its approval", text)
			}
			time.Sleep(time.Millisecond)
		}
		took = append(took, time.Since(start))
		c.waitReply(msg, 30*time.Second)
	}
	reportP50Max(b, "", fmt.Sprintf("%d gated writes, approve to tool call started", len(took)), took)
	ceiling := bareSignalToActivity(b, approvalBenchCalls)
	reportP50Max(b, "bare-", fmt.Sprintf("bare ceiling, %d signals to a waiting workflow, signal to activity started", len(ceiling)), ceiling)
}

// fileSize is the size of path, 0 when it does not exist yet.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

const bareApproval = "approval"

// bareApprover waits for a signal, then runs one activity: the Temporal
// steps between a decision and the call it lets run.
func bareApprover(ctx workflow.Context) error {
	workflow.GetSignalChannel(ctx, bareApproval).Receive(ctx, nil)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteActivity(actx, bareStartedActivity).Get(ctx, nil)
}

const bareStartedActivity = "bareStarted"

// bareSignalToActivity returns, for n bare approvers one after another, the
// time from the signal sent until their activity started.
func bareSignalToActivity(b *testing.B, n int) []time.Duration {
	started := make(chan time.Time, 1)
	tc, queue, stop := bareWorker(b, "crewlet-bare-approve-", worker.Options{}, func(w worker.Worker) {
		w.RegisterWorkflow(bareApprover)
		w.RegisterActivityWithOptions(func(context.Context) error { started <- time.Now(); return nil },
			activity.RegisterOptions{Name: bareStartedActivity})
	})
	defer stop()
	var out []time.Duration
	for i := range n {
		id := fmt.Sprintf("bare-approve/%s/%d", queue, i)
		run, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, bareApprover)
		if err != nil {
			b.Fatal(err)
		}
		// Let the run reach its wait, as a gated call has.
		testenv.Eventually(b, 10*time.Second, "bare approver waiting", func() error {
			d, err := tc.DescribeWorkflowExecution(context.Background(), id, "")
			if err != nil || d.GetWorkflowExecutionInfo().GetHistoryLength() < 4 {
				return fmt.Errorf("not waiting yet (%v)", err)
			}
			return nil
		})
		sent := time.Now()
		if err := tc.SignalWorkflow(context.Background(), id, "", bareApproval, nil); err != nil {
			b.Fatal(err)
		}
		out = append(out, (<-started).Sub(sent))
		if err := run.Get(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
	}
	return out
}
