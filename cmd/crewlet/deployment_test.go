package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/workers"
)

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// writeOrg writes a one-seat org of company on taskQueue whose Postgres URL
// is in the variable pgEnv, and returns its path.
func writeOrg(t *testing.T, company, taskQueue, pgEnv, handle string) string {
	t.Helper()
	addr := freeAddr(t)
	path := filepath.Join(t.TempDir(), company+".yaml")
	doc := fmt.Sprintf(`
company: { name: %s }
temporal: { task_queue: %s }
postgres: { url_env: %s }
api: { listen: "%s" }
mailbox: { key_prefix: %s }
profiles:
  local: { provider: scripted }
roles:
  clerk: { charter: keeps notes, profile: local }
seats:
  - { handle: %s, role: clerk }
`, company, taskQueue, pgEnv, addr, taskQueue, handle)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// One database per company: every server command claims the database for its
// deployment, and one of another company is refused, naming both, before it
// serves or migrates; the same company is let in again.
func TestServerCommandsRefuseAnotherCompanysDatabase(t *testing.T) {
	testenv.Stack(t)
	suffix := testenv.Suffix()
	pgEnv := "CREWLET_TEST_PG_" + strings.ToUpper(suffix)
	t.Setenv(pgEnv, testenv.Database(t))
	acme := writeOrg(t, "acme", "crewlet-acme-"+suffix, pgEnv, "cto")
	globex := writeOrg(t, "globex", "crewlet-globex-"+suffix, pgEnv, "cto")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out bytes.Buffer
	if err := run(ctx, []string{"migrate", "--config", acme}, &out, io.Discard); err != nil {
		t.Fatalf("acme migrates its new database: %v", err)
	}
	if !strings.Contains(out.String(), "applied 0015_deployment.sql") {
		t.Fatalf("migrate output:\n%s\nwant 0015_deployment.sql applied", out.String())
	}
	for _, cmd := range []string{"migrate", "api", "worker", "serve"} {
		err := run(ctx, []string{cmd, "--config", globex}, io.Discard, io.Discard)
		if crewlet.ErrorCode(err) != crewlet.ECONFLICT {
			t.Fatalf("globex %s on acme's database: %v; want %s", cmd, err, crewlet.ECONFLICT)
		}
		for _, want := range []string{`company "acme"`, "crewlet-acme-" + suffix, `company "globex"`, "crewlet-globex-" + suffix, "postgres.url_env"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("globex %s: %q does not name %s", cmd, err, want)
			}
		}
	}
	out.Reset()
	if err := run(ctx, []string{"migrate", "--config", acme}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "up to date") {
		t.Fatalf("acme migrates again: %v, %q; want up to date", err, out.String())
	}
}

// A worker (and serve) refuses to start while a workflow of one of its seats
// runs on another task queue of the namespace, before it touches a seat; the
// API alone starts no seat, and starts.
func TestWorkerRefusesSeatWorkflowOfAnotherDeployment(t *testing.T) {
	stack := testenv.Stack(t)
	suffix := testenv.Suffix()
	pgEnv := "CREWLET_TEST_PG_" + strings.ToUpper(suffix)
	dbURL := testenv.Database(t)
	t.Setenv(pgEnv, dbURL)
	handle := "shared-" + suffix
	ours, theirs := "crewlet-ours-"+suffix, "crewlet-theirs-"+suffix
	org := writeOrg(t, "acme", ours, pgEnv, handle)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tc, err := client.Dial(client.Options{HostPort: stack.Temporal})
	if err != nil {
		t.Fatalf("connect temporal: %v", err)
	}
	defer tc.Close()
	id := crewlet.SeatWorkflowID(handle)
	// The other deployment's seat, on a queue nobody polls. Other tests on
	// this server close seat workflows they did not start, so a keeper
	// starts it again until the test ends.
	foreign := func() error {
		_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: theirs, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, crewlet.WorkflowSeat)
		return err
	}
	if err := foreign(); err != nil {
		t.Fatal(err)
	}
	keeper, stopKeeper := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		for keeper.Err() == nil {
			_ = foreign()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		stopKeeper()
		<-kept
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tc.TerminateWorkflow(ctx, id, "", "deployment test over")
		// A worker that was not refused made its duties' schedules.
		_ = tc.ScheduleClient().GetHandle(ctx, workers.RebalanceScheduleID(ours)).Delete(ctx)
		_ = tc.ScheduleClient().GetHandle(ctx, workers.MaintenanceScheduleID(ours)).Delete(ctx)
		_ = tc.ScheduleClient().GetHandle(ctx, workers.ReconcileScheduleID(ours)).Delete(ctx)
	})
	testenv.Eventually(t, 20*time.Second, "visibility lists the other deployment's seat", func() error {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'Running'", id),
		})
		if err != nil || len(resp.GetExecutions()) == 0 {
			return fmt.Errorf("not listed (%v)", err)
		}
		return nil
	})

	for _, cmd := range []string{"worker", "serve"} {
		cmdCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var log bytes.Buffer
		err := run(cmdCtx, []string{cmd, "--config", org}, io.Discard, &log)
		cancel()
		if crewlet.ErrorCode(err) != crewlet.ECONFLICT {
			t.Fatalf("%s: %v; want %s\nlog:\n%s", cmd, err, crewlet.ECONFLICT, log.String())
		}
		for _, want := range []string{id, fmt.Sprintf("%q", theirs), fmt.Sprintf("%q", ours)} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %q does not name %s", cmd, err, want)
			}
		}
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Seat(ctx, handle); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("seat row after the refused starts: %v; want none (refused before preparing seats)", err)
	}
	d, err := tc.DescribeWorkflowExecution(ctx, id, "")
	if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING ||
		d.GetExecutionConfig().GetTaskQueue().GetName() != theirs {
		t.Fatalf("the other deployment's seat after the refusals: %v (%v); want running on %s, untouched", d, err, theirs)
	}

	stopKeeper()
	<-kept
	apiCtx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if err := run(apiCtx, []string{"api", "--config", org}, io.Discard, io.Discard); err != nil {
		t.Fatalf("api: %v; want it to serve until stopped", err)
	}
}
