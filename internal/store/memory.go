package store

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Episode is one turn as the seat remembers it.
type Episode struct {
	Seat    string
	WorkKey string // empty: an unkeyed turn, never deduplicated
	TurnID  string
	Summary string
}

// RecordEpisode remembers a turn once per (seat, work key), in one statement.
func (s *Store) RecordEpisode(ctx context.Context, e Episode) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO episodes (seat, work_key, turn_id, summary) VALUES ($1, NULLIF($2, ''), $3, $4)
		ON CONFLICT (seat, work_key) DO NOTHING`, e.Seat, e.WorkKey, e.TurnID, e.Summary)
	if err != nil {
		return fmt.Errorf("record episode of %s: %w", e.Seat, schemaMissing(err))
	}
	return nil
}

// CountInteraction counts one interaction of the seat with counterparty for
// the work, in one statement: the same work key counted again adds nothing.
func (s *Store) CountInteraction(ctx context.Context, seat, counterparty, workKey string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO counterparty_profiles AS cp (seat, counterparty, interaction_count, last_work_key)
		VALUES ($1, $2, 1, NULLIF($3, ''))
		ON CONFLICT (seat, counterparty) DO UPDATE SET
		    interaction_count = cp.interaction_count +
		        CASE WHEN EXCLUDED.last_work_key IS NOT NULL AND cp.last_work_key = EXCLUDED.last_work_key THEN 0 ELSE 1 END,
		    last_work_key = EXCLUDED.last_work_key,
		    last_seen = now()`, seat, counterparty, workKey)
	if err != nil {
		return fmt.Errorf("count interaction of %s with %s: %w", seat, counterparty, schemaMissing(err))
	}
	return nil
}

// WriteDiary appends a diary entry; a byte-identical entry collapses into
// the one already there.
func (s *Store) WriteDiary(ctx context.Context, seat, content string) error {
	sum := sha256.Sum256([]byte(content))
	_, err := s.pool.Exec(ctx, `
		INSERT INTO agent_diary (seat, content, content_hash) VALUES ($1, $2, $3)
		ON CONFLICT (seat, content_hash) DO NOTHING`, seat, content, sum[:])
	if err != nil {
		return fmt.Errorf("write diary of %s: %w", seat, schemaMissing(err))
	}
	return nil
}

// MemoryCounts is how much a seat remembers, for tests and inspection.
type MemoryCounts struct {
	Episodes     int
	Diary        int
	Interactions map[string]int64
}

// Memory returns counts of a seat's memory rows.
func (s *Store) Memory(ctx context.Context, seat string) (MemoryCounts, error) {
	m := MemoryCounts{Interactions: map[string]int64{}}
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM episodes WHERE seat = $1), (SELECT count(*) FROM agent_diary WHERE seat = $1)`,
		seat).Scan(&m.Episodes, &m.Diary)
	if err != nil {
		return m, fmt.Errorf("read memory of %s: %w", seat, schemaMissing(err))
	}
	rows, err := s.pool.Query(ctx, `SELECT counterparty, interaction_count FROM counterparty_profiles WHERE seat = $1`, seat)
	if err != nil {
		return m, fmt.Errorf("read memory of %s: %w", seat, err)
	}
	defer rows.Close()
	for rows.Next() {
		var who string
		var n int64
		if err := rows.Scan(&who, &n); err != nil {
			return m, err
		}
		m.Interactions[who] = n
	}
	return m, rows.Err()
}

// SeatEvent is one row of a seat's event history.
type SeatEvent struct {
	ID         int64          `json:"id"`
	Seat       string         `json:"seat"`
	Kind       string         `json:"kind"`
	EventID    string         `json:"event_id,omitempty"`
	Detail     map[string]any `json:"detail,omitempty"`
	RecordedAt time.Time      `json:"recorded_at"`
}

// RecordSeatEvent appends to a seat's event history.
func (s *Store) RecordSeatEvent(ctx context.Context, seat, kind, eventID string, detail map[string]any) error {
	d, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO seat_events (seat, kind, event_id, detail) VALUES ($1, $2, NULLIF($3, ''), $4)`,
		seat, kind, eventID, d)
	if err != nil {
		return fmt.Errorf("record %s event of %s: %w", kind, seat, schemaMissing(err))
	}
	return nil
}

// SeatEvents returns a seat's newest events, newest first.
func (s *Store) SeatEvents(ctx context.Context, seat string, limit int) ([]SeatEvent, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, seat, kind, COALESCE(event_id, ''), detail, recorded_at FROM seat_events
		WHERE seat = $1 ORDER BY id DESC LIMIT $2`, seat, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", seat, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SeatEvent, error) {
		var e SeatEvent
		err := r.Scan(&e.ID, &e.Seat, &e.Kind, &e.EventID, &e.Detail, &e.RecordedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", seat, err)
	}
	return out, nil
}
