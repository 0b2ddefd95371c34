package activities

import (
	"context"
	"log/slog"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/views"
)

// Rebalance is the rebalance duty's activity.
type Rebalance struct {
	Store      *store.Store
	Org        config.Source
	Seats      *seatclient.Client
	LiveWithin time.Duration
	MaxMoves   int
	Log        *slog.Logger
}

// Rebalance plans at most MaxMoves moves off nodes above their share and
// sends each seat a move signal; the seat finishes its turn, releases, and
// places itself again. It logs seats_unplaceable for groups no node matches.
func (a *Rebalance) Rebalance(ctx context.Context) (crewlet.RebalanceOutput, error) {
	nodes, err := a.Store.Nodes(ctx, a.LiveWithin, false)
	if err != nil {
		return crewlet.RebalanceOutput{}, err
	}
	hosts, _, err := a.Store.SeatHosts(ctx)
	if err != nil {
		return crewlet.RebalanceOutput{}, err
	}
	snap := views.Placement(a.Org.Now(), nodes, hosts)
	out := crewlet.RebalanceOutput{Unplaceable: snap.Unplaceable()}
	if len(out.Unplaceable) > 0 {
		a.Log.Warn("seats_unplaceable", "seats", out.Unplaceable)
	}
	for _, m := range snap.Plan(a.MaxMoves) {
		err := a.Seats.Move(ctx, m.Handle, crewlet.MoveRequest{ExcludeNode: m.From, Reason: "rebalance", By: "rebalance"})
		if err != nil {
			a.Log.Warn("rebalance_move_failed", "seat", m.Handle, "from", m.From, "error", err)
			continue
		}
		out.Moves = append(out.Moves, crewlet.SeatMove{Handle: m.Handle, From: m.From})
	}
	if len(out.Moves) > 0 {
		a.Log.Info("rebalance_pass", "moves", out.Moves)
	}
	return out, nil
}
