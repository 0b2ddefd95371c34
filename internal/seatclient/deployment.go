package seatclient

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/fanout"
)

// Seat workflow ids (seat/{handle}) are unique per Temporal namespace, not per
// deployment: a second company in the same namespace with an overlapping
// handle would have its starts (USE_EXISTING) and wakes land on the first
// company's workflow. A seat workflow runs on its deployment's task queue, so
// one found on another queue belongs to someone else and is refused.

// seatConflict is a seat workflow of ours found running on another task queue.
type seatConflict struct{ id, queue string }

// checkSeatRun refuses the run Temporal handed back for the seat's workflow
// when it runs on another task queue. A run seen on ours before is not asked
// about again, so a seat costs one describe per run and process at most.
func (c *Client) checkSeatRun(ctx context.Context, handle, runID string) error {
	id := crewlet.SeatWorkflowID(handle)
	if v, ok := c.ownRuns.Load(id); ok && v.(string) == runID {
		return nil
	}
	resp, err := c.temporal.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "cannot tell which deployment runs workflow %s: Temporal does not describe it now", id)
	}
	if queue := runQueue(resp); queue != c.org.Now().Temporal.TaskQueue {
		return c.seatConflicts([]seatConflict{{id: id, queue: queue}})
	}
	c.ownRuns.Store(id, runID)
	return nil
}

// CheckSeatWorkflows refuses (ECONFLICT) when a workflow of one of the org's
// agent seats is running on another task queue of the namespace, so a worker
// does not start on top of another deployment. It asks Temporal's visibility
// store, not each seat: one paged query for the running seat workflows off
// our task queue, intersected with the org's seats, costs about the same for
// 10,000 seats as for one; only the few it finds are described, to confirm.
// It also remembers the runs on our queue, so the starts that follow at boot
// need not describe them. Visibility lags a moment behind, so a workflow
// started just now may be missed here; the start and wake paths check each
// run they get.
func (c *Client) CheckSeatWorkflows(ctx context.Context) error {
	seats := map[string]bool{}
	for _, s := range c.org.Now().AgentSeats() {
		seats[crewlet.SeatWorkflowID(s.Handle)] = true
	}
	if len(seats) == 0 {
		return nil
	}
	queue := c.org.Now().Temporal.TaskQueue
	running := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", crewlet.WorkflowSeat)
	var conflicts []seatConflict
	err := c.listWorkflows(ctx, fmt.Sprintf("%s AND TaskQueue != '%s'", running, queue), func(ex *workflowpb.WorkflowExecutionInfo) {
		if id := ex.GetExecution().GetWorkflowId(); seats[id] {
			seats[id] = false // a page may repeat a row that moved
			conflicts = append(conflicts, seatConflict{id: id, queue: ex.GetTaskQueue()})
		}
	})
	if err != nil {
		return err
	}
	if conflicts, err = c.confirmConflicts(ctx, conflicts); err != nil {
		return err
	}
	if len(conflicts) > 0 {
		return c.seatConflicts(conflicts)
	}
	return c.listWorkflows(ctx, fmt.Sprintf("%s AND TaskQueue = '%s'", running, queue), func(ex *workflowpb.WorkflowExecutionInfo) {
		if id := ex.GetExecution().GetWorkflowId(); seats[id] {
			c.ownRuns.Store(id, ex.GetExecution().GetRunId())
		}
	})
}

// describeConcurrency bounds the describes one check runs at once.
const describeConcurrency = 16

// confirmConflicts keeps the seat workflows that Temporal, asked directly,
// still runs on another task queue. Visibility lags a moment behind: a
// workflow closed just before (a previous deployment's, terminated to make
// way for this one) must not refuse the start. Normally there are none to ask.
func (c *Client) confirmConflicts(ctx context.Context, candidates []seatConflict) ([]seatConflict, error) {
	var (
		mu        sync.Mutex
		confirmed []seatConflict
	)
	err := fanout.Each(len(candidates), describeConcurrency, func(i int) error {
		x := candidates[i]
		resp, err := c.temporal.DescribeWorkflowExecution(ctx, x.id, "")
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "cannot tell which deployment runs workflow %s: Temporal does not describe it now", x.id)
		case resp.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		default:
			if q := runQueue(resp); q != c.org.Now().Temporal.TaskQueue {
				mu.Lock()
				confirmed = append(confirmed, seatConflict{id: x.id, queue: q})
				mu.Unlock()
			}
		}
		return nil
	})
	return confirmed, err
}

// runQueue is the task queue a described workflow runs on.
func runQueue(resp *workflowservice.DescribeWorkflowExecutionResponse) string {
	if q := resp.GetExecutionConfig().GetTaskQueue().GetName(); q != "" {
		return q
	}
	return resp.GetWorkflowExecutionInfo().GetTaskQueue()
}

// listWorkflows calls fn with every execution query matches, page by page.
func (c *Client) listWorkflows(ctx context.Context, query string, fn func(*workflowpb.WorkflowExecutionInfo)) error {
	return listExecutions(ctx, c.temporal, "", query, fn)
}

// listExecutions calls fn with every execution of namespace ("" for the
// client's own) that query matches, page by page.
func listExecutions(ctx context.Context, tc client.Client, namespace, query string, fn func(*workflowpb.WorkflowExecutionInfo)) error {
	req := &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query, PageSize: 1000}
	for {
		resp, err := tc.ListWorkflow(ctx, req)
		if err != nil {
			return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the seats' workflows cannot be listed; Temporal is unreachable")
		}
		for _, ex := range resp.GetExecutions() {
			fn(ex)
		}
		if len(resp.GetNextPageToken()) == 0 {
			return nil
		}
		req.NextPageToken = resp.GetNextPageToken()
	}
}

// maxConflictsNamed bounds the workflows one refusal lists.
const maxConflictsNamed = 10

// seatConflicts is the refusal naming the workflows, their task queues and
// ours, and what to do.
func (c *Client) seatConflicts(cs []seatConflict) error {
	sort.Slice(cs, func(i, j int) bool { return cs[i].id < cs[j].id })
	ours := fmt.Sprintf("this deployment's %q (company %q, Temporal namespace %q)",
		c.org.Now().Temporal.TaskQueue, c.org.Now().Company.Name, c.org.Now().Temporal.Namespace)
	const remedy = "Give each company its own Temporal namespace (temporal.namespace) or distinct seat handles"
	if len(cs) == 1 {
		return crewlet.Errorf(crewlet.ECONFLICT,
			"workflow %s already runs on task queue %q, not on %s: another deployment in the namespace has a seat "+
				"with the same handle, and the two would start, wake and steer each other's seat. %s; "+
				"if it is this company's own, left on a task queue it no longer uses, terminate it "+
				"(temporal workflow terminate --workflow-id %s)",
			cs[0].id, cs[0].queue, ours, remedy, cs[0].id)
	}
	named := make([]string, 0, min(len(cs), maxConflictsNamed))
	for _, x := range cs[:min(len(cs), maxConflictsNamed)] {
		named = append(named, fmt.Sprintf("%s (task queue %q)", x.id, x.queue))
	}
	list := strings.Join(named, ", ")
	if more := len(cs) - len(named); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return crewlet.Errorf(crewlet.ECONFLICT,
		"%d seat workflows already run on other task queues than %s: %s. Another deployment in the namespace "+
			"has seats with the same handles, and the two would start, wake and steer each other's seats. %s; "+
			"if they are this company's own, left on a task queue it no longer uses, terminate them "+
			"(temporal workflow terminate --workflow-id ID)",
		len(cs), ours, list, remedy)
}

// OtherQueueRun is a running seat workflow of the namespace on another task
// queue than ours, with the tenure it last published in its search
// attributes: Node (the incarnation that hosted it) and Epoch. A run that
// never attached publishes neither.
type OtherQueueRun struct {
	Handle, RunID, Queue, Node string
	Epoch                      int64
}

// RunsOnOtherQueues lists, in one paged visibility query, the running seat
// workflows of the namespace on other task queues than ours. Whose they are
// is for the caller to prove (internal/reconcile: the tenure they publish is
// one our database granted).
func (c *Client) RunsOnOtherQueues(ctx context.Context) ([]OtherQueueRun, error) {
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue != '%s'",
		crewlet.WorkflowSeat, c.org.Now().Temporal.TaskQueue)
	var out []OtherQueueRun
	seen := map[string]bool{}
	err := c.listWorkflows(ctx, query, func(ex *workflowpb.WorkflowExecutionInfo) {
		handle, ok := crewlet.HandleFromWorkflowID(ex.GetExecution().GetWorkflowId())
		if !ok || seen[handle] { // a page may repeat a row that moved
			return
		}
		seen[handle] = true
		run := OtherQueueRun{Handle: handle, RunID: ex.GetExecution().GetRunId(), Queue: ex.GetTaskQueue()}
		fields := ex.GetSearchAttributes().GetIndexedFields()
		dc := converter.GetDefaultDataConverter()
		if p := fields[crewlet.SANode]; p != nil {
			_ = dc.FromPayload(p, &run.Node)
		}
		if p := fields[crewlet.SAEpoch]; p != nil {
			_ = dc.FromPayload(p, &run.Epoch)
		}
		out = append(out, run)
	})
	return out, err
}

// MoveToOurQueue ends the seat's run runID, found on another task queue and
// proven this deployment's by the caller, and starts the seat on our queue.
// Only that run is terminated: one started since on any queue is left alone.
// The new run's tenure takes a new epoch, which fences whatever the old
// run's host still does for the seat.
func (c *Client) MoveToOurQueue(ctx context.Context, s config.Seat, runID, reason string) error {
	err := c.temporal.TerminateWorkflow(ctx, crewlet.SeatWorkflowID(s.Handle), runID, reason)
	if err != nil && !Gone(err) {
		return fmt.Errorf("terminate seat %s on another task queue: %w", s.Handle, err)
	}
	_, err = c.Start(ctx, s)
	return err
}
