package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// How EvalRun replays its turns: each turn one EvalTurn activity that
// heartbeats every few seconds, so a turn whose worker died is taken up by
// another within EvalHeartbeat; a turn failing for reasons the activity
// cannot name (Postgres, a provider down) is tried EvalTurnAttempts times.
const (
	EvalHeartbeat    = 10 * time.Second
	EvalTurnAttempts = 5
	// evalTurnTimeout bounds one turn's replay, every round and judge.
	evalTurnTimeout = 15 * time.Minute
	// evalMaxConcurrency is the most replays a run keeps going
	// (wire.MaxEvalConcurrency, which the API holds a request to).
	evalMaxConcurrency = 32
)

// Statuses EvalRun ends a run with (wire.EvalDone, wire.EvalBudgetExhausted)
// and EvalTurn's refusal (wire.EvalTurnRefused); the workflows never
// import wire.
const (
	evalDone            = "done"
	evalBudgetExhausted = "budget_exhausted"
	evalTurnRefused     = "refused"
)

// EvalRun replays every pending turn of an eval run with the run's change
// and scores each (docs/architecture.md, "Replay"), at most the run's
// concurrency at once. Each turn's result is a row keyed on (run, turn),
// written once with its charges: a turn retried, or replayed again by the
// run resumed after its worker died, is skipped by the activity once its
// row is written. A turn refused because evals.budget is spent stops the
// run: no more turns start, those running finish, and the rest are marked
// refused. It returns the run's status.
func EvalRun(ctx workflow.Context, in crewlet.EvalRunInput) (string, error) {
	local := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute},
	})
	var plan crewlet.EvalPlan
	if err := workflow.ExecuteActivity(local, crewlet.ActivityEvalPlan, in).Get(ctx, &plan); err != nil {
		return "", err
	}
	turnCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: evalTurnTimeout, HeartbeatTimeout: EvalHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second, MaximumAttempts: EvalTurnAttempts},
	})
	limit := min(max(plan.Concurrency, 1), evalMaxConcurrency)
	sel := workflow.NewSelector(ctx)
	next, running, exhausted := 0, 0, false
	for {
		for !exhausted && running < limit && next < len(plan.Turns) {
			turn := plan.Turns[next]
			next++
			running++
			f := workflow.ExecuteActivity(turnCtx, crewlet.ActivityEvalTurn, crewlet.EvalTurnInput{Run: in.Run, Turn: turn})
			sel.AddFuture(f, func(f workflow.Future) {
				running--
				var out crewlet.EvalTurnOutput
				if err := f.Get(ctx, &out); err != nil {
					// Left pending: EvalFinish marks it failed.
					workflow.GetLogger(ctx).Warn("eval_turn_failed", "run", in.Run, "turn", turn, "error", err)
					return
				}
				if out.Status == evalTurnRefused {
					exhausted = true
				}
			})
		}
		if running == 0 {
			break
		}
		sel.Select(ctx)
	}
	status := evalDone
	if exhausted {
		status = evalBudgetExhausted
	}
	if err := workflow.ExecuteActivity(local, crewlet.ActivityEvalFinish, crewlet.EvalFinishInput{Run: in.Run, Status: status}).Get(ctx, nil); err != nil {
		return "", err
	}
	return status, nil
}
