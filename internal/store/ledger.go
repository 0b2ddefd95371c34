package store

import (
	"context"
	"fmt"
)

// LedgerRecorded returns which of the trigger keys have a completion ledger
// row for the seat.
func (s *Store) LedgerRecorded(ctx context.Context, seat string, triggerKeys []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT trigger_key FROM completion_ledger WHERE seat = $1 AND trigger_key = ANY($2)`, seat, triggerKeys)
	if err != nil {
		return nil, fmt.Errorf("read completion ledger for %s: %w", seat, schemaMissing(err))
	}
	defer rows.Close()
	done := map[string]bool{}
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, fmt.Errorf("read completion ledger for %s: %w", seat, err)
		}
		done[key] = true
	}
	return done, rows.Err()
}

// LedgerRecord records that the turn turnID (work key workKey) finished the
// triggers. It is keyed on the work, so recording twice records once.
func (s *Store) LedgerRecord(ctx context.Context, seat, workKey, turnID string, triggerKeys []string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO completion_ledger (seat, trigger_key, work_key, turn_id)
		SELECT $1, k, $2, $3 FROM unnest($4::text[]) AS k
		ON CONFLICT (seat, trigger_key) DO NOTHING`, seat, workKey, turnID, triggerKeys)
	if err != nil {
		return fmt.Errorf("record completion ledger for %s: %w", seat, schemaMissing(err))
	}
	return nil
}

// LedgerCount returns how many ledger rows the seat has.
func (s *Store) LedgerCount(ctx context.Context, seat string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM completion_ledger WHERE seat = $1`, seat).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count completion ledger for %s: %w", seat, schemaMissing(err))
	}
	return n, nil
}

// EnsureMailbox records a seat's mailbox in the registry and clears any
// "missing since" mark, since the seat is in the org again.
func (s *Store) EnsureMailbox(ctx context.Context, seat, stream, group string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO mailboxes (seat, stream, consumer_group) VALUES ($1, $2, $3)
		ON CONFLICT (seat) DO UPDATE SET stream = EXCLUDED.stream, consumer_group = EXCLUDED.consumer_group, missing_since = NULL`,
		seat, stream, group)
	if err != nil {
		return fmt.Errorf("register mailbox for %s: %w", seat, schemaMissing(err))
	}
	return nil
}
