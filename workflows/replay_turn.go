package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// ReplayTurnTimeout bounds a replay handed to a worker node, waiting for
// one included; the API's answer waits no longer.
const ReplayTurnTimeout = 10 * time.Minute

// ReplayTurn runs one replay with live_read_only on a worker node, where
// the seat's MCP servers may start as its tenure starts them
// (docs/architecture.md, "Replay"), and returns its report. The replay is
// tried once: a second try would call the model and the live tools again
// and charge evals.budget twice, so a replay whose worker died fails and
// the person asks again.
func ReplayTurn(ctx workflow.Context, in crewlet.ReplayTurnInput) (crewlet.ReplayTurnOutput, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ScheduleToCloseTimeout: ReplayTurnTimeout, HeartbeatTimeout: EvalHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var out crewlet.ReplayTurnOutput
	err := workflow.ExecuteActivity(ctx, crewlet.ActivityReplayTurn, in).Get(ctx, &out)
	return out, err
}
