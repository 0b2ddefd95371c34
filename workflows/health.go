package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Health is one pass of the health duty, started by its Temporal Schedule:
// it classifies every agent seat and records, logs and posts the
// transitions (docs/architecture.md, "Seat health"). A pass that fails is
// not retried: the next tick is as good, and sooner than a back-off.
func Health(ctx workflow.Context) (crewlet.HealthOutput, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var out crewlet.HealthOutput
	err := workflow.ExecuteActivity(ctx, crewlet.ActivityHealth).Get(ctx, &out)
	return out, err
}
