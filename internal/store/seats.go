package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

// SeatRow is a seat's row in Postgres.
type SeatRow struct {
	Handle     string     `json:"handle"`
	Role       string     `json:"role"`
	Kind       string     `json:"kind"`
	Epoch      int64      `json:"epoch"`
	Node       string     `json:"node"`
	AcquiredAt *time.Time `json:"acquired_at"`
	Status     string     `json:"status"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// EnsureSeat creates the seat's row, or refreshes its role and kind. It never
// touches the epoch, node or acquired_at.
func (s *Store) EnsureSeat(ctx context.Context, handle, role string, kind crewlet.SeatKind) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO seats (handle, role, kind) VALUES ($1, $2, $3)
		ON CONFLICT (handle) DO UPDATE SET role = EXCLUDED.role, kind = EXCLUDED.kind
		WHERE seats.role IS DISTINCT FROM EXCLUDED.role OR seats.kind IS DISTINCT FROM EXCLUDED.kind`,
		handle, role, string(kind))
	if err != nil {
		return fmt.Errorf("ensure seat %s: %w", handle, schemaMissing(err))
	}
	return nil
}

// Attach starts a tenure: it bumps the seat's epoch, records the node (and
// its stable id, for stickiness) and stamps acquired_at, in one statement. It
// is the only writer of acquired_at.
func (s *Store) Attach(ctx context.Context, handle, node, nodeID string) (SeatRow, error) {
	row, err := scanSeat(s.pool.QueryRow(ctx, `
		UPDATE seats SET epoch = epoch + 1, node = $2, preferred_node = $3, acquired_at = now(), status = 'active', updated_at = now()
		WHERE handle = $1
		RETURNING `+seatColumns, handle, node, nodeID))
	if errors.Is(err, pgx.ErrNoRows) {
		return SeatRow{}, crewlet.Errorf(crewlet.ENOTFOUND, "seat %q has no row; it is not in the org", handle)
	}
	if err != nil {
		return SeatRow{}, fmt.Errorf("attach seat %s: %w", handle, schemaMissing(err))
	}
	return row, nil
}

// SetStatus records the seat's lifecycle status, only if epoch is still the
// seat's current epoch; a stale tenure changes nothing and gets EFENCED.
func (s *Store) SetStatus(ctx context.Context, handle string, epoch int64, status string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE seats SET status = $3, updated_at = now() WHERE handle = $1 AND epoch = $2`,
		handle, epoch, status)
	if err != nil {
		return fmt.Errorf("set seat %s status: %w", handle, schemaMissing(err))
	}
	if tag.RowsAffected() == 0 {
		return fenced(handle, epoch)
	}
	return nil
}

// CheckEpoch returns EFENCED unless epoch is the seat's current epoch.
func (s *Store) CheckEpoch(ctx context.Context, handle string, epoch int64) error {
	var current int64
	err := s.pool.QueryRow(ctx, `SELECT epoch FROM seats WHERE handle = $1`, handle).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		return fenced(handle, epoch)
	}
	if err != nil {
		return fmt.Errorf("check seat %s epoch: %w", handle, schemaMissing(err))
	}
	if current != epoch {
		return fenced(handle, epoch)
	}
	return nil
}

func fenced(handle string, epoch int64) error {
	return crewlet.Errorf(crewlet.EFENCED, "seat %s: epoch %d is no longer current", handle, epoch)
}

// Seat returns one seat's row.
func (s *Store) Seat(ctx context.Context, handle string) (SeatRow, error) {
	row, err := scanSeat(s.pool.QueryRow(ctx, `SELECT `+seatColumns+` FROM seats WHERE handle = $1`, handle))
	if errors.Is(err, pgx.ErrNoRows) {
		return SeatRow{}, crewlet.Errorf(crewlet.ENOTFOUND, "seat %q has no row yet", handle)
	}
	if err != nil {
		return SeatRow{}, fmt.Errorf("read seat %s: %w", handle, schemaMissing(err))
	}
	return row, nil
}

// Seats returns every seat row, keyed by handle.
func (s *Store) Seats(ctx context.Context) (map[string]SeatRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+seatColumns+` FROM seats`)
	if err != nil {
		return nil, fmt.Errorf("list seats: %w", schemaMissing(err))
	}
	out := map[string]SeatRow{}
	for rows.Next() {
		row, err := scanSeat(rows)
		if err != nil {
			return nil, fmt.Errorf("list seats: %w", err)
		}
		out[row.Handle] = row
	}
	return out, rows.Err()
}

const seatColumns = `handle, role, kind, epoch, node, acquired_at, status, updated_at`

func scanSeat(r pgx.Row) (SeatRow, error) {
	var row SeatRow
	err := r.Scan(&row.Handle, &row.Role, &row.Kind, &row.Epoch, &row.Node, &row.AcquiredAt, &row.Status, &row.UpdatedAt)
	return row, err
}
