package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// A person's mail and dead letters that no longer fit in Redis live here
// (migrations 0027 and 0028; docs/operations.md, "Redis durability").

// ArchivePersonMail keeps a human seat's entries, as moved out of its
// mailbox, keyed on their stream ids: an entry kept already is left as it
// is, so a move repeated after a crash adds nothing.
func (s *Store) ArchivePersonMail(ctx context.Context, seat string, msgs []crewlet.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	batch := &pgx.Batch{}
	for _, m := range msgs {
		ms, seq := mailbox.SplitID(m.StreamID)
		body, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("archive mail of %s: %w", seat, err)
		}
		batch.Queue(`INSERT INTO person_mail (seat, ms, seq, stream_id, event_id, message)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, seat, int64(ms), int64(seq), m.StreamID, m.EventID, body)
	}
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("archive mail of %s: %w", seat, schemaMissing(err))
	}
	return nil
}

// directSeqBase puts mail archived straight away after any entry Redis
// numbered in the same millisecond (Redis counts up from 0 within one).
const directSeqBase = 1 << 48

// ArchivePersonMailNow keeps msg for its human recipient in Postgres
// instead of Redis, with a stream id of the current millisecond, and
// returns the message as kept. An event kept already returns its row.
func (s *Store) ArchivePersonMailNow(ctx context.Context, msg crewlet.Message) (crewlet.Message, error) {
	ms := time.Now().UnixMilli()
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT nextval('person_mail_direct')`).Scan(&seq); err != nil {
		return msg, fmt.Errorf("archive mail of %s: %w", msg.To, schemaMissing(err))
	}
	msg.StreamID = fmt.Sprintf("%d-%d", ms, directSeqBase+seq)
	body, err := json.Marshal(msg)
	if err != nil {
		return msg, fmt.Errorf("archive mail of %s: %w", msg.To, err)
	}
	var kept []byte
	err = s.pool.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO person_mail (seat, ms, seq, stream_id, event_id, message)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING message)
		SELECT message FROM ins
		UNION ALL SELECT message FROM person_mail WHERE seat = $1 AND event_id = $5
		LIMIT 1`, msg.To, ms, directSeqBase+seq, msg.StreamID, msg.EventID, body).Scan(&kept)
	if err != nil {
		return msg, fmt.Errorf("archive mail of %s: %w", msg.To, schemaMissing(err))
	}
	var out crewlet.Message
	if err := json.Unmarshal(kept, &out); err != nil {
		return msg, fmt.Errorf("archive mail of %s: %w", msg.To, err)
	}
	return out, nil
}

// PersonMail returns the newest n entries kept for a human seat whose
// stream id is before the given one (all, when before is empty), newest
// first.
func (s *Store) PersonMail(ctx context.Context, seat, before string, n int) ([]crewlet.Message, error) {
	ms, seq := maxBound(before)
	rows, err := s.pool.Query(ctx, `
		SELECT message FROM person_mail WHERE seat = $1 AND (ms, seq) < ($2, $3)
		ORDER BY ms DESC, seq DESC LIMIT $4`, seat, ms, seq, n)
	if err != nil {
		return nil, fmt.Errorf("read archived mail of %s: %w", seat, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (crewlet.Message, error) {
		var m crewlet.Message
		var body []byte
		if err := row.Scan(&body); err != nil {
			return m, err
		}
		return m, json.Unmarshal(body, &m)
	})
	if err != nil {
		return nil, fmt.Errorf("read archived mail of %s: %w", seat, err)
	}
	return out, nil
}

// MarkPersonMailRead raises the seat's read mark to the entry streamID: the
// person has read their mail up to it. A mark already past it stays, so a
// page of older mail read later lowers nothing. Retention deletes a
// person's archived mail only at or before the mark.
func (s *Store) MarkPersonMailRead(ctx context.Context, seat, streamID string) error {
	ms, seq := mailbox.SplitID(streamID)
	_, err := s.pool.Exec(ctx, `
		INSERT INTO person_mail_read AS r (seat, ms, seq) VALUES ($1, $2, $3)
		ON CONFLICT (seat) DO UPDATE SET ms = EXCLUDED.ms, seq = EXCLUDED.seq, read_at = now()
		WHERE (r.ms, r.seq) < (EXCLUDED.ms, EXCLUDED.seq)`, seat, int64(ms), int64(seq))
	if err != nil {
		return fmt.Errorf("mark mail of %s read: %w", seat, schemaMissing(err))
	}
	return nil
}

// ArchiveDeadLetters keeps dead letters moved out of the dead-letter
// stream, keyed on their ids: one kept already is left as it is.
func (s *Store) ArchiveDeadLetters(ctx context.Context, dls []mailbox.DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	batch := &pgx.Batch{}
	for _, d := range dls {
		ms, seq := mailbox.SplitID(d.ID)
		body, err := json.Marshal(d.Message)
		if err != nil {
			return fmt.Errorf("archive dead letters: %w", err)
		}
		batch.Queue(`INSERT INTO dead_letters (id, ms, seq, seat, reason, deliveries, stream_id, at, message)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
			d.ID, int64(ms), int64(seq), d.Seat, d.Reason, d.Deliveries, d.StreamID, d.At, body)
	}
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("archive dead letters: %w", schemaMissing(err))
	}
	return nil
}

// ArchivedDeadLetters returns the newest n archived dead letters whose id
// is before the given one (all, when before is empty), newest first.
func (s *Store) ArchivedDeadLetters(ctx context.Context, before string, n int) ([]mailbox.DeadLetter, error) {
	ms, seq := maxBound(before)
	rows, err := s.pool.Query(ctx, `
		SELECT id, seat, reason, deliveries, stream_id, at, message FROM dead_letters
		WHERE (ms, seq) < ($1, $2) ORDER BY ms DESC, seq DESC LIMIT $3`, ms, seq, n)
	if err != nil {
		return nil, fmt.Errorf("read archived dead letters: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("read archived dead letters: %w", err)
	}
	return out, nil
}

// RequeueArchivedDeadLetter deletes the archived dead letter id and hands
// it to requeue (which puts it back in its seat's mailbox) in the same
// transaction: a requeue that fails keeps the row. Not found is ENOTFOUND.
func (s *Store) RequeueArchivedDeadLetter(ctx context.Context, id string, requeue func(context.Context, mailbox.DeadLetter) error) (mailbox.DeadLetter, error) {
	var dl mailbox.DeadLetter
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			DELETE FROM dead_letters WHERE id = $1
			RETURNING id, seat, reason, deliveries, stream_id, at, message`, id)
		if err != nil {
			return err
		}
		dl, err = pgx.CollectExactlyOneRow(rows, scanDeadLetter)
		if err != nil {
			return err
		}
		return requeue(ctx, dl)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return dl, crewlet.Errorf(crewlet.ENOTFOUND, "no dead letter %q; it was requeued already, or GET /deadletters lists those there are", id)
	}
	if err != nil {
		return dl, fmt.Errorf("requeue archived dead letter %s: %w", id, schemaMissing(err))
	}
	return dl, nil
}

func scanDeadLetter(row pgx.CollectableRow) (mailbox.DeadLetter, error) {
	var d mailbox.DeadLetter
	var body []byte
	if err := row.Scan(&d.ID, &d.Seat, &d.Reason, &d.Deliveries, &d.StreamID, &d.At, &body); err != nil {
		return d, err
	}
	d.Archived = true
	return d, json.Unmarshal(body, &d.Message)
}

// maxBound is the (ms, seq) a "before" cursor bounds rows by: everything
// when it is empty.
func maxBound(before string) (int64, int64) {
	if before == "" {
		return 1<<63 - 1, 1<<63 - 1
	}
	ms, seq := mailbox.SplitID(before)
	return int64(ms), int64(seq)
}
