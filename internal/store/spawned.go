package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// SpawnedSeat is a seat spawned from its role's pool.
type SpawnedSeat struct {
	Handle    string
	Role      string
	SpawnedBy string
	SpawnedAt time.Time
}

// SpawnSeat creates a seat of role named ROLE-xxxxxxxxxxxx (48 random
// bits, config.SpawnSuffixBytes; a reaped seat's name is not reused), unless max live seats
// of the role exist already (ECONFLICT): one transaction holds the role's
// lock, so spawns from any number of processes never pass max. taken says
// whether a handle is in use otherwise (a seat of the org file).
func (s *Store) SpawnSeat(ctx context.Context, role, by string, max int, taken func(string) bool) (SpawnedSeat, error) {
	var seat SpawnedSeat
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('crewlet.spawn:' || $1))`, role); err != nil {
			return err
		}
		var live int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM spawned_seats WHERE role = $1 AND reaped_at IS NULL`, role).Scan(&live); err != nil {
			return err
		}
		if live >= max {
			return crewlet.Errorf(crewlet.ECONFLICT, "the pool of role %s is full: %d of %d spawned seats live; wait for one to be reaped, or raise pools.max_seats", role, live, max)
		}
		for range 8 {
			var b [config.SpawnSuffixBytes]byte
			_, _ = rand.Read(b[:])
			handle := role + "-" + hex.EncodeToString(b[:])
			if taken(handle) {
				continue
			}
			err := tx.QueryRow(ctx, `
				INSERT INTO spawned_seats (handle, role, spawned_by) VALUES ($1, $2, $3)
				ON CONFLICT (handle) DO NOTHING RETURNING spawned_at`, handle, role, by).Scan(&seat.SpawnedAt)
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			seat.Handle, seat.Role, seat.SpawnedBy = handle, role, by
			return nil
		}
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "no free seat name of role %s after 8 tries; spawn again", role)
	})
	if err != nil {
		var refused *crewlet.Error
		if errors.As(err, &refused) {
			return SpawnedSeat{}, err
		}
		return SpawnedSeat{}, fmt.Errorf("spawn a seat of %s: %w", role, schemaMissing(err))
	}
	return seat, nil
}

// SpawnedVersion is a number that rises with every spawn and reap: a
// process reads it each beat to see whether the spawned seats changed.
func (s *Store) SpawnedVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM spawned_seats`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read spawned seats version: %w", schemaMissing(err))
	}
	return v, nil
}

// SpawnedSeats lists the live spawned seats, oldest first.
func (s *Store) SpawnedSeats(ctx context.Context) ([]SpawnedSeat, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT handle, role, spawned_by, spawned_at FROM spawned_seats WHERE reaped_at IS NULL ORDER BY spawned_at, handle`)
	if err != nil {
		return nil, fmt.Errorf("list spawned seats: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpawnedSeat, error) {
		var p SpawnedSeat
		err := r.Scan(&p.Handle, &p.Role, &p.SpawnedBy, &p.SpawnedAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list spawned seats: %w", err)
	}
	return out, nil
}

// ReapSeat marks a live spawned seat reaped; it reports false when it was
// not live.
func (s *Store) ReapSeat(ctx context.Context, handle string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE spawned_seats SET reaped_at = now(), version = nextval('spawned_seats_version')
		WHERE handle = $1 AND reaped_at IS NULL`, handle)
	if err != nil {
		return false, fmt.Errorf("reap seat %s: %w", handle, schemaMissing(err))
	}
	return tag.RowsAffected() == 1, nil
}

// UnreapSeat makes a seat reaped a moment ago live again: mail reached it
// while it was reaped.
func (s *Store) UnreapSeat(ctx context.Context, handle string) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE spawned_seats SET reaped_at = NULL, version = nextval('spawned_seats_version')
		WHERE handle = $1 AND reaped_at IS NOT NULL`, handle)
	if err != nil {
		return fmt.Errorf("unreap seat %s: %w", handle, schemaMissing(err))
	}
	return nil
}

// SpawnedActivity is what the reaper needs to know of a live spawned seat.
type SpawnedActivity struct {
	Handle string
	Role   string
	// IdleFor is how long since it was spawned or last ran a turn,
	// whichever is later, by the database's clock.
	IdleFor time.Duration
	// OpenTickets counts the open tickets it serves or opened.
	OpenTickets int
}

// SpawnedActivities reads, for every live spawned seat, how long it has
// been idle and how many open tickets it serves or opened.
func (s *Store) SpawnedActivities(ctx context.Context) ([]SpawnedActivity, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT s.handle, s.role,
		       extract(epoch FROM now() - greatest(s.spawned_at,
		           coalesce((SELECT max(coalesce(t.finished_at, now())) FROM turns t WHERE t.seat = s.handle), s.spawned_at))),
		       (SELECT count(*) FROM tickets k
		        WHERE (k.to_handle = s.handle OR k.from_handle = s.handle) AND k.phase IN ('pending', 'asking'))
		FROM spawned_seats s WHERE s.reaped_at IS NULL ORDER BY s.handle`)
	if err != nil {
		return nil, fmt.Errorf("read spawned seats' activity: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpawnedActivity, error) {
		var a SpawnedActivity
		var idle float64
		err := r.Scan(&a.Handle, &a.Role, &idle, &a.OpenTickets)
		a.IdleFor = time.Duration(idle * float64(time.Second))
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read spawned seats' activity: %w", err)
	}
	return out, nil
}
