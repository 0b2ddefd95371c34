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
	"github.com/crewlet/crewlet/internal/reconcile"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/workers"
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
	// The pass logs its report once every step is done, after the start.
	testenv.Eventually(t, 10*time.Second, "a reconcile_pass line names s01 started", func() error {
		if started := passLines(srv.out.String(), "started", "s01"); len(started) == 0 {
			return fmt.Errorf("none of:\n%s", strings.Join(linesWith(srv.out.String(), "reconcile_pass"), "\n"))
		}
		return nil
	})
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

// nudgeOrg: cto delegates and waits on nothing; the engineer takes an hour
// over anything, so cto's ticket stays open while cto has nothing to do.
const nudgeOrg = `company: { name: nudgeco }
profiles:
  lead:
    provider: scripted
    rules:
      - match: '^get a fix for (.*)'
        tools: [ { name: delegate, args: { to: 'role:engineer', task: 'please fix {{index .Groups 1}}' } } ]
        reply: 'Delegated: {{index .Results 0}}'
      - { match: 'You have been quiet for', reply: 'Checked my open tickets' }
      - { match: '.*', reply: 'Noted' }
  eng: { provider: scripted, delay: 1h }
roles:
  lead: { charter: leads and delegates, profile: lead, idle_nudge: { after: 3s } }
  engineer: { charter: fixes what it is given, profile: eng }
seats:
  - { handle: cto, role: lead }
  - { handle: eng-1, role: engineer }
`

// A seat quiet with a ticket it opened still open is nudged once per quiet
// period: the nudge's own turn does not start another period, so passes
// go by with no second nudge; a turn on other mail does, and after it the
// seat is nudged once more.
func TestIdleLeadNudgedOncePerQuietPeriod(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", nudgeOrg))
	c.setenv("CREWLET_NODES_RECONCILE_INTERVAL=1s")
	c.serve()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if reply := c.waitReply(c.send("cto", "get a fix for the docs"), replyWait); !strings.HasPrefix(reply, "Delegated: Ticket t-") {
		t.Fatalf("cto's answer %q; want the ticket opened", reply)
	}
	nudges := func() (sent, answered int) {
		for _, conv := range c.conversation("idle-nudge-cto") {
			for _, m := range conv.Messages {
				switch {
				case m.From == crewlet.TicketSender && strings.Contains(m.Body, "1 tickets you opened are still open"):
					sent++
				case m.From == "cto" && m.Body == "Checked my open tickets":
					answered++
				}
			}
		}
		return sent, answered
	}
	waitNudges := func(n int) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("nudge %d sent and answered", n), func() error {
			if sent, answered := nudges(); sent != n || answered != n {
				return fmt.Errorf("%d nudges sent, %d answered", sent, answered)
			}
			return nil
		})
	}
	// passes waits until the reconcile duty has run n more passes.
	schedule := c.temporal.ScheduleClient().GetHandle(ctx, workers.ReconcileScheduleID(c.taskQueue))
	actions := func() int {
		t.Helper()
		d, err := schedule.Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return d.Info.NumActions
	}
	passes := func(n int) {
		t.Helper()
		from := actions()
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d more reconcile passes", n), func() error {
			if got := actions() - from; got < n {
				return fmt.Errorf("%d passes so far", got)
			}
			return nil
		})
	}

	waitNudges(1)
	// Well past idle_nudge.after (3s) since the nudge's turn.
	passes(6)
	if sent, _ := nudges(); sent != 1 {
		t.Fatalf("%d nudges in one quiet period; want 1", sent)
	}

	// Other mail ends the quiet period; the next one is nudged once.
	c.waitReply(c.send("cto", "how is it going?"), replyWait)
	waitNudges(2)
	passes(6)
	if sent, _ := nudges(); sent != 2 {
		t.Fatalf("%d nudges after two quiet periods; want 2", sent)
	}
}

// A config apply runs a reconcile pass at once (reconcile.Trigger), however
// long nodes.reconcile_interval is.
func TestReconcileTriggerRunsAPassNow(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 0))
	c.setenv("CREWLET_NODES_RECONCILE_INTERVAL=1h")
	srv := c.serve()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.temporal.TerminateWorkflow(ctx, crewlet.SeatWorkflowID("s01"), "", "behind crewlet's back"); err != nil {
		t.Fatal(err)
	}
	if err := reconcile.Trigger(ctx, c.temporal, c.taskQueue); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the triggered pass starts s01", func() error {
		if len(passLines(srv.out.String(), "started", "s01")) == 0 {
			return fmt.Errorf("no reconcile_pass line names s01 started")
		}
		return nil
	})
	c.waitReply(c.send("s01", "back?"), replyWait)
}
