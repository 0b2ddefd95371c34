package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	_, err := s.pool.Exec(ctx, ledgerRecordSQL, seat, workKey, turnID, triggerKeys)
	if err != nil {
		return fmt.Errorf("record completion ledger for %s: %w", seat, schemaMissing(err))
	}
	return nil
}

// ledgerRecordSQL is LedgerRecord's statement, also sent by CloseTurn.
const ledgerRecordSQL = `
	INSERT INTO completion_ledger (seat, trigger_key, work_key, turn_id)
	SELECT $1, k, $2, $3 FROM unnest($4::text[]) AS k
	ON CONFLICT (seat, trigger_key) DO NOTHING`

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

// TrimLedger deletes ledger rows older than age and returns how many. Seven
// days outlives any redelivery, so a completion is never forgotten while its
// trigger could still come back.
func (s *Store) TrimLedger(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM completion_ledger WHERE recorded_at < now() - make_interval(secs => $1)`, age.Seconds())
	if err != nil {
		return 0, fmt.Errorf("trim completion ledger: %w", schemaMissing(err))
	}
	return tag.RowsAffected(), nil
}

// SweepMailboxes brings the registry in line with the org's seats: an
// absence is stamped the first time a seat is seen missing, and cleared when
// it is back. It returns the seats newly stamped absent and newly returned.
func (s *Store) SweepMailboxes(ctx context.Context, present []string) (absent, returned []string, err error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE mailboxes SET missing_since = now()
		WHERE missing_since IS NULL AND NOT (seat = ANY($1)) RETURNING seat`, present)
	if err != nil {
		return nil, nil, fmt.Errorf("sweep mailboxes: %w", schemaMissing(err))
	}
	if absent, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, nil, fmt.Errorf("sweep mailboxes: %w", err)
	}
	rows, err = s.pool.Query(ctx, `
		UPDATE mailboxes SET missing_since = NULL
		WHERE missing_since IS NOT NULL AND seat = ANY($1) RETURNING seat`, present)
	if err != nil {
		return nil, nil, fmt.Errorf("sweep mailboxes: %w", err)
	}
	if returned, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, nil, fmt.Errorf("sweep mailboxes: %w", err)
	}
	return absent, returned, nil
}

// ExpiredMailboxes lists seats whose absence is older than grace.
func (s *Store) ExpiredMailboxes(ctx context.Context, grace time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT seat FROM mailboxes WHERE missing_since < now() - make_interval(secs => $1) ORDER BY seat`, grace.Seconds())
	if err != nil {
		return nil, fmt.Errorf("list expired mailboxes: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list expired mailboxes: %w", err)
	}
	return out, nil
}

// RetireMailbox deletes a removed seat's mailbox if its absence is still
// older than grace: the registry row is locked (compare-and-set on its
// absence), deleteStream runs, and the row goes. A seat added back meanwhile
// cleared the absence, so nothing happens; one added back during the delete
// waits on the row lock and then starts with an empty mailbox.
func (s *Store) RetireMailbox(ctx context.Context, seat string, grace time.Duration, deleteStream func(context.Context) error) (bool, error) {
	retired := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var since time.Time
		err := tx.QueryRow(ctx, `
			SELECT missing_since FROM mailboxes
			WHERE seat = $1 AND missing_since < now() - make_interval(secs => $2) FOR UPDATE`, seat, grace.Seconds()).Scan(&since)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := deleteStream(ctx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM mailboxes WHERE seat = $1 AND missing_since = $2`, seat, since); err != nil {
			return err
		}
		retired = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("retire mailbox of %s: %w", seat, schemaMissing(err))
	}
	return retired, nil
}

// LedgerRows returns a seat's completion ledger: trigger key → work key.
func (s *Store) LedgerRows(ctx context.Context, seat string) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT trigger_key, work_key FROM completion_ledger WHERE seat = $1`, seat)
	if err != nil {
		return nil, fmt.Errorf("read completion ledger for %s: %w", seat, schemaMissing(err))
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, w string
		if err := rows.Scan(&k, &w); err != nil {
			return nil, err
		}
		out[k] = w
	}
	return out, rows.Err()
}

// MailboxRegistry returns whether the seat's mailbox is registered and, if
// the seat was seen missing from the org, since when.
func (s *Store) MailboxRegistry(ctx context.Context, seat string) (found bool, missingSince *time.Time, err error) {
	err = s.pool.QueryRow(ctx, `SELECT missing_since FROM mailboxes WHERE seat = $1`, seat).Scan(&missingSince)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("read mailbox registry for %s: %w", seat, schemaMissing(err))
	}
	return true, missingSince, nil
}
