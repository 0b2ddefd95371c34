package seatclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/testenv"
)

// Seat workflow ids are per namespace: a seat workflow of ours already running
// on another task queue belongs to another deployment, and the boot check,
// the start path and the wake path refuse it, naming both queues.
func TestSeatWorkflowOnAnotherTaskQueueIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stack := testenv.Stack(t)
	suffix := testenv.Suffix()
	ours, theirs := "crewlet-dep-test-"+suffix, "crewlet-dep-other-"+suffix
	taken, free := "taken-"+suffix, "free-"+suffix
	org, err := config.Parse(fmt.Appendf(nil, `
company: { name: acme }
temporal: { task_queue: %s }
mailbox: { key_prefix: deptest%s }
profiles:
  local: { provider: scripted }
roles:
  clerk: { charter: keeps notes, profile: local }
seats:
  - { handle: %s, role: clerk }
  - { handle: %s, role: clerk }
`, ours, suffix, taken, free))
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.DiscardHandler)
	tc, err := client.Dial(client.Options{HostPort: stack.Temporal, Logger: tlog.NewStructuredLogger(discard)})
	if err != nil {
		t.Fatalf("connect temporal: %v", err)
	}
	t.Cleanup(tc.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, h := range []string{taken, free} {
			_ = tc.TerminateWorkflow(ctx, crewlet.SeatWorkflowID(h), "", "deployment test over")
		}
	})
	mb, err := mailbox.Open(ctx, stack.RedisURL, org.Mailbox.KeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, h := range []string{taken, free} {
			_ = mb.Delete(context.Background(), h)
		}
		_ = mb.Close()
	})
	var logged testenv.Log
	seats := seatclient.New(tc, org)
	mail := delivery.New(org, mb, seats, nil, nil, slog.New(slog.NewTextHandler(&logged, nil)))

	// Another deployment's seat with the same handle, on a queue nobody
	// polls. Other tests on this server may close seat workflows they did
	// not start, so it is (re)started before each look.
	foreign := func() {
		t.Helper()
		_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: crewlet.SeatWorkflowID(taken), TaskQueue: theirs,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, crewlet.WorkflowSeat)
		if err != nil {
			t.Fatalf("start the other deployment's seat: %v", err)
		}
	}
	refusal := func(what string, err error) {
		t.Helper()
		if crewlet.ErrorCode(err) != crewlet.ECONFLICT {
			t.Fatalf("%s: %v; want %s", what, err, crewlet.ECONFLICT)
		}
		msg := crewlet.ErrorMessage(err)
		for _, want := range []string{crewlet.SeatWorkflowID(taken), fmt.Sprintf("%q", theirs), fmt.Sprintf("%q", ours), "temporal.namespace", "distinct seat handles"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("%s: message %q does not name %s", what, msg, want)
			}
		}
		if strings.Contains(msg, free) {
			t.Fatalf("%s: message %q names %s, which has no conflict", what, msg, free)
		}
	}

	if _, err := seats.Start(ctx, config.Seat{Handle: free, Role: "clerk", Kind: "agent"}); err != nil {
		t.Fatalf("start a seat no one else runs: %v", err)
	}
	foreign()
	testenv.Eventually(t, 20*time.Second, "the boot check sees the other deployment's seat", func() error {
		foreign()
		err := seats.CheckSeatWorkflows(ctx)
		if err == nil {
			return fmt.Errorf("CheckSeatWorkflows passed")
		}
		refusal("CheckSeatWorkflows", err)
		return nil
	})

	foreign()
	_, err = seats.Start(ctx, config.Seat{Handle: taken, Role: "clerk", Kind: "agent"})
	refusal("Start", err)
	d, err := tc.DescribeWorkflowExecution(ctx, crewlet.SeatWorkflowID(taken), "")
	if err != nil {
		t.Fatal(err)
	}
	if q := d.GetExecutionConfig().GetTaskQueue().GetName(); q != theirs {
		t.Fatalf("%s runs on %q after the refused start; want the other deployment's %q, untouched", crewlet.SeatWorkflowID(taken), q, theirs)
	}

	// Mail to the seat is kept (it is ours, in our mailbox); the wake that
	// would reach the other deployment's workflow is refused in the log.
	if err := mb.Ensure(ctx, taken); err != nil {
		t.Fatal(err)
	}
	foreign()
	if _, err := mail.Send(ctx, delivery.SendRequest{To: taken, Text: "hello"}); err != nil {
		t.Fatalf("send: %v; want the mail kept", err)
	}
	// A publish waits for its wake only so long (delivery.WakeWait); on a
	// busy server the refusal is logged by the wake that goes on.
	testenv.Eventually(t, 15*time.Second, "the wake's refusal logged", func() error {
		if log := logged.String(); !strings.Contains(log, "wake_failed") || !strings.Contains(log, "already runs on task queue") {
			return fmt.Errorf("log after the wake:\n%s\nwant wake_failed with the conflict", log)
		}
		return nil
	})

	// Once the other deployment's seat is gone, the check passes.
	if err := tc.TerminateWorkflow(ctx, crewlet.SeatWorkflowID(taken), "", "other deployment gone"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the boot check passes", func() error {
		return seats.CheckSeatWorkflows(ctx)
	})
}
