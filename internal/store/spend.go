package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/prices"
)

// SpendKeys are what GET /costs groups the spend by, each the spend_daily
// column (or expression) it reads.
var SpendKeys = map[string]string{
	"seat":    "seat",
	"role":    "role",
	"model":   "model",
	"profile": "profile",
	"day":     "to_char(day, 'YYYY-MM-DD')",
}

// Spend sums spend_daily from since to until (days on the company's clock,
// both included) by one of SpendKeys, the most spent first (ties by key);
// by day, oldest first.
func (s *Store) Spend(ctx context.Context, by string, since, until time.Time) ([]crewlet.CostRow, error) {
	key, ok := SpendKeys[by]
	if !ok {
		return nil, crewlet.Errorf(crewlet.EINVALID, "cannot group spend by %q", by)
	}
	order := "sum(nano_usd) DESC, key"
	if by == "day" {
		order = "key"
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+key+` AS key, sum(rounds), sum(nano_usd), sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(unpriced_tokens)
		FROM spend_daily WHERE day BETWEEN $1::date AND $2::date
		GROUP BY 1 ORDER BY `+order, since.Format(time.DateOnly), until.Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("read spend: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.CostRow, error) {
		var c crewlet.CostRow
		err := r.Scan(append([]any{&c.Key}, scanCost(&c.Cost)...)...)
		c.USD = prices.USD(c.NanoUSD)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read spend: %w", err)
	}
	return out, nil
}

// PriceVersions lists the price versions of the receipts recorded from
// from to before to that turn retention still keeps, priced ones only.
func (s *Store) PriceVersions(ctx context.Context, from, to time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT price_version FROM turn_rounds
		WHERE recorded_at >= $1 AND recorded_at < $2 AND priced ORDER BY 1`, from, to)
	if err != nil {
		return nil, fmt.Errorf("read price versions: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read price versions: %w", err)
	}
	return out, nil
}
