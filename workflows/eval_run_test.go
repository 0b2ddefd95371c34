package workflows

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/crewlet/crewlet"
)

// evalWorld is what an EvalRun's activities see: a run's result rows,
// some scored already, and an eval budget that refuses once spent.
type evalWorld struct {
	mu sync.Mutex
	// status is each turn's row: pending until scored or refused.
	status      map[string]string
	order       []string
	concurrency int
	// budget is how many turns may still be replayed; -1 is no cap.
	budget int
	// replays counts each turn's replays, running the most at once.
	replays             map[string]int
	running, maxRunning int
	finished            []crewlet.EvalFinishInput
}

func newEvalWorld(turns, scored, concurrency int) *evalWorld {
	w := &evalWorld{status: map[string]string{}, replays: map[string]int{}, concurrency: concurrency, budget: -1}
	for i := range turns {
		id := fmt.Sprintf("turn/s01/k%03d", i)
		w.order = append(w.order, id)
		w.status[id] = "pending"
		if i < scored {
			w.status[id] = "scored"
		}
	}
	return w
}

func (w *evalWorld) plan(_ context.Context, _ crewlet.EvalRunInput) (crewlet.EvalPlan, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := crewlet.EvalPlan{Concurrency: w.concurrency}
	for _, id := range w.order {
		if w.status[id] == "pending" {
			p.Turns = append(p.Turns, id)
		}
	}
	return p, nil
}

func (w *evalWorld) turn(_ context.Context, in crewlet.EvalTurnInput) (crewlet.EvalTurnOutput, error) {
	w.mu.Lock()
	if w.status[in.Turn] != "pending" {
		w.mu.Unlock()
		return crewlet.EvalTurnOutput{Status: crewlet.EvalTurnAlready}, nil
	}
	w.running++
	w.maxRunning = max(w.maxRunning, w.running)
	w.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running--
	w.replays[in.Turn]++
	if w.budget == 0 {
		w.status[in.Turn] = "refused"
		return crewlet.EvalTurnOutput{Status: evalTurnRefused}, nil
	}
	if w.budget > 0 {
		w.budget--
	}
	w.status[in.Turn] = "scored"
	return crewlet.EvalTurnOutput{Status: "scored"}, nil
}

func (w *evalWorld) finish(_ context.Context, in crewlet.EvalFinishInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.finished = append(w.finished, in)
	for id, s := range w.status {
		if s == "pending" && in.Status == evalBudgetExhausted {
			w.status[id] = "refused"
		}
	}
	return nil
}

func (w *evalWorld) run(t *testing.T) string {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(EvalRun)
	env.RegisterActivityWithOptions(w.plan, activity.RegisterOptions{Name: crewlet.ActivityEvalPlan})
	env.RegisterActivityWithOptions(w.turn, activity.RegisterOptions{Name: crewlet.ActivityEvalTurn})
	env.RegisterActivityWithOptions(w.finish, activity.RegisterOptions{Name: crewlet.ActivityEvalFinish})
	env.ExecuteWorkflow(EvalRun, crewlet.EvalRunInput{Run: "r1"})
	if !env.IsWorkflowCompleted() {
		t.Fatal("EvalRun did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := env.GetWorkflowResult(&status); err != nil {
		t.Fatal(err)
	}
	if len(w.finished) != 1 || w.finished[0].Status != status {
		t.Fatalf("EvalFinish calls = %+v, want one with %s", w.finished, status)
	}
	return status
}

func (w *evalWorld) count(status string) int {
	n := 0
	for _, s := range w.status {
		if s == status {
			n++
		}
	}
	return n
}

func TestEvalRunKeepsAtMostItsConcurrencyGoing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ concurrency, want int }{{8, 8}, {3, 3}, {0, 1}, {100, evalMaxConcurrency}} {
		t.Run(fmt.Sprint(c.concurrency), func(t *testing.T) {
			w := newEvalWorld(60, 0, c.concurrency)
			if got := w.run(t); got != evalDone {
				t.Fatalf("status = %s, want %s", got, evalDone)
			}
			if w.maxRunning != c.want {
				t.Errorf("at most %d replays ran at once, want %d", w.maxRunning, c.want)
			}
			if n := w.count("scored"); n != 60 {
				t.Errorf("%d turns scored, want 60", n)
			}
		})
	}
}

func TestEvalRunReplaysOnlyTheTurnsNotScoredYet(t *testing.T) {
	t.Parallel()
	w := newEvalWorld(20, 12, 4)
	w.run(t)
	for i, id := range w.order {
		want := 1
		if i < 12 {
			want = 0
		}
		if w.replays[id] != want {
			t.Errorf("%s replayed %d times, want %d", id, w.replays[id], want)
		}
	}
}

func TestEvalRunStopsWhenTheBudgetIsSpent(t *testing.T) {
	t.Parallel()
	w := newEvalWorld(40, 0, 4)
	w.budget = 10
	if got := w.run(t); got != evalBudgetExhausted {
		t.Fatalf("status = %s, want %s", got, evalBudgetExhausted)
	}
	if n := w.count("scored"); n != 10 {
		t.Errorf("%d turns scored, want the 10 the budget allowed", n)
	}
	replayed := 0
	for _, n := range w.replays {
		replayed += n
	}
	// Once a refusal comes back no turn starts; those already started
	// (at most the concurrency) finish, refused too.
	if replayed > 10+4 {
		t.Errorf("%d replays ran, want at most 14: no turn starts after a refusal", replayed)
	}
	if n := w.count("refused"); n != 30 {
		t.Errorf("%d turns refused, want 30", n)
	}
}
