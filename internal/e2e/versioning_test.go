package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
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
// made current. Seats are Pinned: cto, waiting in its turn, keeps the old
// build until the turn ends, and `crewlet versions` says so, naming the
// turn and since when; eng-1, paused and idle, is asked to hand over by
// the new build's node and moves at once. When cto's turn ends it continues as new, and
// its next run is pinned to the new build: every workflow task of the old
// run ran on the old build.
func TestRolloutKeepsAWaitingSeatOnItsBuildAndMovesItAtContinueAsNew(t *testing.T) {
	const oldBuild, newBuild = "build-old", "build-new"
	c := newCompany(t, writeFile(t, "org.yaml", rolloutOrg))
	c.apiServer()
	oldNode := c.workerWithEnv("old", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + oldBuild})
	c.waitAttached(30 * time.Second)
	// The task queue's name has no "." or ":", so it is the deployment's.
	deployment := c.temporal.WorkerDeploymentClient().GetHandle(c.taskQueue)
	if cur := c.currentBuild(deployment); cur != oldBuild {
		t.Fatalf("current build %q after the first node started; want %q (temporal.deployment.promote: first)", cur, oldBuild)
	}

	ask, turnID := c.waitingOnPausedEng1()
	seatID := crewlet.SeatWorkflowID("cto")
	oldRun := c.describe(seatID, "")
	c.wantVersioning(seatID, oldRun, enumspb.VERSIONING_BEHAVIOR_PINNED, oldBuild)

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
	c.promote(deployment, newNode, newBuild)

	// eng-1 is idle (paused): the new build's node wakes it, and it moves.
	engID := crewlet.SeatWorkflowID("eng-1")
	testenv.Eventually(t, time.Minute, "eng-1 on the new build", func() error {
		info := c.describe(engID, "").GetWorkflowExecutionInfo().GetVersioningInfo()
		if got := info.GetDeploymentVersion().GetBuildId(); got != newBuild {
			return fmt.Errorf("eng-1 on build %q", got)
		}
		return nil
	})
	c.wantVersioning(engID, c.describe(engID, ""), enumspb.VERSIONING_BEHAVIOR_PINNED, newBuild)
	if st := c.state("eng-1"); st.Status != crewlet.StatusPaused || st.Counters.ContinuedRuns < 1 {
		t.Fatalf("eng-1 after the move: %s, %d continued runs; want paused, its pause carried to a new run", st.Status, st.Counters.ContinuedRuns)
	}
	// It moved because the build changed: the new node asked it to, or a
	// workflow task it had first (a rebalance's, say) found the flag and
	// it handed over by itself, on the old build's node.
	asked := regexp.MustCompile(`msg=build_handover_asked node=\S+ seat=eng-1 `).MatchString(newNode.out.String())
	noticed := regexp.MustCompile(`msg=seat_hand_over .*seat=eng-1 reason=build_changed`).MatchString(oldNode.out.String())
	if !asked && !noticed {
		t.Fatalf("neither the new node's log has build_handover_asked for eng-1 nor the old node's a seat_hand_over of eng-1 for build_changed:\n%s\n--- old node ---\n%s", newNode.out.String(), oldNode.out.String())
	}

	// cto waits in its turn: it keeps the old build, and versions says so.
	held := regexp.MustCompile(`(?m)^` + oldBuild + `: 1 seats and 0 turns still run on it: keep a node of this build running until they move.*\n  cto holds it with turn ` +
		regexp.QuoteMeta(turnID) + `, begun \d{4}-\d\d-\d\dT[0-9:]+Z, waiting on ticket`)
	testenv.Eventually(t, 30*time.Second, "versions shows cto held on the old build", func() error {
		out := c.versions()
		if !held.MatchString(out) {
			return fmt.Errorf("versions says:\n%s", out)
		}
		return nil
	})
	c.wantVersioning(seatID, c.describe(seatID, ""), enumspb.VERSIONING_BEHAVIOR_PINNED, oldBuild)

	if err := c.call(http.MethodPost, "/seats/eng-1/resume", crewlet.ResumeRequest{By: "ops"}, nil); err != nil {
		t.Fatal(err)
	}
	if reply := c.waitReply(ask, 60*time.Second); !strings.HasPrefix(reply, "eng-1 says: Ticket t-") || !strings.Contains(reply, "Fixed the build.") {
		t.Fatalf("cto's answer %q; want eng-1's reply", reply)
	}

	// The turn over, cto continued as new onto the new build; its old run
	// ran every workflow task on the old build.
	oldRunID := oldRun.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	testenv.Eventually(t, 30*time.Second, "cto's seat run on the new build", func() error {
		d := c.describe(seatID, "")
		if d.GetWorkflowExecutionInfo().GetExecution().GetRunId() == oldRunID {
			return fmt.Errorf("cto still in run %s", oldRunID)
		}
		if got := d.GetWorkflowExecutionInfo().GetVersioningInfo().GetDeploymentVersion().GetBuildId(); got != newBuild {
			return fmt.Errorf("cto's new run on build %q", got)
		}
		return nil
	})
	c.wantVersioning(seatID, c.describe(seatID, ""), enumspb.VERSIONING_BEHAVIOR_PINNED, newBuild)
	for _, task := range c.taskBuilds(seatID, oldRunID) {
		if task.build != oldBuild {
			t.Fatalf("seat %s run %s: a workflow task at %s on %q; want every one on %s", seatID, oldRunID, task.at, task.build, oldBuild)
		}
	}
	if _, err := c.temporal.DescribeWorkflowExecution(context.Background(), turnID, ""); err == nil {
		t.Fatalf("turn %s is a workflow of its own; want it run inline in its seat", turnID)
	}
	testenv.Eventually(t, 30*time.Second, "versions lets the old build go", func() error {
		if out := c.versions(); !strings.Contains(out, oldBuild+": no seat or turn runs on it: its nodes may stop.") {
			return fmt.Errorf("versions says:\n%s", out)
		}
		return nil
	})

	// A turn begun now runs on the new build.
	again := c.send("cto", "get a fix for the docs")
	if reply := c.waitReply(again, 60*time.Second); !strings.Contains(reply, "Fixed the docs.") {
		t.Fatalf("cto's answer %q; want eng-1's reply", reply)
	}
	newRunID := c.describe(seatID, "").GetWorkflowExecutionInfo().GetExecution().GetRunId()
	for _, task := range c.taskBuilds(seatID, newRunID) {
		if task.build != newBuild {
			t.Fatalf("seat %s run %s: a workflow task on %q; want every one on %s", seatID, newRunID, task.build, newBuild)
		}
	}
}

// waitingOnPausedEng1 pauses eng-1 and sends cto (rolloutOrg) a message
// that cto delegates to eng-1: it returns once cto's turn waits on the
// ticket, with the message and the turn's id.
func (c *company) waitingOnPausedEng1() (crewlet.Message, string) {
	c.t.Helper()
	if err := c.call(http.MethodPost, "/seats/eng-1/pause", crewlet.PauseRequest{Reason: "hold the ticket", By: "ops"}, nil); err != nil {
		c.t.Fatal(err)
	}
	testenv.Eventually(c.t, 10*time.Second, "eng-1 paused", func() error {
		if st := c.state("eng-1"); st.Status != crewlet.StatusPaused {
			return fmt.Errorf("eng-1 is %s", st.Status)
		}
		return nil
	})
	ask := c.send("cto", "get a fix for the build")
	testenv.Eventually(c.t, 30*time.Second, "cto's turn waiting on its ticket to eng-1", func() error {
		if ts := c.tickets("from=cto"); len(ts) != 1 || ts[0].Waiter == "" {
			return fmt.Errorf("tickets from cto: %+v; want one with a waiting turn", ts)
		}
		return nil
	})
	return ask, crewlet.TurnWorkflowID("cto", crewlet.WorkKey([]string{ask.EventID}))
}

// promote makes build, whose node is node, the deployment's current one,
// as an operator's `temporal worker deployment set-current-version` does,
// once the node is done with its own promotion policy and Temporal has
// seen the build poll.
func (c *company) promote(deployment client.WorkerDeploymentHandle, node *proc, build string) {
	c.t.Helper()
	testenv.Eventually(c.t, time.Minute, "the new node done with its promotion policy", func() error {
		if !strings.Contains(node.out.String(), "msg=build_checked") {
			return fmt.Errorf("no build_checked in its log yet")
		}
		return nil
	})
	testenv.Eventually(c.t, time.Minute, "build "+build+" made current", func() error {
		desc, err := deployment.Describe(context.Background(), client.WorkerDeploymentDescribeOptions{})
		if err != nil {
			return err
		}
		_, err = deployment.SetCurrentVersion(context.Background(), client.WorkerDeploymentSetCurrentVersionOptions{
			BuildID: build, ConflictToken: desc.ConflictToken,
		})
		return err
	})
}

// versions is `crewlet versions` on the company's config.
func (c *company) versions() string {
	c.t.Helper()
	cmd := exec.Command(binary, "versions", "--config", c.config)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("crewlet versions: %v\n%s", err, out)
	}
	return string(out)
}

// Every node restarted in place on a new build, as `systemctl restart`
// of each after an upgrade does (docs/versioning.md, "Worker builds"):
// nobody promotes the new build, which waits while the old build's
// pollers are fresh, then makes itself current, and the company answers:
// its nodes send each seat, pinned to the old build, which no node runs,
// to the new one (seatclient.MoveToBuild).
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
	// The seats were pinned to the old build, which no node runs: the new
	// build's nodes sent each to it for its next workflow task, where it is
	// pinned now.
	for _, handle := range []string{"cto", "eng-1"} {
		if !regexp.MustCompile(`msg=build_handover_moved node=\S+ seat=` + handle + ` `).MatchString(logs) {
			t.Fatalf("the restarted nodes' logs have no build_handover_moved for %s:\n%s", handle, logs)
		}
		id := crewlet.SeatWorkflowID(handle)
		testenv.Eventually(t, 30*time.Second, handle+" pinned to "+newBuild, func() error {
			info := c.describe(id, "").GetWorkflowExecutionInfo().GetVersioningInfo()
			if info.GetBehavior() != enumspb.VERSIONING_BEHAVIOR_PINNED || info.GetDeploymentVersion().GetBuildId() != newBuild {
				return fmt.Errorf("%s is %s on build %q", handle, info.GetBehavior(), info.GetDeploymentVersion().GetBuildId())
			}
			return nil
		})
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

// A seat that answers 500 messages, one at a time, so 500 turns, hands over
// to a new run when Temporal suggests it (limit.historyCount
// .suggestContinueAsNew, 4,096 events by default), with no fixed turn
// count: the run it ends in holds no more history than that bound and one
// turn's worth, however many turns the seat ran.
func TestASeatsHistoryStaysBoundedOver500Turns(t *testing.T) {
	const turns, suggestAt, turnEvents = 500, 4096, 64
	c := newCompany(t, writeFile(t, "org.yaml", rolloutOrg))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	seatID := crewlet.SeatWorkflowID("eng-1")
	first := c.describe(seatID, "").GetWorkflowExecutionInfo().GetExecution().GetRunId()
	for i := 1; i <= turns; i++ {
		m := c.send("eng-1", fmt.Sprintf("please fix bug %d", i))
		if reply := c.waitReply(m, 30*time.Second); reply != fmt.Sprintf("Fixed bug %d.", i) {
			t.Fatalf("reply to message %d: %q", i, reply)
		}
	}
	st := c.state("eng-1")
	if st.Counters.Turns < turns {
		t.Fatalf("eng-1 ran %d turns; want %d, one per message", st.Counters.Turns, turns)
	}
	if c.describe(seatID, "").GetWorkflowExecutionInfo().GetExecution().GetRunId() == first || st.Counters.ContinuedRuns < 1 {
		t.Fatalf("eng-1 still in its first run after %d turns (%d continued runs); want it handed over", turns, st.Counters.ContinuedRuns)
	}
	// Every run of the seat, the closed ones as visibility shows them (the
	// namespace is every e2e test's: the task queue is this company's).
	var lengths []int64
	testenv.Eventually(t, 30*time.Second, "every run of eng-1 listed", func() error {
		resp, err := c.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s' AND TaskQueue = '%s'", seatID, c.taskQueue),
		})
		if err != nil {
			return err
		}
		lengths = lengths[:0]
		for _, ex := range resp.GetExecutions() {
			lengths = append(lengths, ex.GetHistoryLength())
		}
		if int64(len(lengths)) < st.Counters.ContinuedRuns+1 {
			return fmt.Errorf("%d runs listed; want %d", len(lengths), st.Counters.ContinuedRuns+1)
		}
		return nil
	})
	longest := slices.Max(lengths)
	t.Logf("%d turns in %d runs of %v events", st.Counters.Turns, len(lengths), lengths)
	if longest > suggestAt+turnEvents {
		t.Fatalf("a run of eng-1 reached %d events; want at most %d (the suggestion) + %d (the turn it was in)", longest, suggestAt, turnEvents)
	}
}
