package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// rolloutOrg: cto delegates to eng-1 and waits for the answer, so cto's
// turn stays open for as long as eng-1 is paused.
const rolloutOrg = `company: { name: rollco }
profiles:
  lead:
    provider: scripted
    rules:
      - match: '^get a fix for (.*)'
        tools: [ { name: delegate, args: { to: eng-1, task: 'please fix {{index .Groups 1}}', wait: true } } ]
        reply: 'eng-1 says: {{.Last}}'
  eng:
    provider: scripted
    rules:
      - match: '^please fix (.*)'
        reply: 'Fixed {{index .Groups 1}}.'
roles:
  lead: { charter: leads and delegates, profile: lead }
  engineer: { charter: fixes what it is given, profile: eng }
seats:
  - { handle: cto, role: lead }
  - { handle: eng-1, role: engineer }
`

// A rollout with two builds side by side
// (docs/versioning.md, "Rolling out a build"): the old build's first node
// makes it current; a turn it starts waits on a ticket while the new
// build's node starts, which does not take over by itself, and is then
// made current. The seat runs its turn inline and is auto-upgrade, so the
// waiting turn moves to the new build with its seat at the seat's next
// workflow task and finishes there, and so does every turn after.
//
// A known limitation until seats are pinned (issue 35, part 4: Pinned
// seats that move at continue-as-new need Temporal server >= 1.32): a turn
// in flight changes build, so a change to a turn's commands needs a
// GetVersion guard (docs/versioning.md).
func TestRolloutMovesTheSeatWithItsWaitingTurnUntilSeatsArePinned(t *testing.T) {
	const oldBuild, newBuild = "build-old", "build-new"
	c := newCompany(t, writeFile(t, "org.yaml", rolloutOrg))
	c.apiServer()
	c.workerWithEnv("old", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + oldBuild})
	c.waitAttached(30 * time.Second)
	// The task queue's name has no "." or ":", so it is the deployment's.
	deployment := c.temporal.WorkerDeploymentClient().GetHandle(c.taskQueue)
	if cur := c.currentBuild(deployment); cur != oldBuild {
		t.Fatalf("current build %q after the first node started; want %q (temporal.deployment.promote: first)", cur, oldBuild)
	}

	if err := c.call(http.MethodPost, "/seats/eng-1/pause", crewlet.PauseRequest{Reason: "hold the ticket", By: "ops"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "eng-1 paused", func() error {
		if st := c.state("eng-1"); st.Status != crewlet.StatusPaused {
			return fmt.Errorf("eng-1 is %s", st.Status)
		}
		return nil
	})
	ask := c.send("cto", "get a fix for the build")
	turnID := crewlet.TurnWorkflowID("cto", crewlet.WorkKey([]string{ask.EventID}))
	testenv.Eventually(t, 30*time.Second, "cto's turn waiting on its ticket to eng-1", func() error {
		if ts := c.tickets("from=cto"); len(ts) != 1 || ts[0].Waiter == "" {
			return fmt.Errorf("tickets from cto: %+v; want one with a waiting turn", ts)
		}
		return nil
	})

	newNode := c.workerWithEnv("new", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + newBuild})
	testenv.Eventually(t, time.Minute, "the new node done with its promotion policy", func() error {
		if !strings.Contains(newNode.out.String(), "msg=build_checked") {
			return fmt.Errorf("no build_checked in its log yet")
		}
		return nil
	})
	if cur := c.currentBuild(deployment); cur != oldBuild {
		t.Fatalf("current build %q after the second build's node started; want %q: a later build waits to be promoted", cur, oldBuild)
	}
	// What an operator's `temporal worker deployment set-current-version`
	// does, once Temporal has seen the new build poll.
	testenv.Eventually(t, time.Minute, "the new build made current", func() error {
		desc, err := deployment.Describe(context.Background(), client.WorkerDeploymentDescribeOptions{})
		if err != nil {
			return err
		}
		_, err = deployment.SetCurrentVersion(context.Background(), client.WorkerDeploymentSetCurrentVersionOptions{
			BuildID: newBuild, ConflictToken: desc.ConflictToken,
		})
		return err
	})
	promoted := time.Now()

	if err := c.call(http.MethodPost, "/seats/eng-1/resume", crewlet.ResumeRequest{By: "ops"}, nil); err != nil {
		t.Fatal(err)
	}
	if reply := c.waitReply(ask, 60*time.Second); !strings.HasPrefix(reply, "eng-1 says: Ticket t-") || !strings.Contains(reply, "Fixed the build.") {
		t.Fatalf("cto's answer %q; want eng-1's reply", reply)
	}

	// The seat, and the turn waiting in it, moved to the new build at the
	// seat's next workflow task after the promotion: the old build ran its
	// first workflow tasks, the new build every one since.
	seatID := crewlet.SeatWorkflowID("cto")
	testenv.Eventually(t, 30*time.Second, "cto's seat run on the new build", func() error {
		info := c.describe(seatID, "").GetWorkflowExecutionInfo().GetVersioningInfo()
		if got := info.GetDeploymentVersion().GetBuildId(); got != newBuild {
			return fmt.Errorf("seat on build %q", got)
		}
		return nil
	})
	seat := c.describe(seatID, "")
	c.wantVersioning(seatID, seat, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE, newBuild)
	run := seat.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	tasks := c.taskBuilds(seatID, run)
	if tasks[0].build != oldBuild || tasks[len(tasks)-1].build != newBuild {
		t.Fatalf("seat %s: workflow tasks on builds %v; want the first on %s, the last on %s", seatID, tasks, oldBuild, newBuild)
	}
	for _, task := range tasks {
		if task.at.After(promoted) && task.build != newBuild {
			t.Fatalf("seat %s: a workflow task at %s on %q after the promotion at %s; want %s", seatID, task.at, task.build, promoted, newBuild)
		}
	}
	if _, err := c.temporal.DescribeWorkflowExecution(context.Background(), turnID, ""); err == nil {
		t.Fatalf("turn %s is a workflow of its own; want it run inline in its seat", turnID)
	}

	// A turn begun now runs on the new build.
	again := c.send("cto", "get a fix for the docs")
	if reply := c.waitReply(again, 60*time.Second); !strings.Contains(reply, "Fixed the docs.") {
		t.Fatalf("cto's answer %q; want eng-1's reply", reply)
	}
	for _, task := range c.taskBuilds(seatID, run) {
		if task.at.After(promoted) && task.build != newBuild {
			t.Fatalf("seat %s: a workflow task on %q after the promotion; want %s", seatID, task.build, newBuild)
		}
	}
}

// Every node restarted in place on a new build, as `systemctl restart`
// of each after an upgrade does (docs/versioning.md, "Worker builds"):
// nobody promotes the new build, which waits while the old build's
// pollers are fresh, then makes itself current, and the company answers.
func TestInPlaceRestartOnANewBuildPromotesItself(t *testing.T) {
	const oldBuild, newBuild = "build-a", "build-b"
	c := newCompany(t, writeFile(t, "org.yaml", rolloutOrg))
	c.apiServer()
	old := []*proc{
		c.workerWithEnv("n1", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + oldBuild}),
		c.workerWithEnv("n2", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + oldBuild}),
	}
	c.waitAttached(30 * time.Second)
	// Both nodes done starting: a node still promoting its build when the
	// SIGTERM comes exits 1, as a start cut short does. The seats attach
	// as soon as either node runs, so that is no sign of both.
	waitLogged(t, time.Minute, "node_started", old...)
	deployment := c.temporal.WorkerDeploymentClient().GetHandle(c.taskQueue)
	if cur := c.currentBuild(deployment); cur != oldBuild {
		t.Fatalf("current build %q after the first nodes started; want %q", cur, oldBuild)
	}
	// The company answering on the old build.
	if reply := c.waitReply(c.send("cto", "get a fix for the release"), 60*time.Second); !strings.Contains(reply, "Fixed the release.") {
		t.Fatalf("cto's answer on %s %q; want eng-1's reply", oldBuild, reply)
	}

	for _, p := range old {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range old {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s after SIGTERM: exit code %d; want 0", p.name, code)
		}
	}
	stopped := time.Now()
	restarted := []*proc{
		c.workerWithEnv("n1", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + newBuild}),
		c.workerWithEnv("n2", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + newBuild}),
	}
	ask := c.send("cto", "get a fix for the restart")
	// The old build's last polls age past two minutes, and a restarted
	// node sees it at its next check, 30 s apart.
	if reply := c.waitReply(ask, 4*time.Minute); !strings.Contains(reply, "Fixed the restart.") {
		t.Fatalf("cto's answer %q; want eng-1's reply", reply)
	}
	t.Logf("answered on %s %s after the last old node stopped", newBuild, time.Since(stopped).Round(time.Second))
	if cur := c.currentBuild(deployment); cur != newBuild {
		t.Fatalf("current build %q after the restart answered; want %q", cur, newBuild)
	}
	var logs string
	for _, p := range restarted {
		logs += p.out.String()
	}
	for _, want := range []string{"msg=build_not_current", "msg=build_promoted", "build_id=" + newBuild + " previous=" + oldBuild + " reason=current_build_has_no_poller"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the restarted nodes' logs have no %q:\n%s", want, logs)
		}
	}
}

// waitClosed waits until the workflow's latest run has closed.
func (c *company) waitClosed(workflowID string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.temporal.GetWorkflow(ctx, workflowID, "").Get(ctx, nil); err != nil {
		c.t.Fatalf("%s did not complete: %v", workflowID, err)
	}
}

// currentBuild is the build id of the deployment's current version; empty
// for none.
func (c *company) currentBuild(d client.WorkerDeploymentHandle) string {
	c.t.Helper()
	desc, err := d.Describe(context.Background(), client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		c.t.Fatalf("describe worker deployment: %v", err)
	}
	if cur := desc.Info.RoutingConfig.CurrentVersion; cur != nil {
		return cur.BuildID
	}
	return ""
}

// describe is `temporal workflow describe` of a run; runID empty: the
// latest.
func (c *company) describe(workflowID, runID string) *workflowservice.DescribeWorkflowExecutionResponse {
	c.t.Helper()
	d, err := c.temporal.DescribeWorkflowExecution(context.Background(), workflowID, runID)
	if err != nil {
		c.t.Fatalf("describe %s: %v", workflowID, err)
	}
	return d
}

// wantVersioning fails the test unless the run's versioning info, what
// `temporal workflow describe` shows, has the behaviour and build.
func (c *company) wantVersioning(workflowID string, d *workflowservice.DescribeWorkflowExecutionResponse, behavior enumspb.VersioningBehavior, build string) {
	c.t.Helper()
	info := d.GetWorkflowExecutionInfo().GetVersioningInfo()
	if info.GetBehavior() != behavior || info.GetDeploymentVersion().GetBuildId() != build {
		c.t.Fatalf("%s: versioning %s on build %q; want %s on %s", workflowID, info.GetBehavior(), info.GetDeploymentVersion().GetBuildId(), behavior, build)
	}
}

// taskBuild is one completed workflow task of a run: when, and the build
// of the worker that completed it.
type taskBuild struct {
	at    time.Time
	build string
}

func (t taskBuild) String() string { return t.at.Format("15:04:05.000") + " " + t.build }

// taskBuilds lists the run's completed workflow tasks in order, each with
// the build its history records.
func (c *company) taskBuilds(workflowID, runID string) []taskBuild {
	c.t.Helper()
	var out []taskBuild
	it := c.temporal.GetWorkflowHistory(context.Background(), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			c.t.Fatalf("history of %s: %v", workflowID, err)
		}
		if a := e.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			out = append(out, taskBuild{at: e.GetEventTime().AsTime(), build: a.GetDeploymentVersion().GetBuildId()})
		}
	}
	if len(out) == 0 {
		c.t.Fatalf("history of %s has no completed workflow task", workflowID)
	}
	return out
}
