package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/workflows"
)

// childShapeCommit is main before turns ran inline (node-liveness 5): a
// seat there starts a Turn child workflow per turn, and is registered
// auto-upgrade.
const childShapeCommit = "0bd6211162c275641449f2a4f8c8d2a608f29b2f"

// buildAt builds the crewlet binary of a commit of this repository, from
// its tree as git keeps it, and returns its path.
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	dir := t.TempDir()
	extract := exec.Command("sh", "-c", fmt.Sprintf(`cd "$(git rev-parse --show-toplevel)" && git archive --format=tar %s | tar -x -C %s`, commit, dir))
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("extract commit %s (this test needs the repository's history, not a shallow clone): %v\n%s", commit, err, out)
	}
	bin := filepath.Join(dir, "crewlet")
	build := exec.Command("go", "build", "-o", bin, "./cmd/crewlet")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build crewlet at %s: %v\n%s", commit, err, out)
	}
	return bin
}

// A rollout from a build of the child-turn shape to this one
// (docs/versioning.md, "Rolling out a build"): cto's turn, a Turn child
// workflow on the old build, waits on its ticket to eng-1 while this build
// is made current. The child finishes on the old build, where it is
// pinned; cto's seat, auto-upgrade on the old build, moves to this build,
// replays its old-shape history here, and, asked by this build's node
// (hand_over), hands over at the top of its loop once the child ended: its
// next run runs turns inline, pinned to this build. eng-1, idle, is asked
// and hands over the same way.
func TestRolloutFromTheChildTurnShapeFinishesTheChildThenRunsInline(t *testing.T) {
	const oldBuild, newBuild = "build-child", "build-inline"
	old := buildAt(t, childShapeCommit)
	c := newCompany(t, writeFile(t, "org.yaml", rolloutOrg))
	c.apiServer()
	c.workerOf(old, "old", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + oldBuild})
	c.waitAttached(30 * time.Second)
	deployment := c.temporal.WorkerDeploymentClient().GetHandle(c.taskQueue)
	if cur := c.currentBuild(deployment); cur != oldBuild {
		t.Fatalf("current build %q after the old build's node started; want %q", cur, oldBuild)
	}

	ask, turnID := c.waitingOnPausedEng1()
	c.wantVersioning(turnID, c.describe(turnID, ""), enumspb.VERSIONING_BEHAVIOR_PINNED, oldBuild)

	newNode := c.workerWithEnv("new", []string{"CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID=" + newBuild})
	c.promote(deployment, newNode, newBuild)

	if err := c.call(http.MethodPost, "/seats/eng-1/resume", crewlet.ResumeRequest{By: "ops"}, nil); err != nil {
		t.Fatal(err)
	}
	if reply := c.waitReply(ask, 60*time.Second); !strings.HasPrefix(reply, "eng-1 says: Ticket t-") || !strings.Contains(reply, "Fixed the build.") {
		t.Fatalf("cto's answer %q; want eng-1's reply", reply)
	}

	// The child ran every workflow task on the old build.
	for _, task := range c.taskBuilds(turnID, "") {
		if task.build != oldBuild {
			t.Fatalf("turn %s: a workflow task at %s on %q; want every one on %s", turnID, task.at, task.build, oldBuild)
		}
	}
	// Each seat was asked, handed over to a run of the inline shape
	// (node-liveness 5 or later: a new run takes the newest), pinned to the
	// new build.
	newest := inlineShapeNewest(t)
	for _, handle := range []string{"cto", "eng-1"} {
		id := crewlet.SeatWorkflowID(handle)
		asked := regexp.MustCompile(`msg=seat_hand_over .*WorkflowID=` + regexp.QuoteMeta(id) + ` .*reason=asked`)
		testenv.Eventually(t, time.Minute, handle+" handed over to the new build", func() error {
			if !asked.MatchString(newNode.out.String()) {
				return fmt.Errorf("no seat_hand_over reason=asked of %s in the new node's log yet", handle)
			}
			info := c.describe(id, "").GetWorkflowExecutionInfo().GetVersioningInfo()
			if info.GetBehavior() != enumspb.VERSIONING_BEHAVIOR_PINNED || info.GetDeploymentVersion().GetBuildId() != newBuild {
				return fmt.Errorf("%s is %s on build %q", handle, info.GetBehavior(), info.GetDeploymentVersion().GetBuildId())
			}
			resp, err := c.temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
				Query: fmt.Sprintf("WorkflowId = '%s' AND TaskQueue = '%s' AND ExecutionStatus = 'Running' AND TemporalChangeVersion = '%s'", id, c.taskQueue, newest),
			})
			if err != nil {
				return err
			}
			if resp.GetCount() != 1 {
				return fmt.Errorf("%s's running run is not of the inline shape (%s) yet", handle, newest)
			}
			return nil
		})
	}

	// A turn begun now runs inline, on the new build.
	again := c.send("cto", "get a fix for the docs")
	if reply := c.waitReply(again, 60*time.Second); !strings.Contains(reply, "Fixed the docs.") {
		t.Fatalf("cto's answer %q; want eng-1's reply", reply)
	}
	inline := crewlet.TurnWorkflowID("cto", crewlet.WorkKey([]string{again.EventID}))
	if _, err := c.temporal.DescribeWorkflowExecution(context.Background(), inline, ""); err == nil {
		t.Fatalf("turn %s is a workflow of its own; want it run inline in its seat", inline)
	}
	testenv.Eventually(t, 30*time.Second, "versions lets the old build go", func() error {
		if out := c.versions(); !strings.Contains(out, oldBuild+": no seat or turn runs on it: its nodes may stop.") {
			return fmt.Errorf("versions says:\n%s", out)
		}
		return nil
	})
}

// inlineShapeNewest is the TemporalChangeVersion value a new seat run
// records ("node-liveness-6"): the newest version of the change that moved
// turns inline.
func inlineShapeNewest(t *testing.T) string {
	t.Helper()
	for _, c := range workflows.Changes {
		if c.ID == "node-liveness" {
			return fmt.Sprintf("%s-%d", c.ID, c.Newest)
		}
	}
	t.Fatal("workflows.Changes has no node-liveness")
	return ""
}
