package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet/internal/wire"
)

// ClaimScheduleFire records a fire of a schedule going to seat under
// eventID and returns the fire's row: the one recorded first when the fire
// ran before, so a fire run twice goes where it went the first time.
func (s *Store) ClaimScheduleFire(ctx context.Context, schedule string, fireTime time.Time, seat, eventID string, skippedBefore int64) (wire.ScheduleFire, bool, error) {
	var f wire.ScheduleFire
	var first bool
	err := s.pool.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO schedule_fires (schedule, fire_time, seat, event_id, skipped_before)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (schedule, fire_time) DO NOTHING
			RETURNING fire_time, seat, event_id, fired_at, handled_at, skipped_before, true AS first)
		SELECT * FROM ins
		UNION ALL
		SELECT fire_time, seat, event_id, fired_at, handled_at, skipped_before, false
		FROM schedule_fires WHERE schedule = $1 AND fire_time = $2 AND NOT EXISTS (SELECT 1 FROM ins)`,
		schedule, fireTime, seat, eventID, skippedBefore).Scan(&f.FireTime, &f.Seat, &f.EventID, &f.FiredAt, &f.HandledAt, &f.SkippedBefore, &first)
	if err != nil {
		return f, false, fmt.Errorf("record fire of schedule %s at %s: %w", schedule, fireTime.Format(time.RFC3339), schemaMissing(err))
	}
	return f, first, nil
}

// ScheduleFireSeat returns the seat a fire was claimed for, if it was.
func (s *Store) ScheduleFireSeat(ctx context.Context, schedule string, fireTime time.Time) (seat string, found bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT seat FROM schedule_fires WHERE schedule = $1 AND fire_time = $2`, schedule, fireTime).Scan(&seat)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read fire of schedule %s at %s: %w", schedule, fireTime.Format(time.RFC3339), schemaMissing(err))
	}
	return seat, true, nil
}

// ScheduleFireHandled records that the seat answered a fire's message.
func (s *Store) ScheduleFireHandled(ctx context.Context, schedule string, fireTime time.Time) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE schedule_fires SET handled_at = now()
		WHERE schedule = $1 AND fire_time = $2 AND handled_at IS NULL`, schedule, fireTime)
	if err != nil {
		return fmt.Errorf("record fire of schedule %s answered: %w", schedule, schemaMissing(err))
	}
	return nil
}

// LastScheduleSkips is how many fires of the schedule Temporal had skipped
// when its latest recorded fire began; 0 when none is recorded.
func (s *Store) LastScheduleSkips(ctx context.Context, schedule string) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `
		SELECT COALESCE(max(skipped_before), 0) FROM schedule_fires WHERE schedule = $1`, schedule).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read fires of schedule %s: %w", schedule, schemaMissing(err))
	}
	return n, nil
}

// ScheduleFires returns a schedule's newest recorded fires, newest first.
func (s *Store) ScheduleFires(ctx context.Context, schedule string, limit int) ([]wire.ScheduleFire, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT fire_time, seat, event_id, fired_at, handled_at, skipped_before
		FROM schedule_fires WHERE schedule = $1 ORDER BY fire_time DESC LIMIT $2`, schedule, limit)
	if err != nil {
		return nil, fmt.Errorf("read fires of schedule %s: %w", schedule, schemaMissing(err))
	}
	defer rows.Close()
	out := []wire.ScheduleFire{}
	for rows.Next() {
		var f wire.ScheduleFire
		if err := rows.Scan(&f.FireTime, &f.Seat, &f.EventID, &f.FiredAt, &f.HandledAt, &f.SkippedBefore); err != nil {
			return nil, fmt.Errorf("read fires of schedule %s: %w", schedule, err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// TrimScheduleFires deletes fires recorded longer ago than age.
func (s *Store) TrimScheduleFires(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM schedule_fires WHERE fired_at < now() - make_interval(secs => $1)`, age.Seconds())
	if err != nil {
		return 0, fmt.Errorf("trim schedule fires: %w", schemaMissing(err))
	}
	return tag.RowsAffected(), nil
}
