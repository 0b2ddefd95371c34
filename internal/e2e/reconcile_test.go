package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// The reconcile duty repairs what was done behind crewlet's back, within a
// pass or two and with no restart: a seat whose workflow was terminated is
// started again and answers; a seat workflow of a handle the org lacks is
// told to stop; a seat's mailbox deleted from Redis is created again and
// takes mail.
func TestReconcileDutyRepairsSeatsBehindItsBack(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 2, 0))
	c.setenv("CREWLET_NODES_RECONCILE_INTERVAL=1s")
	srv := c.serve()
	c.waitAttached(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// s01's workflow terminated: the duty starts a new run.
	before, err := c.temporal.DescribeWorkflowExecution(ctx, crewlet.SeatWorkflowID("s01"), "")
	if err != nil {
		t.Fatal(err)
	}
	oldRun := before.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	if err := c.temporal.TerminateWorkflow(ctx, crewlet.SeatWorkflowID("s01"), oldRun, "behind crewlet's back"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "s01 running again in a new run", func() error {
		d, err := c.temporal.DescribeWorkflowExecution(ctx, crewlet.SeatWorkflowID("s01"), "")
		if err != nil {
			return err
		}
		info := d.GetWorkflowExecutionInfo()
		if info.GetExecution().GetRunId() == oldRun || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return fmt.Errorf("s01 is %s in run %s", info.GetStatus(), info.GetExecution().GetRunId())
		}
		return nil
	})
	if started := passLines(srv.out.String(), "started", "s01"); len(started) == 0 {
		t.Fatalf("no reconcile_pass line names s01 started:\n%s", strings.Join(linesWith(srv.out.String(), "reconcile_pass"), "\n"))
	}
	c.waitReply(c.send("s01", "back?"), replyWait)

	// A seat workflow for a handle the org lacks, on our queue: told to stop.
	ghost, err := c.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: crewlet.SeatWorkflowID("ghost"), TaskQueue: c.taskQueue},
		crewlet.WorkflowSeat, crewlet.SeatInput{Handle: "ghost", Role: "worker", ReadBatch: 1, HeartbeatTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.temporal.TerminateWorkflow(context.Background(), ghost.GetID(), "", "test over") })
	// The seat continues as new while it finds no node, so the latest run
	// is the one that hears the stop.
	testenv.Eventually(t, 30*time.Second, "ghost stopped", func() error {
		d, err := c.temporal.DescribeWorkflowExecution(ctx, ghost.GetID(), "")
		if err != nil {
			return err
		}
		if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			return fmt.Errorf("ghost is %s", st)
		}
		return nil
	})
	if stopped := passLines(srv.out.String(), "stopped", "ghost"); len(stopped) == 0 {
		t.Fatalf("no reconcile_pass line names ghost stopped:\n%s", strings.Join(linesWith(srv.out.String(), "reconcile_pass"), "\n"))
	}

	// s02's mailbox deleted from Redis: created again, and mail reaches s02.
	if err := c.mailbox().Delete(ctx, "s02"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "s02's mailbox created again", func() error {
		if created := passLines(srv.out.String(), "mailboxes_created", "s02"); len(created) == 0 {
			return fmt.Errorf("no reconcile_pass line names s02's mailbox created")
		}
		return nil
	})
	c.waitReply(c.send("s02", "mail still reaches you?"), replyWait)
}

// passLines returns the reconcile_pass log lines whose field names handle,
// e.g. started=[s01].
func passLines(out, field, handle string) []string {
	var found []string
	for _, line := range linesWith(out, "reconcile_pass") {
		i := strings.Index(line, " "+field+"=[")
		if i < 0 {
			continue
		}
		list := line[i+len(field)+3:]
		list = list[:strings.IndexByte(list, ']')]
		for _, h := range strings.Fields(list) {
			if h == handle {
				found = append(found, line)
			}
		}
	}
	return found
}
