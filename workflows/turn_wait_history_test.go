package workflows

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/protobuf/proto"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// historySize counts a workflow's history events and their bytes, and
// lists their types.
func historySize(ctx context.Context, t *testing.T, tc client.Client, id string) (events, bytes int, types []enums.EventType) {
	t.Helper()
	iter := tc.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		events++
		bytes += proto.Size(e)
		types = append(types, e.GetEventType())
	}
	return events, bytes, types
}

// A turn waiting on a ticket, on the dev server, adds nothing to its
// history while it waits: the wait is one timer, and it ends with the
// ticket's signal. The wait lasts CREWLET_WAIT_HISTORY (default 3s; the
// closing note of the tickets issue ran it for 10m).
func TestTurnWaitingOnATicketAddsNoHistory(t *testing.T) {
	t.Parallel()
	wait := 3 * time.Second
	if v := os.Getenv("CREWLET_WAIT_HISTORY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CREWLET_WAIT_HISTORY: %v", err)
		}
		wait = d
	}
	stack := testenv.Stack(t)
	tc, err := client.Dial(client.Options{HostPort: stack.Temporal, Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	world := &fakeTurnWorld{threads: 1, rounds: []roundScript{{calls: []crewlet.ToolCallRef{write(0, "delegate")}}},
		wait: &crewlet.TicketWait{Ticket: "t-1", Kind: crewlet.WaitSettle, For: time.Hour}}
	queue, hostQueue := startTurnWorkers(t, tc, world)

	ctx, cancel := context.WithTimeout(context.Background(), wait+2*time.Minute)
	defer cancel()
	id := crewlet.TurnWorkflowID("waiter", testenv.Suffix())
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, crewlet.WorkflowTurn, crewlet.TurnInput{
		Tenure: crewlet.Tenure{Handle: "waiter", Epoch: 1}, HostQueue: hostQueue, TurnID: id, WorkKey: "k",
		Mail: []crewlet.MailRef{{StreamID: "1-0", EventID: "m1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var atStart int
	testenv.Eventually(t, 30*time.Second, "the turn waiting", func() error {
		n, _, types := historySize(ctx, t, tc, id)
		for _, ty := range types {
			if ty == enums.EVENT_TYPE_TIMER_STARTED {
				atStart = n
				return nil
			}
		}
		return errors.New("no timer yet")
	})
	time.Sleep(wait)
	atEnd, bytesWaiting, _ := historySize(ctx, t, tc, id)
	if atEnd != atStart {
		t.Fatalf("history grew from %d to %d events while the turn waited %s; want nothing", atStart, atEnd, wait)
	}
	if err := tc.SignalWorkflow(ctx, id, "", crewlet.SignalTicket, crewlet.TicketSignal{Ticket: "t-1"}); err != nil {
		t.Fatal(err)
	}
	var out crewlet.TurnOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	events, bytes, _ := historySize(ctx, t, tc, id)
	t.Logf("a turn that waited %s on a ticket: %d events and %d bytes while waiting; %d events, %d bytes in all", wait, atEnd, bytesWaiting, events, bytes)
	if out.Status != crewlet.TurnDone || len(world.resolved) != 1 || world.resolved[0].TimedOut {
		t.Fatalf("turn = %+v, resolved %+v; want done after the signal", out, world.resolved)
	}
}
