package activities

import (
	"context"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/reconcile"
)

// Reconcile is the reconcile duty's activity.
type Reconcile struct {
	// Org is the org the node runs; each pass reconciles the snapshot it
	// reads at its start.
	Org        config.Source
	Reconciler *reconcile.Reconciler
	// NodeID is the node the activity runs on: its own earlier
	// incarnations do not hold back the judgement of absence.
	NodeID string
}

// Reconcile runs one reconcile pass (reconcile.Reconciler.Pass) and returns
// its report.
func (a *Reconcile) Reconcile(ctx context.Context) (crewlet.ReconcileReport, error) {
	return a.Reconciler.Pass(ctx, a.Org.Now(), a.NodeID)
}
