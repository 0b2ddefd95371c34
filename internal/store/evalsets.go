package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

// FinishedTurns returns the ids of the finished turns of seats that
// started in [since, until), oldest first, the newest limit of them.
func (s *Store) FinishedTurns(ctx context.Context, seats []string, since, until time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT turn_id FROM (
			SELECT turn_id, started_at FROM turns
			WHERE seat = ANY($1) AND finished_at IS NOT NULL AND started_at >= $2 AND started_at < $3
			ORDER BY started_at DESC, turn_id DESC LIMIT $4) newest
		ORDER BY started_at, turn_id`, seats, since, until, limit)
	if err != nil {
		return nil, fmt.Errorf("list finished turns: %w", schemaMissing(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list finished turns: %w", err)
	}
	return ids, nil
}

// UnfinishedOrMissing returns those of ids that name no finished turn.
func (s *Store) UnfinishedOrMissing(ctx context.Context, ids []string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id FROM unnest($1::text[]) WITH ORDINALITY AS want(id, n)
		WHERE NOT EXISTS (SELECT 1 FROM turns WHERE turn_id = want.id AND finished_at IS NOT NULL)
		ORDER BY n`, ids)
	if err != nil {
		return nil, fmt.Errorf("check turns: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check turns: %w", err)
	}
	return out, nil
}

// CreateDataset freezes a dataset's turns; ECONFLICT when its name is
// taken.
func (s *Store) CreateDataset(ctx context.Context, d wire.Dataset) (wire.Dataset, error) {
	sel, err := json.Marshal(d.Selector)
	if err != nil {
		return d, fmt.Errorf("encode selector: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO eval_datasets (name, selector, created_by) VALUES ($1, $2, $3) RETURNING created_at`,
			d.Name, sel, d.CreatedBy).Scan(&d.CreatedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO eval_dataset_turns (dataset, position, turn_id)
			SELECT $1, n, id FROM unnest($2::text[]) WITH ORDINALITY AS t(id, n)`, d.Name, d.Turns)
		return err
	})
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return d, crewlet.Errorf(crewlet.ECONFLICT, "dataset %s exists; pick another name, or delete it first (`crewlet eval dataset delete %s`)", d.Name, d.Name)
	}
	if err != nil {
		return d, fmt.Errorf("create dataset %s: %w", d.Name, schemaMissing(err))
	}
	d.Size = len(d.Turns)
	return d, nil
}

const datasetColumns = `d.name, d.selector, d.created_by, d.created_at, (SELECT count(*) FROM eval_dataset_turns t WHERE t.dataset = d.name)`

func scanDataset(r pgx.Row) (wire.Dataset, error) {
	var d wire.Dataset
	err := r.Scan(&d.Name, &d.Selector, &d.CreatedBy, &d.CreatedAt, &d.Size)
	return d, err
}

// Datasets lists the datasets, newest first.
func (s *Store) Datasets(ctx context.Context) ([]wire.Dataset, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+datasetColumns+` FROM eval_datasets d ORDER BY d.created_at DESC, d.name LIMIT $1`, wire.MaxEvalList)
	if err != nil {
		return nil, fmt.Errorf("list datasets: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.Dataset, error) { return scanDataset(r) })
	if err != nil {
		return nil, fmt.Errorf("list datasets: %w", err)
	}
	return out, nil
}

// Dataset returns a dataset with its turns; ENOTFOUND when none has the
// name.
func (s *Store) Dataset(ctx context.Context, name string) (wire.Dataset, error) {
	d, err := scanDataset(s.pool.QueryRow(ctx, `SELECT `+datasetColumns+` FROM eval_datasets d WHERE d.name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, crewlet.Errorf(crewlet.ENOTFOUND, "no dataset %s; `crewlet eval dataset list` lists them", name)
	}
	if err != nil {
		return d, fmt.Errorf("read dataset %s: %w", name, schemaMissing(err))
	}
	rows, err := s.pool.Query(ctx, `SELECT turn_id FROM eval_dataset_turns WHERE dataset = $1 ORDER BY position`, name)
	if err != nil {
		return d, fmt.Errorf("read dataset %s: %w", name, err)
	}
	if d.Turns, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return d, fmt.Errorf("read dataset %s: %w", name, err)
	}
	return d, nil
}

// DeleteDataset deletes a dataset; the runs made of it keep their turns.
// ENOTFOUND when none has the name.
func (s *Store) DeleteDataset(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM eval_datasets WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete dataset %s: %w", name, schemaMissing(err))
	}
	if tag.RowsAffected() == 0 {
		return crewlet.Errorf(crewlet.ENOTFOUND, "no dataset %s; `crewlet eval dataset list` lists them", name)
	}
	return nil
}

// CreateEvalRun records a run and copies its dataset's turns into its
// results, pending. ENOTFOUND when the dataset is gone.
func (s *Store) CreateEvalRun(ctx context.Context, r wire.EvalRun) (wire.EvalRun, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM eval_datasets WHERE name = $1 FOR SHARE`, r.Dataset).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return crewlet.Errorf(crewlet.ENOTFOUND, "no dataset %s; `crewlet eval dataset list` lists them", r.Dataset)
		}
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `
			INSERT INTO eval_runs (id, dataset, change, checks, concurrency, principal) VALUES ($1, $2, $3, $4, $5, $6)
			RETURNING status, created_at`, r.ID, r.Dataset, r.Change, r.Checks, r.Concurrency, r.Principal).Scan(&r.Status, &r.CreatedAt); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO eval_results (run, turn_id, position)
			SELECT $1, turn_id, position FROM eval_dataset_turns WHERE dataset = $2`, r.ID, r.Dataset)
		return err
	})
	if crewlet.ErrorCode(err) != "" {
		return r, err
	}
	if err != nil {
		return r, fmt.Errorf("create eval run %s: %w", r.ID, schemaMissing(err))
	}
	return r, nil
}

const runColumns = `r.id, r.dataset, r.change, r.checks, r.concurrency, r.principal, r.status, r.created_at, r.finished_at,
	(SELECT json_build_object(
		'turns', count(*),
		'pending', count(*) FILTER (WHERE e.status = 'pending'),
		'scored', count(*) FILTER (WHERE e.status = 'scored'),
		'passed', count(*) FILTER (WHERE e.status = 'scored' AND e.passed),
		'failed', count(*) FILTER (WHERE e.status = 'failed'),
		'refused', count(*) FILTER (WHERE e.status = 'refused'),
		'input_tokens', COALESCE(sum(e.input_tokens), 0),
		'output_tokens', COALESCE(sum(e.output_tokens), 0),
		'diverged', COALESCE(sum(e.diverged), 0),
		'recorded_nano_usd', COALESCE(sum((e.report->'recorded_tokens'->>'nano_usd')::bigint), 0),
		'nano_usd', (SELECT COALESCE(sum(u.nano_usd), 0) FROM eval_usage u WHERE u.run = r.id),
		'unpriced_tokens', (SELECT COALESCE(sum(u.unpriced_tokens), 0) FROM eval_usage u WHERE u.run = r.id))
	 FROM eval_results e WHERE e.run = r.id)`

func scanRun(row pgx.Row) (wire.EvalRun, error) {
	var r wire.EvalRun
	err := row.Scan(&r.ID, &r.Dataset, &r.Change, &r.Checks, &r.Concurrency, &r.Principal, &r.Status, &r.CreatedAt, &r.FinishedAt, &r.Totals)
	if r.Totals.Scored > 0 {
		r.Totals.PassRate = float64(r.Totals.Passed) / float64(r.Totals.Scored)
	}
	return r, err
}

// EvalRuns lists the runs, newest first.
func (s *Store) EvalRuns(ctx context.Context) ([]wire.EvalRun, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM eval_runs r ORDER BY r.created_at DESC, r.id LIMIT $1`, wire.MaxEvalList)
	if err != nil {
		return nil, fmt.Errorf("list eval runs: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.EvalRun, error) { return scanRun(r) })
	if err != nil {
		return nil, fmt.Errorf("list eval runs: %w", err)
	}
	return out, nil
}

// EvalRun returns a run; with results, its turns' results too, in the
// dataset's order. ENOTFOUND when none has the id.
func (s *Store) EvalRun(ctx context.Context, id string, results bool) (wire.EvalRun, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM eval_runs r WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, crewlet.Errorf(crewlet.ENOTFOUND, "no eval run %s; `crewlet eval runs` lists them", id)
	}
	if err != nil {
		return r, fmt.Errorf("read eval run %s: %w", id, schemaMissing(err))
	}
	if !results {
		return r, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT turn_id, status, passed, report, checks, error, input_tokens, output_tokens, diverged, scored_at
		FROM eval_results WHERE run = $1 ORDER BY position`, id)
	if err != nil {
		return r, fmt.Errorf("read eval run %s: %w", id, err)
	}
	r.Results, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (wire.EvalResult, error) {
		var e wire.EvalResult
		var checks []byte
		err := row.Scan(&e.Turn, &e.Status, &e.Passed, &e.Report, &checks, &e.Error, &e.InputTokens, &e.OutputTokens, &e.Diverged, &e.ScoredAt)
		if err == nil && checks != nil {
			err = json.Unmarshal(checks, &e.Checks)
		}
		if err == nil && e.Report != nil {
			e.Recorded, e.Replayed, err = answers(e.Report)
		}
		return e, err
	})
	if err != nil {
		return r, fmt.Errorf("read eval run %s: %w", id, err)
	}
	return r, nil
}

// answers are a replay report's recorded and replayed answers, its
// threads' joined by a blank line.
func answers(report []byte) (recorded, replayed string, err error) {
	var r struct {
		Threads []struct {
			Recorded string `json:"recorded_answer"`
			Replayed string `json:"replayed_answer"`
		} `json:"threads"`
	}
	if err := json.Unmarshal(report, &r); err != nil {
		return "", "", err
	}
	var rec, rep []string
	for _, t := range r.Threads {
		rec, rep = append(rec, t.Recorded), append(rep, t.Replayed)
	}
	return strings.Join(rec, "\n\n"), strings.Join(rep, "\n\n"), nil
}

// EvalPlan is what an eval run's workflow needs to start: the turns still
// pending, in the dataset's order, and how many to replay at once.
type EvalPlan struct {
	Turns       []string
	Concurrency int
}

// EvalPending returns the run's pending turns.
func (s *Store) EvalPending(ctx context.Context, run string) (EvalPlan, error) {
	var p EvalPlan
	if err := s.pool.QueryRow(ctx, `SELECT concurrency FROM eval_runs WHERE id = $1`, run).Scan(&p.Concurrency); errors.Is(err, pgx.ErrNoRows) {
		return p, crewlet.Errorf(crewlet.ENOTFOUND, "no eval run %s", run)
	} else if err != nil {
		return p, fmt.Errorf("read eval run %s: %w", run, schemaMissing(err))
	}
	rows, err := s.pool.Query(ctx, `SELECT turn_id FROM eval_results WHERE run = $1 AND status = 'pending' ORDER BY position`, run)
	if err != nil {
		return p, fmt.Errorf("read eval run %s: %w", run, err)
	}
	if p.Turns, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return p, fmt.Errorf("read eval run %s: %w", run, err)
	}
	return p, nil
}

// EvalRunSetup is what a turn's replay of a run needs of the run.
type EvalRunSetup struct {
	Change, Checks json.RawMessage
	Principal      string
	// Status is the turn's status in the run.
	Status string
}

// EvalTurnSetup reads the run and the turn's status in it.
func (s *Store) EvalTurnSetup(ctx context.Context, run, turn string) (EvalRunSetup, error) {
	var out EvalRunSetup
	err := s.pool.QueryRow(ctx, `
		SELECT r.change, r.checks, r.principal, e.status FROM eval_runs r JOIN eval_results e ON e.run = r.id
		WHERE r.id = $1 AND e.turn_id = $2`, run, turn).Scan(&out.Change, &out.Checks, &out.Principal, &out.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, crewlet.Errorf(crewlet.ENOTFOUND, "turn %s is not in eval run %s", turn, run)
	}
	if err != nil {
		return out, fmt.Errorf("read eval run %s: %w", run, schemaMissing(err))
	}
	return out, nil
}

// EvalOutcome is one turn's result in a run and what its replay and
// checks spent.
type EvalOutcome struct {
	Run, Turn string
	Status    string
	Passed    *bool
	Report    any
	Checks    []wire.CheckResult
	Error     string
	Diverged  int
	Charges   []EvalCharge
}

// RecordEvalResult writes a turn's result and its charges in one
// transaction, unless the turn is no longer pending: a retried replay
// whose first attempt got as far as this charges and scores nothing
// again. It says whether it wrote.
func (s *Store) RecordEvalResult(ctx context.Context, o EvalOutcome) (bool, error) {
	var report, checks []byte
	var err error
	if o.Report != nil {
		if report, err = json.Marshal(o.Report); err != nil {
			return false, fmt.Errorf("encode report: %w", err)
		}
	}
	if o.Checks != nil {
		if checks, err = json.Marshal(o.Checks); err != nil {
			return false, fmt.Errorf("encode checks: %w", err)
		}
	}
	var in, out int64
	for _, c := range o.Charges {
		in, out = in+c.InputTokens, out+c.OutputTokens
	}
	wrote := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE eval_results SET status = $3, passed = $4, report = $5, checks = $6, error = $7,
				input_tokens = $8, output_tokens = $9, diverged = $10, scored_at = now()
			WHERE run = $1 AND turn_id = $2 AND status = 'pending'`,
			o.Run, o.Turn, o.Status, o.Passed, report, checks, o.Error, in, out, o.Diverged)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		wrote = true
		for _, c := range o.Charges {
			if _, err := tx.Exec(ctx, `
				INSERT INTO eval_usage (turn_id, principal, profile, input_tokens, output_tokens, recorded_at, run, nano_usd, unpriced_tokens)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, c.TurnID, c.Principal, c.Profile, c.InputTokens, c.OutputTokens, c.RecordedAt, o.Run,
				c.NanoUSD, c.UnpricedTokens); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("record eval result of %s in %s: %w", o.Turn, o.Run, schemaMissing(err))
	}
	return wrote, nil
}

// FinishEvalRun ends the run with status, marking the turns still pending
// refused when the budget stopped it, failed otherwise (their replays
// failed every attempt).
func (s *Store) FinishEvalRun(ctx context.Context, run, status string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		left, why := wire.EvalTurnFailed, "its replay kept failing; the workers' log (eval_turn_failed) says why"
		if status == wire.EvalBudgetExhausted {
			left, why = wire.EvalTurnRefused, "the eval budget was spent before this turn was replayed"
		}
		if _, err := tx.Exec(ctx, `
			UPDATE eval_results SET status = $2, error = $3, scored_at = now()
			WHERE run = $1 AND status = 'pending'`, run, left, why); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE eval_runs SET status = $2, finished_at = COALESCE(finished_at, now()) WHERE id = $1`, run, status)
		return err
	})
	if err != nil {
		return fmt.Errorf("finish eval run %s: %w", run, schemaMissing(err))
	}
	return nil
}

// DeleteEvalRun deletes a run and its results.
func (s *Store) DeleteEvalRun(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM eval_runs WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete eval run %s: %w", id, schemaMissing(err))
	}
	return nil
}
