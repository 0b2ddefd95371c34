package activities

import (
	"context"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/reconcile"
	"github.com/crewlet/crewlet/internal/spawn"
)

// Reconcile is the reconcile duty's activity.
type Reconcile struct {
	// Org is the org the node runs; each pass reconciles the snapshot it
	// reads at its start.
	Org        config.Source
	Reconciler *reconcile.Reconciler
	// Spawn reaps the spawned seats idle with nothing open, before each
	// pass; nil reaps none.
	Spawn *spawn.Service
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
	var reaped []string
	if a.Spawn != nil {
		var err error
		if reaped, err = a.Spawn.Reap(ctx); err != nil {
			return crewlet.ReconcileReport{}, err
		}
	}
	report, err := a.Reconciler.Pass(ctx, a.Org.Now(), a.NodeID)
	report.Reaped = reaped
	return report, err
}
