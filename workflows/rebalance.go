package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Rebalance is one pass of the rebalance duty, started by its Temporal
// Schedule: it moves a bounded number of seats off nodes above their fair
// share and reports seats no live node can run.
func Rebalance(ctx workflow.Context) (crewlet.RebalanceOutput, error) {
	return dutyPass[crewlet.RebalanceOutput](ctx, crewlet.ActivityRebalance, time.Minute, 3)
}
