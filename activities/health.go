package activities

import (
	"context"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/health"
)

// Health is the health duty's activity.
type Health struct {
	Monitor *health.Monitor
}

// Health runs one pass of the seat health monitor.
func (a *Health) Health(ctx context.Context) (crewlet.HealthOutput, error) {
	return a.Monitor.Pass(ctx)
}
