package workflows

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// Bounds a 50-round turn's history must stay within: the turn carries ids
// and counters only, so its history grows by a fixed amount per round, not
// with the size of the conversation.
const (
	historyRounds   = 50
	maxHistoryBytes = 128 << 10
	// A round is two activities (model, tool), each three events and a
	// workflow task of three more.
	maxEventsRound = 13
)

// A 50-round turn, each round a model call and one tool call on the host
// queue, run on the dev server: its history stays under maxHistoryBytes and
// about maxEventsRound events a round: the conversation itself lives in
// Postgres and never enters the history.
func TestTurnHistoryStaysSmallOver50Rounds(t *testing.T) {
	t.Parallel()
	stack := testenv.Stack(t)
	tc, err := client.Dial(client.Options{HostPort: stack.Temporal, Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	world := &fakeTurnWorld{threads: 1, maxRounds: historyRounds}
	for range historyRounds - 1 {
		world.rounds = append(world.rounds, roundScript{calls: []crewlet.ToolCallRef{write(0, "ledger__write")}})
	}
	queue, hostQueue := startTurnWorkers(t, tc, world)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := crewlet.TurnWorkflowID("history", testenv.Suffix())
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, crewlet.WorkflowTurn, crewlet.TurnInput{
		Tenure: crewlet.Tenure{Handle: "history", Epoch: 1}, HostQueue: hostQueue, TurnID: id, WorkKey: "k",
		Mail: []crewlet.MailRef{{StreamID: "1-0", EventID: "m1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out crewlet.TurnOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Rounds != historyRounds || out.Status != crewlet.TurnDone {
		t.Fatalf("turn ended %s after %d rounds; want done after %d", out.Status, out.Rounds, historyRounds)
	}
	events, bytes := 0, 0
	iter := tc.GetWorkflowHistory(ctx, id, run.GetRunID(), false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		events++
		bytes += proto.Size(e)
	}
	t.Logf("%d-round turn: %d events, %d bytes of history", historyRounds, events, bytes)
	if bytes > maxHistoryBytes || events > maxEventsRound*historyRounds {
		t.Fatalf("%d-round turn history: %d events, %d bytes; want at most %d events and %d bytes",
			historyRounds, events, bytes, maxEventsRound*historyRounds, maxHistoryBytes)
	}
}

// startTurnWorkers runs the Turn workflow and world's activities on the dev
// server, on a shared and a host queue of the test's own, until the test
// ends.
func startTurnWorkers(t *testing.T, tc client.Client, world *fakeTurnWorld) (queue, hostQueue string) {
	t.Helper()
	queue = "crewlet-turn-" + testenv.Suffix()
	hostQueue = queue + "-host"
	shared := worker.New(tc, queue, worker.Options{})
	shared.RegisterWorkflowWithOptions(Turn, workflow.RegisterOptions{Name: crewlet.WorkflowTurn})
	host := worker.New(tc, hostQueue, worker.Options{})
	for name, fn := range map[string]any{
		crewlet.ActivityBeginTurn:      world.BeginTurn,
		crewlet.ActivityModelRound:     world.ModelRound,
		crewlet.ActivityFinishTurn:     world.FinishTurn,
		crewlet.ActivityResolveWait:    world.ResolveWait,
		crewlet.ActivityAcquireProfile: world.AcquireProfile,
		crewlet.ActivityReleaseProfile: world.ReleaseProfile,
	} {
		shared.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	host.RegisterActivityWithOptions(world.ToolCall, activity.RegisterOptions{Name: crewlet.ActivityToolCall})
	for _, w := range []worker.Worker{shared, host} {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	return queue, hostQueue
}
