package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/wire"
)

// SetSeatTools records the tool catalog of the seat's tenure, only if epoch
// is still the seat's current epoch; a stale tenure gets EFENCED.
func (s *Store) SetSeatTools(ctx context.Context, handle string, epoch int64, tools json.RawMessage) error {
	tag, err := s.pool.Exec(ctx, `UPDATE seats SET tools = $3 WHERE handle = $1 AND epoch = $2`, handle, epoch, jsonArg(tools))
	if err != nil {
		return fmt.Errorf("set seat %s tools: %w", handle, schemaMissing(err))
	}
	if tag.RowsAffected() == 0 {
		return fenced(handle, epoch)
	}
	return nil
}

// SeatTools returns the tool catalog of the seat's current tenure; nil when
// no host has recorded one.
func (s *Store) SeatTools(ctx context.Context, handle string) (json.RawMessage, error) {
	var tools []byte
	err := s.pool.QueryRow(ctx, seatToolsSQL, handle).Scan(&tools)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, crewlet.Errorf(crewlet.ENOTFOUND, "seat %q has no row yet", handle)
	}
	if err != nil {
		return nil, fmt.Errorf("read seat %s tools: %w", handle, schemaMissing(err))
	}
	return tools, nil
}

const seatToolsSQL = `SELECT tools FROM seats WHERE handle = $1`

// jsonArg passes raw JSON to a jsonb parameter, empty as NULL.
func jsonArg(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

const turnColumns = `seat, work_key, turn_id, epoch, mail, threads, tools, max_rounds, status, note, stopped_by, rounds, profile, started_at, finished_at`

func scanTurn(r pgx.Row, more ...any) (wire.TurnRow, error) {
	var t wire.TurnRow
	var tools []byte
	err := r.Scan(append([]any{&t.Seat, &t.WorkKey, &t.TurnID, &t.Epoch, &t.Mail, &t.Threads, &tools, &t.MaxRounds,
		&t.Status, &t.Note, &t.StoppedBy, &t.Rounds, &t.Profile, &t.StartedAt, &t.FinishedAt}, more...)...)
	if len(tools) > 0 {
		t.Tools = tools
	}
	return t, err
}

// OpenTurn records a turn as running and returns its stored row. A later run
// of the same work (after a host loss) reopens the row: it takes the new
// turn id, epoch, tools and max rounds, and keeps the first run's mail,
// threads and start, since the same work has the same triggers. An epoch
// that is not the seat's current one, or is older than the one that last
// opened the turn, gets EFENCED: the statement is the turn's fence, so
// opening one costs no read of the epoch beside it. The messages of
// transcript are recorded first (AppendMessages), in the same round trip
// and transaction; they are keyed, so they are recorded once whether the
// turn opens or not.
func (s *Store) OpenTurn(ctx context.Context, t wire.TurnRow, transcript ...crewlet.Message) (wire.TurnRow, error) {
	if t.Mail == nil {
		t.Mail = []crewlet.Message{}
	}
	if t.Threads == nil {
		t.Threads = []int{}
	}
	mail, err := json.Marshal(t.Mail)
	if err != nil {
		return wire.TurnRow{}, fmt.Errorf("open turn %s/%s: %w", t.Seat, t.WorkKey, err)
	}
	threads, err := json.Marshal(t.Threads)
	if err != nil {
		return wire.TurnRow{}, fmt.Errorf("open turn %s/%s: %w", t.Seat, t.WorkKey, err)
	}
	var started *time.Time
	if !t.StartedAt.IsZero() {
		started = &t.StartedAt
	}
	var b pgx.Batch
	queueMessages(&b, t.WorkKey, transcript)
	var row wire.TurnRow
	b.Queue(`
		INSERT INTO turns AS t (seat, work_key, turn_id, epoch, mail, threads, tools, max_rounds, started_at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, COALESCE($9, now())
		WHERE (SELECT epoch FROM seats WHERE handle = $1) = $4
		ON CONFLICT (seat, work_key) DO UPDATE SET
		    turn_id = EXCLUDED.turn_id, epoch = EXCLUDED.epoch, tools = EXCLUDED.tools, max_rounds = EXCLUDED.max_rounds,
		    status = 'running', note = '', stopped_by = '', finished_at = NULL
		WHERE t.epoch <= EXCLUDED.epoch
		RETURNING `+turnColumns,
		t.Seat, t.WorkKey, t.TurnID, t.Epoch, mail, threads, jsonArg(t.Tools), t.MaxRounds, started).QueryRow(func(r pgx.Row) (err error) {
		row, err = scanTurn(r)
		return err
	})
	err = s.pool.SendBatch(ctx, &b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.TurnRow{}, fenced(t.Seat, t.Epoch)
	}
	if err != nil {
		return wire.TurnRow{}, fmt.Errorf("open turn %s/%s: %w", t.Seat, t.WorkKey, schemaMissing(err))
	}
	return row, nil
}

// Turn returns the turn of one work; ENOTFOUND when there is none.
func (s *Store) Turn(ctx context.Context, seat, workKey string) (wire.TurnRow, error) {
	row, err := scanTurn(s.pool.QueryRow(ctx, `SELECT `+turnColumns+` FROM turns WHERE seat = $1 AND work_key = $2`, seat, workKey))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.TurnRow{}, crewlet.Errorf(crewlet.ENOTFOUND, "seat %s has no turn for work %q", seat, workKey)
	}
	if err != nil {
		return wire.TurnRow{}, fmt.Errorf("read turn %s/%s: %w", seat, workKey, schemaMissing(err))
	}
	return row, nil
}

// TenureTurn is Turn for a step of the turn run by tenure t: EFENCED
// unless t's epoch is the seat's current one. The check rides in the
// read's own statement, so the step needs no read of the epoch beside it.
func (s *Store) TenureTurn(ctx context.Context, t crewlet.Tenure, workKey string) (wire.TurnRow, error) {
	read, err := s.TenureThreads(ctx, t, workKey, nil, false)
	return read.Turn, err
}

// tenureTurnSQL reads a turn with its seat's current epoch.
const tenureTurnSQL = `SELECT ` + turnColumns + `, (SELECT epoch FROM seats WHERE handle = $1) FROM turns WHERE seat = $1 AND work_key = $2`

// TenureRead is what TenureThreads read: the turn, and the messages (and,
// when asked, the recorded rounds) of the threads asked for, by thread key.
type TenureRead struct {
	Turn     wire.TurnRow
	Messages map[string][]wire.TurnMessage
	Rounds   map[string][]wire.RoundRow
}

// TenureThreads is TenureTurn with the threads recorded under threadKeys
// (thread 0 of each, as TurnMessages reads them) and, with rounds, their
// recorded rounds (TurnRounds), all in one round trip and one transaction:
// a step that knows its threads' keys reads its turn and them at once.
func (s *Store) TenureThreads(ctx context.Context, t crewlet.Tenure, workKey string, threadKeys []string, rounds bool) (TenureRead, error) {
	read := TenureRead{Messages: map[string][]wire.TurnMessage{}, Rounds: map[string][]wire.RoundRow{}}
	var current *int64
	var b pgx.Batch
	b.Queue(tenureTurnSQL, t.Handle, workKey).QueryRow(func(r pgx.Row) error {
		var err error
		read.Turn, err = scanTurn(r, &current)
		return err
	})
	for _, key := range threadKeys {
		b.Queue(turnMessagesSQL, t.Handle, key, 0).Query(func(rows pgx.Rows) error {
			msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.TurnMessage, error) { return scanTurnMessage(r) })
			read.Messages[key] = msgs
			return err
		})
		if rounds {
			b.Queue(turnRoundsSQL, t.Handle, key).Query(func(rows pgx.Rows) error {
				rs, err := pgx.CollectRows(rows, scanRound)
				read.Rounds[key] = rs
				return err
			})
		}
	}
	err := s.pool.SendBatch(ctx, &b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return TenureRead{}, crewlet.Errorf(crewlet.ENOTFOUND, "seat %s has no turn for work %q", t.Handle, workKey)
	}
	if err != nil {
		return TenureRead{}, fmt.Errorf("read turn %s/%s: %w", t.Handle, workKey, schemaMissing(err))
	}
	if current == nil || *current != t.Epoch {
		return TenureRead{}, fenced(t.Handle, t.Epoch)
	}
	return read, nil
}

// TurnByID returns the turn with that id (the newest, should an id have been
// used twice); ENOTFOUND when there is none.
func (s *Store) TurnByID(ctx context.Context, turnID string) (wire.TurnRow, error) {
	row, err := scanTurn(s.pool.QueryRow(ctx, `
		SELECT `+turnColumns+` FROM turns WHERE turn_id = $1 ORDER BY started_at DESC LIMIT 1`, turnID))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.TurnRow{}, crewlet.Errorf(crewlet.ENOTFOUND, "no turn has id %q", turnID)
	}
	if err != nil {
		return wire.TurnRow{}, fmt.Errorf("read turn %s: %w", turnID, schemaMissing(err))
	}
	return row, nil
}

// SeatTurns returns the seat's latest turns, newest first.
func (s *Store) SeatTurns(ctx context.Context, seat string, limit int) ([]wire.TurnRow, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+turnColumns+` FROM turns WHERE seat = $1 ORDER BY started_at DESC, work_key LIMIT $2`, seat, limit)
	if err != nil {
		return nil, fmt.Errorf("list turns of %s: %w", seat, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.TurnRow, error) { return scanTurn(r) })
	if err != nil {
		return nil, fmt.Errorf("list turns of %s: %w", seat, err)
	}
	return out, nil
}

// FinishTurn records how a turn ended. Finishing it again rewrites the
// outcome but keeps the first finish time; first reports whether this was
// the first finish, so what is said of it once is said once.
func (s *Store) FinishTurn(ctx context.Context, seat, workKey string, status, note, stoppedBy string, rounds int) (first bool, err error) {
	// now() is the transaction's start, so a finish time equal to it was
	// set by this statement.
	err = s.pool.QueryRow(ctx, finishTurnSQL, seat, workKey, status, note, stoppedBy, rounds).Scan(&first)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, crewlet.Errorf(crewlet.ENOTFOUND, "seat %s has no turn for work %q", seat, workKey)
	}
	if err != nil {
		return false, fmt.Errorf("finish turn %s/%s: %w", seat, workKey, schemaMissing(err))
	}
	return first, nil
}

// finishTurnSQL is FinishTurn's statement, also sent by CloseTurn.
const finishTurnSQL = `
	UPDATE turns SET status = $3, note = $4, stopped_by = $5, rounds = $6, finished_at = COALESCE(finished_at, now())
	WHERE seat = $1 AND work_key = $2 RETURNING finished_at = now()`

// TurnClose is what a turn records as it ends.
type TurnClose struct {
	Seat, WorkKey, TurnID   string
	Status, Note, StoppedBy string
	Rounds                  int
	// Episode and Counterparties are the seat's memory of the turn
	// (RecordEpisode, CountInteraction).
	Episode        string
	Counterparties []string
	// Ledger holds the trigger keys the completion ledger records.
	Ledger []string
	// Release gives back the slot of the turn run at ReleaseEpoch
	// (ReleaseProfile).
	Release      bool
	ReleaseEpoch int64
}

// TurnClosed is what CloseTurn did.
type TurnClosed struct {
	// First reports whether this was the turn's first finish.
	First bool
	// Freed is the profile whose slot the close gave back, "" if none.
	Freed string
}

// CloseTurn records a turn's end in one round trip and one transaction:
// it waits on no ticket any more (ForgetWaiter), the seat remembers it
// (RecordEpisode, CountInteraction), its outcome is recorded (FinishTurn)
// and its triggers enter the completion ledger (LedgerRecord); asked to,
// it gives back the run's profile slot (ReleaseProfile). Each statement is
// keyed, so closing again changes nothing but the outcome. A turn with no
// row is ENOTFOUND (what is keyed on it is recorded all the same).
func (s *Store) CloseTurn(ctx context.Context, c TurnClose) (closed TurnClosed, err error) {
	var b pgx.Batch
	if c.Release {
		b.Queue(releaseProfileSQL, c.TurnID, c.ReleaseEpoch).QueryRow(func(r pgx.Row) error { return r.Scan(&closed.Freed) })
	}
	b.Queue(forgetWaiterSQL, c.TurnID)
	b.Queue(recordEpisodeSQL, c.Seat, c.WorkKey, c.TurnID, c.Episode)
	for _, who := range c.Counterparties {
		b.Queue(countInteractionSQL, c.Seat, who, c.WorkKey)
	}
	b.Queue(finishTurnSQL, c.Seat, c.WorkKey, c.Status, c.Note, c.StoppedBy, c.Rounds).QueryRow(func(r pgx.Row) error {
		return r.Scan(&closed.First)
	})
	b.Queue(ledgerRecordSQL, c.Seat, c.WorkKey, c.TurnID, c.Ledger)
	err = s.pool.SendBatch(ctx, &b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return closed, crewlet.Errorf(crewlet.ENOTFOUND, "seat %s has no turn for work %q", c.Seat, c.WorkKey)
	}
	if err != nil {
		return TurnClosed{}, fmt.Errorf("close turn %s/%s: %w", c.Seat, c.WorkKey, schemaMissing(err))
	}
	return closed, nil
}

const turnMessageColumns = `thread, key, round, message, seq, created_at`

func scanTurnMessage(r pgx.Row) (wire.TurnMessage, error) {
	var m wire.TurnMessage
	err := r.Scan(&m.Thread, &m.Key, &m.Round, &m.Message, &m.Seq, &m.CreatedAt)
	return m, err
}

// AppendTurnMessage appends a message to a thread of the turn and returns it
// as stored. It is keyed on (thread, key): appending the same key again
// appends nothing and returns the message already there.
func (s *Store) AppendTurnMessage(ctx context.Context, seat, workKey string, m wire.TurnMessage) (wire.TurnMessage, error) {
	msg, err := json.Marshal(m.Message)
	if err != nil {
		return wire.TurnMessage{}, fmt.Errorf("append turn message %s/%s %d/%s: %w", seat, workKey, m.Thread, m.Key, err)
	}
	stored, err := scanTurnMessage(s.pool.QueryRow(ctx, appendTurnMessageSQL, seat, workKey, m.Thread, m.Key, m.Round, msg))
	if errors.Is(err, pgx.ErrNoRows) {
		// A separate statement, so it sees a row a concurrent insert
		// committed after this one's snapshot.
		stored, err = scanTurnMessage(s.pool.QueryRow(ctx, `
			SELECT `+turnMessageColumns+` FROM turn_messages WHERE seat = $1 AND work_key = $2 AND thread = $3 AND key = $4`,
			seat, workKey, m.Thread, m.Key))
	}
	if err != nil {
		return wire.TurnMessage{}, fmt.Errorf("append turn message %s/%s %d/%s: %w", seat, workKey, m.Thread, m.Key, schemaMissing(err))
	}
	return stored, nil
}

const appendTurnMessageSQL = `
	INSERT INTO turn_messages (seat, work_key, thread, key, round, message) VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (seat, work_key, thread, key) DO NOTHING
	RETURNING ` + turnMessageColumns

// TurnMessages returns a thread of the turn in the order it was written;
// thread -1 returns every thread.
func (s *Store) TurnMessages(ctx context.Context, seat, workKey string, thread int) ([]wire.TurnMessage, error) {
	rows, err := s.pool.Query(ctx, turnMessagesSQL, seat, workKey, thread)
	if err != nil {
		return nil, fmt.Errorf("read turn messages %s/%s: %w", seat, workKey, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.TurnMessage, error) { return scanTurnMessage(r) })
	if err != nil {
		return nil, fmt.Errorf("read turn messages %s/%s: %w", seat, workKey, err)
	}
	return out, nil
}

const turnMessagesSQL = `
	SELECT ` + turnMessageColumns + ` FROM turn_messages
	WHERE seat = $1 AND work_key = $2 AND ($3 < 0 OR thread = $3) ORDER BY seq`

// StartToolCall writes the intent row of a tool call before it is made,
// or marks the row its admission wrote as started. firstAttempt is false
// when an earlier attempt started it: that attempt may have reached
// outside.
func (s *Store) StartToolCall(ctx context.Context, seat, workKey string, round, call int, name string, readOnly bool) (firstAttempt bool, err error) {
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO tool_calls (seat, work_key, round, call, name, read_only, started) VALUES ($1, $2, $3, $4, $5, $6, true)
		ON CONFLICT (seat, work_key, round, call) DO UPDATE SET started = true WHERE NOT tool_calls.started`,
		seat, workKey, round, call, name, readOnly)
	if err != nil {
		return false, fmt.Errorf("start tool call %s/%s r%dc%d: %w", seat, workKey, round, call, schemaMissing(err))
	}
	return tag.RowsAffected() == 1, nil
}

// ToolCallAdmission is one tool call of a turn asking to be made under the
// turn's caps.
type ToolCallAdmission struct {
	Seat string
	// Turn is the turn's work key; Threads the keys of its threads, whose
	// calls count toward its caps, Thread the one this call is of.
	Turn     string
	Threads  []string
	Thread   string
	Round    int
	Call     int
	Name     string
	ReadOnly bool
	// Messages names the tools that count as messages.
	Messages []string
}

// AdmitToolCall records a tool call of a turn as admitted when decide,
// given how many calls the turn's threads made so far and how many of them
// were messages, allows it; decide's error is returned and nothing is
// recorded. A call admitted before (an activity retried, a turn re-run,
// a call asked again after an approval) is admitted again without counting
// twice or asking decide. The turn's row is locked meanwhile, so calls of
// one round made at once cannot all slip under a cap.
func (s *Store) AdmitToolCall(ctx context.Context, a ToolCallAdmission, decide func(calls, messages int) error) error {
	var refused error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM turns WHERE seat = $1 AND work_key = $2 FOR UPDATE`, a.Seat, a.Turn); err != nil {
			return err
		}
		var admitted bool
		var calls, messages int
		err := tx.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE work_key = $3 AND round = $4 AND call = $5) > 0,
			       count(*), count(*) FILTER (WHERE name = ANY($6))
			FROM tool_calls WHERE seat = $1 AND work_key = ANY($2)`,
			a.Seat, a.Threads, a.Thread, a.Round, a.Call, a.Messages).Scan(&admitted, &calls, &messages)
		if err != nil || admitted {
			return err
		}
		if refused = decide(calls, messages); refused != nil {
			return nil
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO tool_calls (seat, work_key, round, call, name, read_only, started) VALUES ($1, $2, $3, $4, $5, $6, false)`,
			a.Seat, a.Thread, a.Round, a.Call, a.Name, a.ReadOnly)
		return err
	})
	if err != nil {
		return fmt.Errorf("admit tool call %s/%s r%dc%d: %w", a.Seat, a.Thread, a.Round, a.Call, schemaMissing(err))
	}
	return refused
}

// FinishToolCall stamps a tool call as finished; finishing it again keeps
// the first time.
func (s *Store) FinishToolCall(ctx context.Context, seat, workKey string, round, call int) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE tool_calls SET finished_at = COALESCE(finished_at, now())
		WHERE seat = $1 AND work_key = $2 AND round = $3 AND call = $4`, seat, workKey, round, call)
	if err != nil {
		return fmt.Errorf("finish tool call %s/%s r%dc%d: %w", seat, workKey, round, call, schemaMissing(err))
	}
	if tag.RowsAffected() == 0 {
		return crewlet.Errorf(crewlet.ENOTFOUND, "seat %s work %q has no tool call r%dc%d", seat, workKey, round, call)
	}
	return nil
}

// RecordRound records a model call and, the first time only, charges its
// tokens to the seat's and the company's day, week and month counters: the
// windows that contain RecordedAt (now when zero) on loc. charged is false
// when the round was already recorded, so a retried step charges nothing.
func (s *Store) RecordRound(ctx context.Context, r wire.RoundRow, loc *time.Location) (charged bool, err error) {
	charged, _, err = s.RecordRoundAnswer(ctx, r, loc, nil)
	return charged, err
}

// RecordRoundAnswer is RecordRound that also appends the round's answer to
// its thread (AppendTurnMessage under the round's seat and work key), in the
// same round trip and transaction, and returns the answer as stored; a nil
// answer appends nothing.
func (s *Store) RecordRoundAnswer(ctx context.Context, r wire.RoundRow, loc *time.Location, answer *wire.TurnMessage) (charged bool, stored wire.TurnMessage, err error) {
	if r.RecordedAt.IsZero() {
		r.RecordedAt = time.Now()
	}
	tokens := r.InputTokens + r.OutputTokens
	var scopes, windows []string
	var starts []time.Time
	// Always the same row order (seat then company), so two rounds charging
	// the company counters at once lock them in the same order.
	for _, scope := range []string{CounterScope(crewlet.ScopeSeat, r.Seat), CounterScope(crewlet.ScopeCompany, r.Seat)} {
		for _, w := range budget.Windows(r.RecordedAt, loc) {
			scopes, windows, starts = append(scopes, scope), append(windows, w.Name), append(starts, w.Start)
		}
	}
	var b pgx.Batch
	// One statement: the round's insert, and the charge (tokens, money, and
	// the day's spend) only when the insert recorded the round.
	unpriced := int64(0)
	if !r.Priced {
		unpriced = tokens
	}
	b.Queue(`
		WITH round AS (
			INSERT INTO turn_rounds (seat, work_key, round, profile, system_sha256, system_bytes, input_tokens, output_tokens, context_bytes, answered_model, recorded_at,
				cached_tokens, model, price_version, nano_usd, priced)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $16, $17, $18, $19, $20)
			ON CONFLICT (seat, work_key, round) DO NOTHING
			RETURNING 1
		), charge AS (
			INSERT INTO usage_counters AS u (scope, window_name, window_start, tokens, nano_usd, unpriced_tokens)
			SELECT s, w, t, $15::bigint, $19::bigint, $21::bigint FROM unnest($12::text[], $13::text[], $14::timestamptz[]) AS c (s, w, t)
			WHERE ($15::bigint > 0 OR $19::bigint > 0) AND EXISTS (SELECT 1 FROM round)
			ON CONFLICT (scope, window_name, window_start) DO UPDATE
			SET tokens = u.tokens + EXCLUDED.tokens, nano_usd = u.nano_usd + EXCLUDED.nano_usd, unpriced_tokens = u.unpriced_tokens + EXCLUDED.unpriced_tokens
		), spend AS (
			INSERT INTO spend_daily AS d (day, seat, role, model, profile, rounds, input_tokens, output_tokens, cached_tokens, unpriced_tokens, nano_usd)
			SELECT $22::date, $1, $23, $17, $4, 1, $7, $8, $16, $21, $19 WHERE EXISTS (SELECT 1 FROM round)
			ON CONFLICT (day, seat, role, model, profile) DO UPDATE
			SET rounds = d.rounds + 1, input_tokens = d.input_tokens + EXCLUDED.input_tokens, output_tokens = d.output_tokens + EXCLUDED.output_tokens,
				cached_tokens = d.cached_tokens + EXCLUDED.cached_tokens, unpriced_tokens = d.unpriced_tokens + EXCLUDED.unpriced_tokens,
				nano_usd = d.nano_usd + EXCLUDED.nano_usd
		)
		SELECT EXISTS (SELECT 1 FROM round)`,
		r.Seat, r.WorkKey, r.Round, r.Profile, r.SystemSHA256, r.SystemBytes, r.InputTokens, r.OutputTokens, r.ContextBytes, r.AnsweredModel, r.RecordedAt,
		scopes, windows, starts, tokens,
		r.CachedTokens, r.Model, r.PriceVersion, r.NanoUSD, r.Priced, unpriced,
		r.RecordedAt.In(loc).Format(time.DateOnly), r.Role).QueryRow(func(row pgx.Row) error { return row.Scan(&charged) })
	appended := false
	if answer != nil {
		msg, err := json.Marshal(answer.Message)
		if err != nil {
			return false, stored, fmt.Errorf("record round %s/%s r%d: %w", r.Seat, r.WorkKey, r.Round, err)
		}
		b.Queue(appendTurnMessageSQL, r.Seat, r.WorkKey, answer.Thread, answer.Key, answer.Round, msg).QueryRow(func(row pgx.Row) error {
			var err error
			stored, err = scanTurnMessage(row)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			appended = err == nil
			return err
		})
	}
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return false, stored, fmt.Errorf("record round %s/%s r%d: %w", r.Seat, r.WorkKey, r.Round, schemaMissing(err))
	}
	if answer != nil && !appended {
		// Appended before: the answer as it was stored.
		stored, err = s.AppendTurnMessage(ctx, r.Seat, r.WorkKey, *answer)
	}
	return charged, stored, err
}

// TurnRounds returns the turn's model calls in round order.
func (s *Store) TurnRounds(ctx context.Context, seat, workKey string) ([]wire.RoundRow, error) {
	rows, err := s.pool.Query(ctx, turnRoundsSQL, seat, workKey)
	if err != nil {
		return nil, fmt.Errorf("read rounds of %s/%s: %w", seat, workKey, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, scanRound)
	if err != nil {
		return nil, fmt.Errorf("read rounds of %s/%s: %w", seat, workKey, err)
	}
	return out, nil
}

const turnRoundsSQL = `
	SELECT seat, work_key, round, profile, system_sha256, system_bytes, input_tokens, output_tokens, context_bytes, answered_model, recorded_at,
		cached_tokens, model, price_version, nano_usd, priced
	FROM turn_rounds WHERE seat = $1 AND work_key = $2 ORDER BY round`

func scanRound(r pgx.CollectableRow) (wire.RoundRow, error) {
	var x wire.RoundRow
	err := r.Scan(&x.Seat, &x.WorkKey, &x.Round, &x.Profile, &x.SystemSHA256, &x.SystemBytes, &x.InputTokens, &x.OutputTokens, &x.ContextBytes, &x.AnsweredModel, &x.RecordedAt,
		&x.CachedTokens, &x.Model, &x.PriceVersion, &x.NanoUSD, &x.Priced)
	return x, err
}

// Usage returns the seat's and the company's day, week and month windows
// that contain now on loc (in budget.UsageWindows order), with the tokens,
// money and unpriced tokens counted in each (and their models where a money
// cap is set), the question each asked, and the caps given.
func (s *Store) Usage(ctx context.Context, seat string, seatCaps, companyCaps crewlet.BudgetCaps, now time.Time, loc *time.Location) ([]crewlet.UsageWindow, error) {
	var b pgx.Batch
	ws := queueUsage(&b, seat, seatCaps, companyCaps, now, loc)
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("read usage of %s: %w", seat, schemaMissing(err))
	}
	return ws, s.fillUnpricedModels(ctx, seat, ws)
}

// UsageAndTools is Usage and SeatTools in one round trip: what a turn
// reads as it begins.
func (s *Store) UsageAndTools(ctx context.Context, seat string, seatCaps, companyCaps crewlet.BudgetCaps, now time.Time, loc *time.Location) ([]crewlet.UsageWindow, json.RawMessage, error) {
	var b pgx.Batch
	ws := queueUsage(&b, seat, seatCaps, companyCaps, now, loc)
	var tools []byte
	b.Queue(seatToolsSQL, seat).QueryRow(func(r pgx.Row) error { return r.Scan(&tools) })
	err := s.pool.SendBatch(ctx, &b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, crewlet.Errorf(crewlet.ENOTFOUND, "seat %q has no row yet", seat)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read usage and tools of %s: %w", seat, schemaMissing(err))
	}
	return ws, tools, s.fillUnpricedModels(ctx, seat, ws)
}

// queueUsage queues Usage's read on b and returns the windows it fills in
// once b has run.
func queueUsage(b *pgx.Batch, seat string, seatCaps, companyCaps crewlet.BudgetCaps, now time.Time, loc *time.Location) []crewlet.UsageWindow {
	ws := budget.UsageWindows(seatCaps, companyCaps, now, loc)
	scopes := make([]string, len(ws))
	windows := make([]string, len(ws))
	starts := make([]time.Time, len(ws))
	for i, w := range ws {
		scopes[i] = CounterScope(w.Scope, seat)
		windows[i], starts[i] = w.Window, w.Start
	}
	b.Queue(`
		SELECT c.i, COALESCE(u.tokens, 0), COALESCE(u.nano_usd, 0), COALESCE(u.unpriced_tokens, 0), a.ticket_id IS NOT NULL,
			COALESCE(a.ticket_id, ''), COALESCE(a.seat, ''), COALESCE(a.asked_to, ''), COALESCE(a.used_nano_usd, 0), COALESCE(a.cap_nano_usd, 0),
			COALESCE(a.asked_at, 'epoch'), COALESCE(a.decision, ''), COALESCE(a.answer, ''), COALESCE(a.answered_by, ''), a.answered_at
		FROM unnest($1::text[], $2::text[], $3::timestamptz[]) WITH ORDINALITY AS c (s, w, t, i)
		LEFT JOIN usage_counters u ON u.scope = c.s AND u.window_name = c.w AND u.window_start = c.t
		LEFT JOIN budget_asks a ON a.scope = c.s AND a.window_name = c.w AND a.window_start = c.t`,
		scopes, windows, starts).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i, used, usedNano, unpriced int64
			var asked bool
			var ask crewlet.BudgetAsk
			if err := rows.Scan(&i, &used, &usedNano, &unpriced, &asked,
				&ask.Ticket, &ask.Seat, &ask.To, &ask.UsedNanoUSD, &ask.CapNanoUSD, &ask.AskedAt, &ask.Decision, &ask.Answer, &ask.AnsweredBy, &ask.AnsweredAt); err != nil {
				return err
			}
			w := &ws[i-1]
			w.Used, w.UsedNanoUSD, w.UnpricedTokens = used, usedNano, unpriced
			if asked {
				w.Ask = &ask
			}
		}
		return rows.Err()
	})
	return ws
}

// CounterScope is the usage_counters scope of a budget scope for a seat.
func CounterScope(scope, seat string) string {
	if scope == crewlet.ScopeSeat {
		return crewlet.ScopeSeat + ":" + seat
	}
	return scope
}

// usageRetention is how long token counters are kept: a year and a month,
// so last year's month is still there to compare with.
const usageRetention = 400 * 24 * time.Hour

// notLiveThread keeps a thread's records (r.seat, r.work_key: the thread's
// key, crewlet.ThreadKey of its trigger's event id, computed here as Go
// does) while a turn holding its trigger has not finished.
const notLiveThread = `
	AND NOT EXISTS (
		SELECT 1 FROM turns t, jsonb_array_elements(t.mail) m
		WHERE t.finished_at IS NULL AND t.seat = r.seat
		  AND left(encode(sha256(convert_to(m->>'event_id', 'UTF8') || '\x00'::bytea), 'hex'), 32) = r.work_key)`

// TurnsTrimmed counts what one TrimTurns deleted.
type TurnsTrimmed struct {
	Turns, Messages, Rounds, ToolCalls, Counters, Spend int64
	// BudgetAsks are the questions of windows trimmed with their counters.
	BudgetAsks int64
	// Slots are profile slots whose lease ran out: their turn vanished
	// without giving them back, and they count no more.
	Slots int64
}

// TrimTurns deletes turn records older than age: turns that finished before
// it, and conversation messages, rounds and tool calls written before it;
// and token counters of windows that started before usageRetention; and
// profile slots whose lease ran out. A turn that has not finished keeps its
// row and every record of its threads, however old: a turn waiting on a
// ticket for weeks must still find that its write tools ran, or it would
// run them again. A turn abandoned unfinished keeps them too (the cost of
// never guessing that a turn is dead).
func (s *Store) TrimTurns(ctx context.Context, age time.Duration) (TurnsTrimmed, error) {
	var out TurnsTrimmed
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, step := range []struct {
			n   *int64
			sql string
			age time.Duration
		}{
			// The COALESCE is the index's (migration 0007).
			{&out.Turns, `DELETE FROM turns WHERE finished_at IS NOT NULL AND COALESCE(finished_at, started_at) < now() - make_interval(secs => $1)`, age},
			{&out.Messages, `DELETE FROM turn_messages r WHERE created_at < now() - make_interval(secs => $1)` + notLiveThread, age},
			{&out.Rounds, `DELETE FROM turn_rounds r WHERE recorded_at < now() - make_interval(secs => $1)` + notLiveThread, age},
			{&out.ToolCalls, `DELETE FROM tool_calls r WHERE started_at < now() - make_interval(secs => $1)` + notLiveThread, age},
			{&out.Counters, `DELETE FROM usage_counters WHERE window_start < now() - make_interval(secs => $1)`, usageRetention},
			{&out.BudgetAsks, `DELETE FROM budget_asks WHERE window_start < now() - make_interval(secs => $1)`, usageRetention},
			{&out.Spend, `DELETE FROM spend_daily WHERE day < (now() - make_interval(secs => $1))::date`, usageRetention},
			{&out.Slots, `DELETE FROM profile_slots WHERE expires_at < now() - make_interval(secs => $1)`, 0},
		} {
			tag, err := tx.Exec(ctx, step.sql, step.age.Seconds())
			if err != nil {
				return err
			}
			*step.n = tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return TurnsTrimmed{}, fmt.Errorf("trim turn records: %w", schemaMissing(err))
	}
	return out, nil
}
