package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Maintenance is one pass of the maintenance duty, started by its Temporal
// Schedule: mailbox retirement after the grace period, ledger and mailbox
// retention.
func Maintenance(ctx workflow.Context) (crewlet.MaintenanceOutput, error) {
	return dutyPass[crewlet.MaintenanceOutput](ctx, crewlet.ActivityMaintenance, 5*time.Minute, 3)
}
