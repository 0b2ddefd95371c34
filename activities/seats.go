// Package activities holds crewlet's Temporal activities: small structs
// grouped by what they depend on, registered by name in workers.Register.
package activities

import (
	"context"
	"log/slog"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
)

// Seats holds the seat tenure activities.
type Seats struct {
	Store *store.Store
	// Node is the incarnation of the worker process running the activities.
	Node string
	Log  *slog.Logger
}

// Attach starts a tenure on this node: the epoch is bumped in one statement.
func (a *Seats) Attach(ctx context.Context, in crewlet.AttachInput) (crewlet.AttachOutput, error) {
	row, err := a.Store.Attach(ctx, in.Handle, a.Node)
	if err != nil {
		return crewlet.AttachOutput{}, err
	}
	a.Log.Info("seat_attached", "seat", in.Handle, "epoch", row.Epoch, "node", a.Node)
	return crewlet.AttachOutput{Epoch: row.Epoch, Node: row.Node, AcquiredAt: *row.AcquiredAt}, nil
}

// SetSeatStatus records the seat's lifecycle status, fenced by epoch.
func (a *Seats) SetSeatStatus(ctx context.Context, in crewlet.SeatStatusInput) error {
	return fence(a.Log, in.Handle, in.Epoch, a.Store.SetStatus(ctx, in.Handle, in.Epoch, in.Status))
}

// fence turns a stale-epoch refusal into the non-retryable error the seat
// workflow recognises; other errors pass through and are retried.
func fence(log *slog.Logger, handle string, epoch int64, err error) error {
	if crewlet.ErrorCode(err) != crewlet.EFENCED {
		return err
	}
	log.Warn("seat_fenced", "seat", handle, "epoch", epoch)
	return temporal.NewNonRetryableApplicationError(crewlet.ErrorMessage(err), crewlet.FencedErrorType, nil)
}
