package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Mailboxes returns every seat in the mailbox registry, true for those
// stamped missing from the org.
func (s *Store) Mailboxes(ctx context.Context) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT seat, missing_since IS NOT NULL FROM mailboxes`)
	if err != nil {
		return nil, fmt.Errorf("list mailboxes: %w", schemaMissing(err))
	}
	out := map[string]bool{}
	var seat string
	var missing bool
	if _, err := pgx.ForEachRow(rows, []any{&seat, &missing}, func() error {
		out[seat] = missing
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list mailboxes: %w", err)
	}
	return out, nil
}

// QuietDelegator is a seat waiting on tickets it opened, with no turn
// running. QuietSince is when it last did something other than answer a
// nudge: the end of its last turn that had a trigger other than a nudge, or
// the opening of its newest open ticket, whichever is later. Now is the
// database's clock.
type QuietDelegator struct {
	Handle      string
	OpenTickets []string
	QuietSince  time.Time
	Now         time.Time
}

// QuietDelegators returns, of handles, the seats that opened tickets still
// open and run no turn now. A turn whose triggers all have event ids
// starting with nudgePrefix answered only nudges, and does not end a quiet
// period: a nudge that moves nothing is not followed by another.
func (s *Store) QuietDelegators(ctx context.Context, handles []string, nudgePrefix string) ([]QuietDelegator, error) {
	rows, err := s.pool.Query(ctx, `
		WITH open AS (
			SELECT from_handle AS seat, array_agg(id ORDER BY created_at, id) AS ids, max(created_at) AS newest
			FROM tickets WHERE from_seat AND from_handle = ANY($1) AND phase IN ('pending', 'asking')
			GROUP BY from_handle)
		SELECT o.seat, o.ids, GREATEST(o.newest, t.finished_at), now()
		FROM open o
		LEFT JOIN LATERAL (
			SELECT finished_at FROM turns
			WHERE seat = o.seat AND finished_at IS NOT NULL
			  AND EXISTS (SELECT 1 FROM jsonb_array_elements(mail) m WHERE NOT starts_with(m->>'event_id', $2))
			ORDER BY started_at DESC LIMIT 1) t ON true
		WHERE (SELECT status FROM turns WHERE seat = o.seat ORDER BY started_at DESC LIMIT 1) IS DISTINCT FROM 'running'
		ORDER BY o.seat`, handles, nudgePrefix)
	if err != nil {
		return nil, fmt.Errorf("list quiet delegators: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QuietDelegator, error) {
		var q QuietDelegator
		err := r.Scan(&q.Handle, &q.OpenTickets, &q.QuietSince, &q.Now)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("list quiet delegators: %w", err)
	}
	return out, nil
}

// SeatEventsRecorded returns which of eventIDs a seat event of kind was
// recorded under.
func (s *Store) SeatEventsRecorded(ctx context.Context, kind string, eventIDs []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT event_id FROM seat_events WHERE kind = $1 AND event_id = ANY($2)`, kind, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("read %s events: %w", kind, schemaMissing(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read %s events: %w", kind, err)
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
