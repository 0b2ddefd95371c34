package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Reconcile is one pass of the reconcile duty, started by its Temporal
// Schedule (overlap SKIP) or by a trigger on config apply: seats started,
// stopped and repaired, rows and mailboxes created, idle seats nudged. A
// failed pass is not retried: the next one comes within
// nodes.reconcile_interval and reads the world afresh.
func Reconcile(ctx workflow.Context) (crewlet.ReconcileReport, error) {
	return dutyPass[crewlet.ReconcileReport](ctx, crewlet.ActivityReconcile, 5*time.Minute, 1)
}
