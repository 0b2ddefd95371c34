package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Health is one pass of the health duty, started by its Temporal Schedule:
// it classifies every agent seat and records, logs and posts the
// transitions (docs/architecture.md, "Seat health"). A pass that fails is
// not retried: the next tick is as good, and sooner than a back-off.
func Health(ctx workflow.Context) (crewlet.HealthOutput, error) {
	return dutyPass[crewlet.HealthOutput](ctx, crewlet.ActivityHealth, time.Minute, 1)
}
