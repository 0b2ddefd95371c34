package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/crewlet/crewlet/workers"
)

// run is one workflow run a company started.
type run struct {
	workflowType, id, runID string
}

// replayHistories fetches the history of every workflow run the company
// started (everything on its task queue: seats, turns, duties, person
// notes) and replays each against the workflows the workers register, so
// every path an e2e test drives is checked for determinism against the
// current code. With CREWLET_E2E_HISTORIES=DIR it also writes them there,
// one JSON file per run, in the form workflows/testdata keeps.
//
// Benchmarks are left out: their runs are many and their paths the tests'.
func (c *company) replayHistories() {
	if _, bench := c.t.(*testing.B); bench {
		return
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs, err := c.runs(ctx)
	if err != nil {
		c.t.Errorf("list the company's workflow runs: %v", err)
		return
	}
	histories := make([]*historypb.History, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, r := range runs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			histories[i], errs[i] = c.history(ctx, r)
		}()
	}
	wg.Wait()

	replayer := worker.NewWorkflowReplayer()
	workers.RegisterWorkflows(replayer)
	quiet := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	dir := os.Getenv("CREWLET_E2E_HISTORIES")
	replayed := 0
	for i, r := range runs {
		if errs[i] != nil {
			c.t.Errorf("fetch the history of %s %s (run %s): %v", r.workflowType, r.id, r.runID, errs[i])
			continue
		}
		if !decided(histories[i]) {
			// Started, not yet run (a duty pass the schedule started as
			// the test ended): no command to check.
			continue
		}
		replayed++
		if err := replayer.ReplayWorkflowHistory(quiet, histories[i]); err != nil {
			c.t.Errorf("replay of %s %s (run %s) against the current workflows: %v", r.workflowType, r.id, r.runID, err)
		}
		if dir != "" {
			c.keepHistory(dir, r, histories[i])
		}
	}
	c.t.Logf("replayed %d of %d workflow runs in %s", replayed, len(runs), time.Since(started).Round(time.Millisecond))
}

// decided reports whether a history has a completed workflow task, the
// first point at which the workflow issued commands.
func decided(h *historypb.History) bool {
	for _, e := range h.GetEvents() {
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			return true
		}
	}
	return false
}

// runs lists every workflow run on the company's task queue, open or
// closed; a continued-as-new workflow is one run per hand-over.
func (c *company) runs(ctx context.Context) ([]run, error) {
	var out []run
	var token []byte
	for {
		resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query:         fmt.Sprintf("TaskQueue = '%s'", c.taskQueue),
			NextPageToken: token,
		})
		if err != nil {
			return nil, err
		}
		for _, ex := range resp.GetExecutions() {
			out = append(out, run{workflowType: ex.GetType().GetName(), id: ex.GetExecution().GetWorkflowId(), runID: ex.GetExecution().GetRunId()})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

// history fetches one run's whole history.
func (c *company) history(ctx context.Context, r run) (*historypb.History, error) {
	h := &historypb.History{}
	iter := c.temporal.GetWorkflowHistory(ctx, r.id, r.runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			return nil, err
		}
		h.Events = append(h.Events, e)
	}
	return h, nil
}

// keepHistory writes a run's history under dir/TEST/, named by its type,
// id and run id.
func (c *company) keepHistory(dir string, r run, h *historypb.History) {
	clean := strings.NewReplacer("/", "_", " ", "_", ":", "_")
	testDir := filepath.Join(dir, clean.Replace(c.t.Name()))
	data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
	if err == nil {
		err = os.MkdirAll(testDir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(testDir, clean.Replace(r.workflowType+"-"+r.id+"-"+r.runID)+".json"), data, 0o644)
	}
	if err != nil {
		c.t.Errorf("CREWLET_E2E_HISTORIES: %v", err)
	}
}
