package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Maintenance is one pass of the maintenance duty, started by its Temporal
// Schedule: mailbox retirement after the grace period, ledger and mailbox
// retention.
func Maintenance(ctx workflow.Context) (crewlet.MaintenanceOutput, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var out crewlet.MaintenanceOutput
	err := workflow.ExecuteActivity(ctx, crewlet.ActivityMaintenance).Get(ctx, &out)
	return out, err
}
