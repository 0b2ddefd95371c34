package seatclient

import (
	"context"
	"fmt"
	"strings"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"

	"github.com/crewlet/crewlet"
)

// A seat run is Pinned to the build of the worker deployment that runs it,
// and moves to the current build when it continues as new
// (docs/versioning.md, "Which build each seat runs"). What follows finds
// the runs still on another build, for the nodes of the current one to
// move (workers, build handover) and for `crewlet versions` to show.

// BuildRun is a running seat workflow run and the build it is pinned to,
// with the turn it runs, if any, and what that turn waits on: a seat in a
// turn keeps its build until the turn ends.
type BuildRun struct {
	Handle, RunID string
	// Build is the build id of the run's deployment version; empty for a
	// run on none.
	Build     string
	Turn      string
	TurnSince time.Time
	Waiting   string
}

// SeatRunsOffBuild lists, in one paged visibility query, the running seat
// workflows on taskQueue that are not on build of the worker deployment.
func SeatRunsOffBuild(ctx context.Context, tc client.Client, namespace, taskQueue, deployment, build string) ([]BuildRun, error) {
	return seatRuns(ctx, tc, namespace, taskQueue, fmt.Sprintf("TemporalWorkerDeploymentVersion != '%s:%s'", deployment, build))
}

// SeatRunsAtVersions lists, in one paged visibility query, the running seat
// workflows on taskQueue that recorded one of the change versions
// ("node-liveness-4", as TemporalChangeVersion holds them).
func SeatRunsAtVersions(ctx context.Context, tc client.Client, namespace, taskQueue string, versions []string) ([]BuildRun, error) {
	quoted := make([]string, len(versions))
	for i, v := range versions {
		quoted[i] = "'" + v + "'"
	}
	return seatRuns(ctx, tc, namespace, taskQueue, fmt.Sprintf("TemporalChangeVersion IN (%s)", strings.Join(quoted, ", ")))
}

// seatRuns lists the running seat workflows on taskQueue that match where.
func seatRuns(ctx context.Context, tc client.Client, namespace, taskQueue, where string) ([]BuildRun, error) {
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s' AND %s",
		crewlet.WorkflowSeat, taskQueue, where)
	var out []BuildRun
	seen := map[string]bool{}
	err := listExecutions(ctx, tc, namespace, query, func(ex *workflowpb.WorkflowExecutionInfo) {
		if run, ok := buildRun(ex); ok && !seen[run.RunID] { // a page may repeat a row that moved
			seen[run.RunID] = true
			out = append(out, run)
		}
	})
	return out, err
}

// buildRun reads a listed seat run's build and turn.
func buildRun(ex *workflowpb.WorkflowExecutionInfo) (BuildRun, bool) {
	handle, ok := crewlet.HandleFromWorkflowID(ex.GetExecution().GetWorkflowId())
	if !ok {
		return BuildRun{}, false
	}
	run := BuildRun{Handle: handle, RunID: ex.GetExecution().GetRunId()}
	if v := ex.GetVersioningInfo().GetDeploymentVersion(); v != nil {
		run.Build = v.GetBuildId()
	}
	dc := converter.GetDefaultDataConverter()
	fields := ex.GetSearchAttributes().GetIndexedFields()
	if p := fields[crewlet.SATurn]; p != nil {
		_ = dc.FromPayload(p, &run.Turn)
	}
	if p := fields[crewlet.SATurnSince]; p != nil {
		_ = dc.FromPayload(p, &run.TurnSince)
	}
	if p := fields[crewlet.SAWaiting]; p != nil {
		_ = dc.FromPayload(p, &run.Waiting)
	}
	if run.Build == "" {
		// Visibility has the version as the search attribute
		// "deployment:build" where the execution info leaves it out.
		if p := fields["TemporalWorkerDeploymentVersion"]; p != nil {
			var v string
			if dc.FromPayload(p, &v) == nil {
				_, run.Build, _ = strings.Cut(v, ":")
			}
		}
	}
	return run, true
}

// MoveToBuild sends the seat's run runID to build of the deployment for its
// next workflow task, after which it is pinned there: for a run pinned to a
// build no node runs any more, which would otherwise wait for that build
// forever. That task replays the run's history on the new build, so it is
// the way out for a build that is gone, not the way a seat moves while its
// build runs: that is continue-as-new.
func (c *Client) MoveToBuild(ctx context.Context, handle, runID, deployment, build string) error {
	_, err := c.temporal.UpdateWorkflowExecutionOptions(ctx, client.UpdateWorkflowExecutionOptionsRequest{
		WorkflowId: crewlet.SeatWorkflowID(handle),
		RunId:      runID,
		WorkflowExecutionOptionsChanges: client.WorkflowExecutionOptionsChanges{
			VersioningOverride: &client.VersioningOverrideChange{Value: &client.OneTimeVersioningOverride{
				TargetVersion: worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: build},
			}},
		},
	})
	if err != nil {
		return fmt.Errorf("move seat %s run %s to build %s: %w", handle, runID, build, err)
	}
	return nil
}
