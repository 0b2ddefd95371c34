package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/workflows"
)

// TestVersionsCountsRunningRunsPerChangeVersion starts turn runs on a task
// queue of its own, two that record the newest version of a Turn change
// and one from before the change (no marker), and checks that `crewlet
// versions` counts each and keeps the code the unmarked run needs, and
// counts the runs on the worker build that ran them.
func TestVersionsCountsRunningRunsPerChangeVersion(t *testing.T) {
	stack := testenv.Stack(t)
	suffix := testenv.Suffix()
	taskQueue := "crewlet-versions-" + suffix
	org := writeOrg(t, "acme", taskQueue, "CREWLET_PG_URL", "clerk-"+suffix)
	var change workflows.Change
	for _, ch := range workflows.Changes {
		if ch.WorkflowType == crewlet.WorkflowTurn {
			change = ch
		}
	}

	tc, err := client.Dial(client.Options{HostPort: stack.Temporal})
	if err != nil {
		t.Fatalf("connect temporal: %v", err)
	}
	defer tc.Close()
	// A stand-in under the Turn type: it records the change's newest
	// version, or, like a run begun before the change, nothing; then it
	// waits to be ended. It polls as build b1 of the deployment the org's
	// task queue names, made current as a node does on the first deploy.
	w := worker.New(tc, taskQueue, worker.Options{DeploymentOptions: worker.DeploymentOptions{
		UseVersioning: true, Version: worker.WorkerDeploymentVersion{DeploymentName: taskQueue, BuildID: "b1"},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
	}})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, marked bool) error {
		if marked {
			workflow.GetVersion(ctx, change.ID, workflow.DefaultVersion, change.Newest)
		}
		workflow.GetSignalChannel(ctx, "end").Receive(ctx, nil)
		return nil
	}, workflow.RegisterOptions{Name: crewlet.WorkflowTurn})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testenv.Eventually(t, 30*time.Second, "build b1 current", func() error {
		_, err := tc.WorkerDeploymentClient().GetHandle(taskQueue).SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: "b1"})
		return err
	})
	for i, marked := range []bool{true, true, false} {
		id := fmt.Sprintf("versions-%s-%d", suffix, i)
		if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, crewlet.WorkflowTurn, marked); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), id, "", "test over") })
	}

	row := func(out, change, version string) string {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(change) + `\s+Turn\s+` + regexp.QuoteMeta(version) + `\s+(\d+)\s*$`).FindStringSubmatch(out)
		if m == nil {
			return ""
		}
		return m[1]
	}
	newest := fmt.Sprint(change.Newest)
	var out string
	testenv.Eventually(t, 30*time.Second, "versions counts the runs", func() error {
		var buf bytes.Buffer
		if err := run(ctx, []string{"versions", "--config", org}, &buf, io.Discard); err != nil {
			return err
		}
		out = buf.String()
		// Visibility catches up with a run's marker a moment after it.
		if got, none := row(out, change.ID, newest), row(out, change.ID, "none"); got != "2" || none != "1" {
			return fmt.Errorf("%s runs at version %s = %q, with no marker = %q; want 2 and 1:\n%s", change.ID, newest, got, none, out)
		}
		// Visibility records a run's build with its first workflow task.
		if !regexp.MustCompile(`(?m)^b1\s+current\s+0\s+3\s*$`).MatchString(out) {
			return fmt.Errorf("want build b1 current with 3 turns:\n%s", out)
		}
		return nil
	})
	want := fmt.Sprintf("%s: 1 running Turn runs are below version %s: keep the code marked COMPAT(%s@%s).", change.ID, newest, change.ID, newest)
	if !strings.Contains(out, want) {
		t.Fatalf("versions says:\n%s\nwant the line %q", out, want)
	}
	// The shim counts by start time: these runs began after its change.
	if !strings.Contains(out, "begin-turn-triggers: no running Turn run started before it") {
		t.Fatalf("versions says:\n%s\nwant begin-turn-triggers with no run left", out)
	}
}
