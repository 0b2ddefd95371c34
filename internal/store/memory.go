package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
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
	_, err := s.pool.Exec(ctx, recordEpisodeSQL, e.Seat, e.WorkKey, e.TurnID, e.Summary)
	if err != nil {
		return fmt.Errorf("record episode of %s: %w", e.Seat, schemaMissing(err))
	}
	return nil
}

// CountInteraction counts one interaction of the seat with counterparty for
// the work, in one statement: the same work key counted again adds nothing.
func (s *Store) CountInteraction(ctx context.Context, seat, counterparty, workKey string) error {
	_, err := s.pool.Exec(ctx, countInteractionSQL, seat, counterparty, workKey)
	if err != nil {
		return fmt.Errorf("count interaction of %s with %s: %w", seat, counterparty, schemaMissing(err))
	}
	return nil
}

// The statements of RecordEpisode and CountInteraction, also sent by
// CloseTurn.
const (
	recordEpisodeSQL = `
		INSERT INTO episodes (seat, work_key, turn_id, summary) VALUES ($1, NULLIF($2, ''), $3, $4)
		ON CONFLICT (seat, work_key) DO NOTHING`
	countInteractionSQL = `
		INSERT INTO counterparty_profiles AS cp (seat, counterparty, interaction_count, last_work_key)
		VALUES ($1, $2, 1, NULLIF($3, ''))
		ON CONFLICT (seat, counterparty) DO UPDATE SET
		    interaction_count = cp.interaction_count +
		        CASE WHEN EXCLUDED.last_work_key IS NOT NULL AND cp.last_work_key = EXCLUDED.last_work_key THEN 0 ELSE 1 END,
		    last_work_key = EXCLUDED.last_work_key,
		    last_seen = now()`
)

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

// ReflectionWritten reports whether the turn of workKey already left its
// reflection in the seat's diary.
func (s *Store) ReflectionWritten(ctx context.Context, seat, workKey string) (bool, error) {
	var found bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agent_diary WHERE seat = $1 AND work_key = $2)`, seat, workKey).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("read diary of %s: %w", seat, schemaMissing(err))
	}
	return found, nil
}

// WriteReflection writes a turn's reflection to the seat's diary, keyed on
// the turn's work: a reflection re-run after a crash writes nothing more,
// and an entry byte-identical to one already there collapses into it.
func (s *Store) WriteReflection(ctx context.Context, seat, workKey, content string) error {
	sum := sha256.Sum256([]byte(content))
	_, err := s.pool.Exec(ctx, `
		INSERT INTO agent_diary (seat, content, content_hash, work_key) VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, seat, content, sum[:], workKey)
	if err != nil {
		return fmt.Errorf("write reflection of %s: %w", seat, schemaMissing(err))
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
func (s *Store) SeatEvents(ctx context.Context, seat string, limit int) ([]wire.SeatEvent, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, seat, kind, COALESCE(event_id, ''), detail, recorded_at FROM seat_events
		WHERE seat = $1 ORDER BY id DESC LIMIT $2`, seat, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", seat, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.SeatEvent, error) {
		var e wire.SeatEvent
		err := r.Scan(&e.ID, &e.Seat, &e.Kind, &e.EventID, &e.Detail, &e.RecordedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", seat, err)
	}
	return out, nil
}

// Page is one page of a newest-first list. Next is the cursor that reads the
// page after it, empty on the last page.
type Page[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next"`
}

// DiaryItem is one diary entry as an operator reads it.
type DiaryItem struct {
	ID         int64     `json:"id"`
	Content    string    `json:"content"`
	WorkKey    string    `json:"work_key,omitempty"`
	RecordedAt time.Time `json:"recorded_at"`
}

// EpisodeItem is one remembered turn as an operator reads it.
type EpisodeItem struct {
	ID         int64     `json:"id"`
	WorkKey    string    `json:"work_key"`
	TurnID     string    `json:"turn_id"`
	Summary    string    `json:"summary"`
	RecordedAt time.Time `json:"recorded_at"`
}

// CounterpartyItem is who the seat has dealt with and how often.
type CounterpartyItem struct {
	Counterparty     string    `json:"counterparty"`
	InteractionCount int64     `json:"interaction_count"`
	FirstSeen        time.Time `json:"first_seen"`
	LastSeen         time.Time `json:"last_seen"`
}

// Diary returns a page of the seat's diary, newest first. before is empty
// for the first page, else the Next of the page before.
func (s *Store) Diary(ctx context.Context, seat, before string, limit int) (Page[DiaryItem], error) {
	id, err := idCursor("diary", before)
	if err != nil {
		return Page[DiaryItem]{}, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, content, COALESCE(work_key, ''), recorded_at FROM agent_diary
		WHERE seat = $1 AND ($2::bigint = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, seat, id, pageLimit(limit)+1)
	return collectPage(rows, err, "read diary of "+seat, limit,
		func(r pgx.Rows, d *DiaryItem) error { return r.Scan(&d.ID, &d.Content, &d.WorkKey, &d.RecordedAt) },
		func(d DiaryItem) string { return strconv.FormatInt(d.ID, 10) })
}

// Episodes returns a page of the seat's episodes, newest first; before as
// for Diary.
func (s *Store) Episodes(ctx context.Context, seat, before string, limit int) (Page[EpisodeItem], error) {
	id, err := idCursor("episodes", before)
	if err != nil {
		return Page[EpisodeItem]{}, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, COALESCE(work_key, ''), turn_id, summary, recorded_at FROM episodes
		WHERE seat = $1 AND ($2::bigint = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, seat, id, pageLimit(limit)+1)
	return collectPage(rows, err, "read episodes of "+seat, limit,
		func(r pgx.Rows, e *EpisodeItem) error {
			return r.Scan(&e.ID, &e.WorkKey, &e.TurnID, &e.Summary, &e.RecordedAt)
		},
		func(e EpisodeItem) string { return strconv.FormatInt(e.ID, 10) })
}

// Counterparties returns a page of who the seat has dealt with, the most
// recently seen first (ties by name); before as for Diary. The cursor is the
// last row's (last_seen, counterparty), so rows added or touched after a page
// was read do not shift the pages after it.
func (s *Store) Counterparties(ctx context.Context, seat, before string, limit int) (Page[CounterpartyItem], error) {
	seen, who, err := counterpartyCursor(before)
	if err != nil {
		return Page[CounterpartyItem]{}, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT counterparty, interaction_count, first_seen, last_seen FROM counterparty_profiles
		WHERE seat = $1 AND ($2::timestamptz IS NULL OR last_seen < $2 OR (last_seen = $2 AND counterparty > $3))
		ORDER BY last_seen DESC, counterparty ASC LIMIT $4`, seat, seen, who, pageLimit(limit)+1)
	return collectPage(rows, err, "read counterparties of "+seat, limit,
		func(r pgx.Rows, c *CounterpartyItem) error {
			return r.Scan(&c.Counterparty, &c.InteractionCount, &c.FirstSeen, &c.LastSeen)
		},
		func(c CounterpartyItem) string {
			raw := strconv.FormatInt(c.LastSeen.UnixMicro(), 10) + "|" + c.Counterparty
			return base64.RawURLEncoding.EncodeToString([]byte(raw))
		})
}

func pageLimit(limit int) int { return min(max(limit, 1), wire.MaxMemoryPage) }

// collectPage reads up to limit rows into a page; a further row means there
// is a next page, whose cursor is the last kept row's.
func collectPage[T any](rows pgx.Rows, err error, what string, limit int, scan func(pgx.Rows, *T) error, cursor func(T) string) (Page[T], error) {
	p := Page[T]{Items: []T{}}
	if err != nil {
		return p, readFailed(what, err)
	}
	defer rows.Close()
	limit = pageLimit(limit)
	more := false
	for rows.Next() {
		if len(p.Items) == limit {
			more = true
			break
		}
		var item T
		if err := scan(rows, &item); err != nil {
			return p, fmt.Errorf("%s: %w", what, err)
		}
		p.Items = append(p.Items, item)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Page[T]{Items: []T{}}, readFailed(what, err)
	}
	if more {
		p.Next = cursor(p.Items[len(p.Items)-1])
	}
	return p, nil
}

// idCursor parses the cursor of an id-ordered list; 0 is the first page.
func idCursor(kind, before string) (int64, error) {
	if before == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(before, 10, 64)
	if err != nil || id < 1 {
		return 0, crewlet.Errorf(crewlet.EINVALID, "before must be the next value of a previous %s page (a positive id), got %q", kind, before)
	}
	return id, nil
}

// counterpartyCursor parses the cursor Counterparties hands out; a nil time
// is the first page.
func counterpartyCursor(before string) (*time.Time, string, error) {
	if before == "" {
		return nil, "", nil
	}
	bad := crewlet.Errorf(crewlet.EINVALID, "before must be the next value of a previous counterparties page, got %q", before)
	raw, err := base64.RawURLEncoding.DecodeString(before)
	if err != nil {
		return nil, "", bad
	}
	micros, who, ok := strings.Cut(string(raw), "|")
	us, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || who == "" {
		return nil, "", bad
	}
	seen := time.UnixMicro(us)
	return &seen, who, nil
}

// readFailed wraps a failed read so the API answers 503 for a database it
// cannot reach or whose schema is missing or behind, with a message that
// carries no SQL; the full error stays in the chain for the server log.
func readFailed(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", what, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "42P01", pgErr.Code == "42703": // undefined table, undefined column
			return fmt.Errorf("%s: %w: %w", what, crewlet.Errorf(crewlet.EUNAVAILABLE, "the database schema is missing or behind; run `crewlet migrate` first"), err)
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "53"), strings.HasPrefix(pgErr.Code, "57"):
			// connection exception, insufficient resources, operator intervention
		default:
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return fmt.Errorf("%s: %w: %w", what, crewlet.Errorf(crewlet.EUNAVAILABLE, "the database cannot be reached; see the server log"), err)
}
