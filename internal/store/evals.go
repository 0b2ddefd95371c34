package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/budget"
)

// EvalCharge is the tokens one model call of a replay (or a judge) spent,
// and what they cost at the prices when it ran: NanoUSD, and the tokens no
// price was found for.
type EvalCharge struct {
	TurnID, Principal, Profile string
	InputTokens, OutputTokens  int64
	NanoUSD, UnpricedTokens    int64
	RecordedAt                 time.Time
}

// ChargeEval records a replay's model call against evals.budget; nothing
// of a seat's or the company's usage counters is touched.
func (s *Store) ChargeEval(ctx context.Context, c EvalCharge) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO eval_usage (turn_id, principal, profile, input_tokens, output_tokens, recorded_at, nano_usd, unpriced_tokens)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, c.TurnID, c.Principal, c.Profile, c.InputTokens, c.OutputTokens, c.RecordedAt, c.NanoUSD, c.UnpricedTokens)
	if err != nil {
		return fmt.Errorf("charge eval usage of %s: %w", c.TurnID, schemaMissing(err))
	}
	return nil
}

// evalUsageKept is how long a replay's charge is kept: past the longest
// budget window (a month) wherever the company's clock is.
const evalUsageKept = 33 * 24 * time.Hour

// TrimEvalUsage deletes the replays' charges no budget window counts any
// more.
func (s *Store) TrimEvalUsage(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM eval_usage WHERE recorded_at < now() - make_interval(secs => $1)`, evalUsageKept.Seconds())
	if err != nil {
		return 0, fmt.Errorf("trim eval usage: %w", schemaMissing(err))
	}
	return tag.RowsAffected(), nil
}

// TrimEvalRuns deletes the eval runs that finished longer ago than keep,
// with their results; a running run is never deleted, and datasets stay.
// The runs' charges are not: they go with TrimEvalUsage once no budget
// window counts them, so a short retention refunds no budget.
func (s *Store) TrimEvalRuns(ctx context.Context, keep time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM eval_runs WHERE status <> 'running' AND finished_at < now() - make_interval(secs => $1)`, keep.Seconds())
	if err != nil {
		return 0, fmt.Errorf("trim eval runs: %w", schemaMissing(err))
	}
	return tag.RowsAffected(), nil
}

// EvalUsage returns the day, week and month windows of evals.budget that
// contain now on loc, each with the tokens replays spent in it and its
// cap; their scope is crewlet.ScopeEvals.
func (s *Store) EvalUsage(ctx context.Context, caps crewlet.BudgetCaps, now time.Time, loc *time.Location) ([]crewlet.UsageWindow, error) {
	var out []crewlet.UsageWindow
	for _, w := range budget.Windows(now, loc) {
		var used int64
		err := s.pool.QueryRow(ctx, `
			SELECT COALESCE(sum(input_tokens + output_tokens), 0) FROM eval_usage WHERE recorded_at >= $1 AND recorded_at < $2`,
			w.Start, w.End).Scan(&used)
		if err != nil {
			return nil, fmt.Errorf("read eval usage: %w", schemaMissing(err))
		}
		out = append(out, crewlet.UsageWindow{Scope: crewlet.ScopeEvals, Window: w.Name, Start: w.Start, ResetsAt: w.End, Cap: caps.Cap(w.Name), Used: used})
	}
	return out, nil
}

// ConfigRevisionNumbered returns revision n; ENOTFOUND when none has that
// number.
func (s *Store) ConfigRevisionNumbered(ctx context.Context, n int64) (ConfigRevision, error) {
	rev, err := s.configRevision(ctx, `WHERE revision = $1`, n)
	if errors.Is(err, pgx.ErrNoRows) {
		return rev, crewlet.Errorf(crewlet.ENOTFOUND, "no config revision %d; `crewlet config show` names the active one", n)
	}
	return rev, err
}

// AsStored returns m as a turn message reads back from Postgres (jsonb
// orders an object's keys and spaces it its own way), writing nothing: a
// replay's later rounds must send the tool calls as the recorded turn's
// later rounds read them.
func (s *Store) AsStored(ctx context.Context, m crewlet.ChatMessage) (crewlet.ChatMessage, error) {
	var out crewlet.ChatMessage
	if err := s.pool.QueryRow(ctx, `SELECT $1::jsonb`, m).Scan(&out); err != nil {
		return crewlet.ChatMessage{}, fmt.Errorf("read a message as stored: %w", err)
	}
	return out, nil
}
