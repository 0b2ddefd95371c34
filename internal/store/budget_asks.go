package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

const budgetAskColumns = `ticket_id, seat, asked_to, used_nano_usd, cap_nano_usd, asked_at, decision, answer, answered_by, answered_at`

func scanBudgetAsk(r pgx.Row) (crewlet.BudgetAsk, error) {
	var a crewlet.BudgetAsk
	err := r.Scan(&a.Ticket, &a.Seat, &a.To, &a.UsedNanoUSD, &a.CapNanoUSD, &a.AskedAt, &a.Decision, &a.Answer, &a.AnsweredBy, &a.AnsweredAt)
	return a, err
}

// RecordBudgetAsk records the question a seat's or the company's money
// window (scope as CounterScope names it) asked, with its decision
// (crewlet.AskWaiting until answered), once: a second record of the same
// window keeps the first and returns it, recorded false.
func (s *Store) RecordBudgetAsk(ctx context.Context, scope, window string, start time.Time, ask crewlet.BudgetAsk) (stored crewlet.BudgetAsk, recorded bool, err error) {
	stored, err = scanBudgetAsk(s.pool.QueryRow(ctx, `
		INSERT INTO budget_asks (scope, window_name, window_start, ticket_id, seat, asked_to, used_nano_usd, cap_nano_usd,
			decision, answer, answered_by, answered_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, CASE WHEN $9 = 'waiting' THEN NULL ELSE now() END)
		ON CONFLICT (scope, window_name, window_start) DO NOTHING
		RETURNING `+budgetAskColumns,
		scope, window, start, ask.Ticket, ask.Seat, ask.To, ask.UsedNanoUSD, ask.CapNanoUSD, ask.Decision, ask.Answer, ask.AnsweredBy))
	if errors.Is(err, pgx.ErrNoRows) {
		stored, err = scanBudgetAsk(s.pool.QueryRow(ctx, `SELECT `+budgetAskColumns+` FROM budget_asks
			WHERE scope = $1 AND window_name = $2 AND window_start = $3`, scope, window, start))
	} else if err == nil {
		recorded = true
	}
	if err != nil {
		return crewlet.BudgetAsk{}, false, fmt.Errorf("record budget ask of %s %s: %w", scope, window, schemaMissing(err))
	}
	return stored, recorded, nil
}

// BudgetAskOf returns the budget question a ticket asks; ok is false when
// it asks none.
func (s *Store) BudgetAskOf(ctx context.Context, ticketID string) (ask crewlet.BudgetAsk, ok bool, err error) {
	ask, err = scanBudgetAsk(s.pool.QueryRow(ctx, `SELECT `+budgetAskColumns+` FROM budget_asks WHERE ticket_id = $1`, ticketID))
	if errors.Is(err, pgx.ErrNoRows) {
		return crewlet.BudgetAsk{}, false, nil
	}
	if err != nil {
		return crewlet.BudgetAsk{}, false, fmt.Errorf("read budget ask of ticket %s: %w", ticketID, schemaMissing(err))
	}
	return ask, true, nil
}

// fillUnpricedModels names the models of the unpriced tokens of each
// window that has a money cap and unpriced tokens (rare: one read each),
// from the day's spend of the seat (the company's: every seat's).
func (s *Store) fillUnpricedModels(ctx context.Context, seat string, ws []crewlet.UsageWindow) error {
	for i, w := range ws {
		if w.CapNanoUSD <= 0 || w.UnpricedTokens <= 0 {
			continue
		}
		only := seat
		if w.Scope == crewlet.ScopeCompany {
			only = ""
		}
		rows, err := s.pool.Query(ctx, `
			SELECT model, sum(unpriced_tokens)::bigint FROM spend_daily
			WHERE day >= $1::date AND day < $2::date AND ($3 = '' OR seat = $3) AND unpriced_tokens > 0
			GROUP BY model ORDER BY 2 DESC, 1 LIMIT 5`,
			w.Start.Format(time.DateOnly), w.ResetsAt.Format(time.DateOnly), only)
		if err != nil {
			return fmt.Errorf("read unpriced models of %s: %w", seat, schemaMissing(err))
		}
		ws[i].UnpricedModels, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.UnpricedModel, error) {
			var m crewlet.UnpricedModel
			return m, r.Scan(&m.Model, &m.Tokens)
		})
		if err != nil {
			return fmt.Errorf("read unpriced models of %s: %w", seat, err)
		}
	}
	return nil
}
