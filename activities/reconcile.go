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
// A pass triggered by a config apply may run on a node that has not taken
// the revision yet: the node catches up first.
func (a *Reconcile) Reconcile(ctx context.Context) (crewlet.ReconcileReport, error) {
	if live, ok := a.Org.(*config.Live); ok {
		if err := live.CatchUp(ctx); err != nil {
			return crewlet.ReconcileReport{}, err
		}
	}
	return a.Reconciler.Pass(ctx, a.Org.Now(), a.NodeID)
}
