package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

// HealthFacts are the Postgres facts the health duty classifies seats by,
// each read for every seat at once (a handful of grouped queries a pass,
// whatever the number of seats).
type HealthFacts struct {
	// Turns is each seat's latest turn rows, newest first, at most the
	// limit HealthFacts was asked for.
	Turns map[string][]TurnFact
	// Waits is each seat's turns waiting on a ticket, oldest first.
	Waits map[string][]WaitFact
	// DeadLetters counts each seat's dead-lettered triggers within the window.
	DeadLetters map[string]int
	// Usage is what was counted in the current windows, by usage scope
	// ("seat:HANDLE" or "company") and window name.
	Usage map[string]map[string]WindowUsage
	// ProfileHolds is, for each seat with a turn held because no profile
	// of its pool can take it, since when its oldest such turn waits.
	ProfileHolds map[string]time.Time
	// Now is the database clock when the facts were read.
	Now time.Time
}

// TurnFact is one turn row as the health duty reads it.
type TurnFact struct {
	TurnID    string
	Status    crewlet.TurnStatus
	Note      string
	StartedAt time.Time
}

// WaitFact is one wait of a seat's turn on a ticket: a delegator's turn
// waiting on the ticket (On is the assignee) or an assignee's turn waiting
// on the answer to its question (On is the delegator).
type WaitFact struct {
	Ticket string
	On     string
	Since  time.Time
}

// WindowUsage is one budget window's counters and its money question, if
// it asked one (its ticket, decision, who answered and what was spent when
// it asked).
type WindowUsage struct {
	Tokens, NanoUSD, UnpricedTokens int64
	Ask                             *crewlet.BudgetAsk
}

// HealthWindows names the usage windows HealthFacts reads the counters of.
type HealthWindows struct {
	Names  []string
	Starts []time.Time
}

// HealthFacts reads, for every seat in handles, its latest turns (at most
// turns each), its waits on tickets, its dead letters recorded within
// deadLetterWindow, and the usage counters of windows.
func (s *Store) HealthFacts(ctx context.Context, handles []string, turns int, deadLetterWindow time.Duration, windows HealthWindows) (HealthFacts, error) {
	f := HealthFacts{Turns: map[string][]TurnFact{}, Waits: map[string][]WaitFact{}, DeadLetters: map[string]int{},
		Usage: map[string]map[string]WindowUsage{}, ProfileHolds: map[string]time.Time{}}
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&f.Now); err != nil {
		return f, fmt.Errorf("read health facts: %w", err)
	}
	// The latest turns of each seat through its (seat, started_at) index:
	// O(seats × turns), not a scan of every turn kept.
	rows, err := s.pool.Query(ctx, `
		SELECT h.seat, t.turn_id, t.status, t.note, t.started_at
		FROM unnest($1::text[]) AS h (seat)
		CROSS JOIN LATERAL (
			SELECT turn_id, status, note, started_at FROM turns
			WHERE seat = h.seat ORDER BY started_at DESC LIMIT $2) t`, handles, turns)
	if err != nil {
		return f, fmt.Errorf("read health facts (turns): %w", schemaMissing(err))
	}
	for rows.Next() {
		var seat string
		var t TurnFact
		if err := rows.Scan(&seat, &t.TurnID, &t.Status, &t.Note, &t.StartedAt); err != nil {
			rows.Close()
			return f, fmt.Errorf("read health facts (turns): %w", err)
		}
		f.Turns[seat] = append(f.Turns[seat], t)
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("read health facts (turns): %w", err)
	}
	// Profile holds: the pools' waiters are the turns held (few; each
	// found by its turn id).
	rows, err = s.pool.Query(ctx, `
		SELECT t.seat, min(w.since) FROM profile_waiters w JOIN turns t ON t.turn_id = w.turn_id
		WHERE t.seat = ANY($1) GROUP BY t.seat`, handles)
	if err != nil {
		return f, fmt.Errorf("read health facts (profile holds): %w", schemaMissing(err))
	}
	for rows.Next() {
		var seat string
		var since time.Time
		if err := rows.Scan(&seat, &since); err != nil {
			rows.Close()
			return f, fmt.Errorf("read health facts (profile holds): %w", err)
		}
		f.ProfileHolds[seat] = since
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("read health facts (profile holds): %w", err)
	}
	// Waits, from the open tickets' partial waiter indexes.
	rows, err = s.pool.Query(ctx, `
		SELECT id, waiter, to_handle, updated_at FROM tickets WHERE waiter <> '' AND phase IN ('pending', 'asking')
		UNION ALL
		SELECT id, ask_waiter, from_handle, COALESCE(asked_at, updated_at) FROM tickets WHERE ask_waiter <> '' AND phase = 'asking'
		ORDER BY 4`)
	if err != nil {
		return f, fmt.Errorf("read health facts (waits): %w", schemaMissing(err))
	}
	for rows.Next() {
		var w WaitFact
		var waiter string
		if err := rows.Scan(&w.Ticket, &waiter, &w.On, &w.Since); err != nil {
			rows.Close()
			return f, fmt.Errorf("read health facts (waits): %w", err)
		}
		if seat, _, ok := crewlet.ParseTurnID(waiter); ok {
			f.Waits[seat] = append(f.Waits[seat], w)
		}
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("read health facts (waits): %w", err)
	}
	rows, err = s.pool.Query(ctx, `
		SELECT seat, count(*) FROM seat_events
		WHERE kind = 'dead_lettered' AND recorded_at > now() - make_interval(secs => $1)
		GROUP BY seat`, deadLetterWindow.Seconds())
	if err != nil {
		return f, fmt.Errorf("read health facts (dead letters): %w", schemaMissing(err))
	}
	for rows.Next() {
		var seat string
		var n int
		if err := rows.Scan(&seat, &n); err != nil {
			rows.Close()
			return f, fmt.Errorf("read health facts (dead letters): %w", err)
		}
		f.DeadLetters[seat] = n
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("read health facts (dead letters): %w", err)
	}
	rows, err = s.pool.Query(ctx, `
		SELECT u.scope, u.window_name, u.tokens, u.nano_usd, u.unpriced_tokens, a.ticket_id IS NOT NULL,
			COALESCE(a.ticket_id, ''), COALESCE(a.decision, ''), COALESCE(a.answered_by, ''), COALESCE(a.used_nano_usd, 0)
		FROM unnest($1::text[], $2::timestamptz[]) AS w (name, start)
		JOIN usage_counters u ON u.window_name = w.name AND u.window_start = w.start
		LEFT JOIN budget_asks a ON a.scope = u.scope AND a.window_name = u.window_name AND a.window_start = u.window_start`, windows.Names, windows.Starts)
	if err != nil {
		return f, fmt.Errorf("read health facts (usage): %w", schemaMissing(err))
	}
	for rows.Next() {
		var scope, window string
		var u WindowUsage
		var asked bool
		var ask crewlet.BudgetAsk
		if err := rows.Scan(&scope, &window, &u.Tokens, &u.NanoUSD, &u.UnpricedTokens, &asked, &ask.Ticket, &ask.Decision, &ask.AnsweredBy, &ask.UsedNanoUSD); err != nil {
			rows.Close()
			return f, fmt.Errorf("read health facts (usage): %w", err)
		}
		if asked {
			u.Ask = &ask
		}
		if f.Usage[scope] == nil {
			f.Usage[scope] = map[string]WindowUsage{}
		}
		f.Usage[scope][window] = u
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("read health facts (usage): %w", err)
	}
	return f, nil
}

// HealthRecord is a seat's health row with what the duty last observed of
// its workflow.
type HealthRecord struct {
	crewlet.SeatHealthRow
	// ObservedStatus is the workflow status last seen ("absent" when none
	// ran), and ObservedSince when it was first seen.
	ObservedStatus string
	ObservedSince  time.Time
}

// SeatHealth returns the recorded health of the seats named in only, or of
// every seat when only is empty, keyed by handle.
func (s *Store) SeatHealth(ctx context.Context, only ...string) (map[string]HealthRecord, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT seat, state, cause, since, checked_at, observed_status, observed_since FROM seat_health
		WHERE COALESCE(cardinality($1::text[]), 0) = 0 OR seat = ANY($1)`, only)
	if err != nil {
		return nil, fmt.Errorf("read seat health: %w", schemaMissing(err))
	}
	out := map[string]HealthRecord{}
	for rows.Next() {
		var r HealthRecord
		if err := rows.Scan(&r.Seat, &r.State, &r.Cause, &r.Since, &r.CheckedAt, &r.ObservedStatus, &r.ObservedSince); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read seat health: %w", err)
		}
		out[r.Seat] = r
	}
	return out, rows.Err()
}

// HealthUpdate is one seat's classification by a pass: its state and cause,
// and the workflow status seen, with since when. Prev is the state the pass
// read (unknown when the seat had no row): the write is refused, as a
// compare-and-set, if another pass changed the state meanwhile.
type HealthUpdate struct {
	Seat                   string
	Prev, State            crewlet.SeatHealth
	Cause                  string
	ObservedStatus         string
	ObservedSince, Checked time.Time
}

// RecordHealth writes a pass's classifications in one transaction and
// returns the transitions it recorded: those whose state changed from the
// Prev the pass read. A seat another pass moved meanwhile is left to it, so
// a transition is recorded, and logged, once.
func (s *Store) RecordHealth(ctx context.Context, updates []HealthUpdate) ([]crewlet.HealthTransition, error) {
	var out []crewlet.HealthTransition
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		seats := make([]string, len(updates))
		prev := make([]string, len(updates))
		states := make([]string, len(updates))
		causes := make([]string, len(updates))
		observed := make([]string, len(updates))
		observedSince := make([]time.Time, len(updates))
		checked := make([]time.Time, len(updates))
		for i, u := range updates {
			seats[i], prev[i], states[i], causes[i] = u.Seat, string(u.Prev), string(u.State), u.Cause
			observed[i], observedSince[i], checked[i] = u.ObservedStatus, u.ObservedSince, u.Checked
		}
		// A seat with a row moves only from the state the pass read; one
		// without gets a row unless another pass wrote one first. A state
		// change stamps since; the same state keeps it and takes the newer
		// cause (a wait's length, a backlog's size).
		rows, err := tx.Query(ctx, `
			WITH u AS (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[])
				AS u (seat, prev, state, cause, observed, observed_since, checked)),
			updated AS (
				UPDATE seat_health h SET
					state = u.state, cause = u.cause,
					since = CASE WHEN h.state = u.state THEN h.since ELSE u.checked END,
					observed_status = u.observed, observed_since = u.observed_since, checked_at = u.checked
				FROM u WHERE h.seat = u.seat AND h.state = u.prev
				RETURNING u.seat, u.prev, u.state, u.cause, u.checked),
			inserted AS (
				INSERT INTO seat_health (seat, state, cause, since, observed_status, observed_since, checked_at)
				SELECT seat, state, cause, checked, observed, observed_since, checked FROM u WHERE prev = $8
				ON CONFLICT (seat) DO NOTHING
				RETURNING seat, state, cause, checked_at)
			SELECT seat, prev, state, cause, checked FROM updated WHERE prev <> state
			UNION ALL
			SELECT seat, $8, state, cause, checked_at FROM inserted WHERE state <> $8`,
			seats, prev, states, causes, observed, observedSince, checked, string(crewlet.HealthUnknown))
		if err != nil {
			return err
		}
		for rows.Next() {
			var t crewlet.HealthTransition
			if err := rows.Scan(&t.Seat, &t.From, &t.To, &t.Cause, &t.At); err != nil {
				rows.Close()
				return err
			}
			out = append(out, t)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		batch := &pgx.Batch{}
		for _, t := range out {
			batch.Queue(`INSERT INTO seat_health_transitions (seat, from_state, to_state, cause, at) VALUES ($1, $2, $3, $4, $5)`,
				t.Seat, string(t.From), string(t.To), t.Cause, t.At)
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("record seat health: %w", schemaMissing(err))
	}
	return out, nil
}

// HealthTransitions returns a seat's latest transitions, newest first.
func (s *Store) HealthTransitions(ctx context.Context, seat string, limit int) ([]crewlet.HealthTransition, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT seat, from_state, to_state, cause, at FROM seat_health_transitions
		WHERE seat = $1 ORDER BY id DESC LIMIT $2`, seat, limit)
	if err != nil {
		return nil, fmt.Errorf("read health transitions of %s: %w", seat, schemaMissing(err))
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.HealthTransition, error) {
		var t crewlet.HealthTransition
		err := r.Scan(&t.Seat, &t.From, &t.To, &t.Cause, &t.At)
		return t, err
	})
}

// SeatsByHealth counts the seats in handles by recorded health; a seat with
// no row yet counts as unknown.
func (s *Store) SeatsByHealth(ctx context.Context, handles []string) (map[string]int, error) {
	out := map[string]int{}
	rows, err := s.pool.Query(ctx, `
		SELECT COALESCE(h.state, $2), count(*) FROM unnest($1::text[]) AS s (seat)
		LEFT JOIN seat_health h USING (seat) GROUP BY 1`, handles, string(crewlet.HealthUnknown))
	if err != nil {
		return nil, fmt.Errorf("count seats by health: %w", schemaMissing(err))
	}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count seats by health: %w", err)
		}
		out[state] = n
	}
	return out, rows.Err()
}
