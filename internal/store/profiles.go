package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/pool"
)

// ProfileFacts is what a pick reads, under the locks of the pool's
// profiles, so two picks never both take a profile's last slot.
type ProfileFacts struct {
	// Live counts each profile's slots held by other turn runs.
	Live map[string]int
	// Credentials is the health of the credentials asked for.
	Credentials map[string]pool.CredentialState
	// Disabled holds the models switched off.
	Disabled map[string]bool
	// Scores is the pool's weighted-selection state.
	Scores pool.Scores
	// Current is the profile this turn run's slot holds, "" for none.
	Current string
}

// SlotRequest asks for a slot of one of a pool's profiles for a turn run.
type SlotRequest struct {
	Pool        string
	Profiles    []string
	Credentials []string
	TurnID      string
	Epoch       int64
	Seat        string
	WorkKey     string
	Now         time.Time
	// ExpiresAt is when the slot stops counting unless a round renews it.
	ExpiresAt time.Time
}

// AcquireProfile picks a profile for a turn run and takes a slot of it, in
// one transaction: decide sees the facts and returns the profile ("" when
// none can take the turn) and the pool's new scores. The slot row, the
// turn's recorded profile and the scores are written together; a turn run
// that already holds a slot moves it (a failover). With no profile the run
// gives back any slot it held and is recorded as a waiter on the pool, so a
// freed slot wakes it; with one it stops waiting. freed is the profile whose
// slot the run gave up, "" when none.
func (s *Store) AcquireProfile(ctx context.Context, req SlotRequest, decide func(ProfileFacts) (string, pool.Scores)) (picked, freed string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		picked, freed = "", ""
		// Advisory locks in one order: two pools sharing a profile lock it
		// the same way, so picks cannot deadlock and never both see a free
		// last slot.
		names := append([]string(nil), req.Profiles...)
		sort.Strings(names)
		for _, name := range names {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('crewlet.profile:' || $1))`, name); err != nil {
				return err
			}
		}
		facts := ProfileFacts{Live: map[string]int{}, Disabled: map[string]bool{}}
		// The pool's row, created the first time, is locked (as FOR
		// UPDATE would) and read in one statement.
		var scores []byte
		if err := tx.QueryRow(ctx, `
			INSERT INTO profile_pools (pool) VALUES ($1)
			ON CONFLICT (pool) DO UPDATE SET pool = EXCLUDED.pool
			RETURNING scores`, req.Pool).Scan(&scores); err != nil {
			return err
		}
		if err := json.Unmarshal(scores, &facts.Scores); err != nil {
			return fmt.Errorf("decode scores of pool %s: %w", req.Pool, err)
		}
		err := tx.QueryRow(ctx, `SELECT profile FROM profile_slots WHERE turn_id = $1 AND epoch = $2`, req.TurnID, req.Epoch).Scan(&facts.Current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if facts.Live, err = liveSlots(ctx, tx, req.Profiles, req.TurnID, req.Epoch, req.Now); err != nil {
			return err
		}
		if facts.Credentials, err = credentialHealth(ctx, tx, req.Credentials); err != nil {
			return err
		}
		if facts.Disabled, err = disabledModels(ctx, tx); err != nil {
			return err
		}
		var next pool.Scores
		picked, next = decide(facts)
		if facts.Current != picked {
			freed = facts.Current
		}
		if picked == "" {
			if _, err := tx.Exec(ctx, `DELETE FROM profile_slots WHERE turn_id = $1 AND epoch = $2`, req.TurnID, req.Epoch); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `
				INSERT INTO profile_waiters AS w (turn_id, epoch, profiles, since) VALUES ($1, $2, $3, $4)
				ON CONFLICT (turn_id) DO UPDATE SET profiles = EXCLUDED.profiles, epoch = EXCLUDED.epoch,
				    since = CASE WHEN w.epoch = EXCLUDED.epoch THEN w.since ELSE EXCLUDED.since END
				WHERE w.epoch <= EXCLUDED.epoch`, req.TurnID, req.Epoch, req.Profiles, req.Now)
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO profile_slots (turn_id, epoch, seat, profile, acquired_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (turn_id, epoch) DO UPDATE SET profile = EXCLUDED.profile, expires_at = EXCLUDED.expires_at,
			    acquired_at = CASE WHEN profile_slots.profile = EXCLUDED.profile THEN profile_slots.acquired_at ELSE EXCLUDED.acquired_at END`,
			req.TurnID, req.Epoch, req.Seat, picked, req.Now, req.ExpiresAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM profile_waiters WHERE turn_id = $1 AND epoch = $2`, req.TurnID, req.Epoch); err != nil {
			return err
		}
		// Only the tenure that opened the turn last records its profile.
		if _, err := tx.Exec(ctx, `UPDATE turns SET profile = $3 WHERE seat = $1 AND work_key = $2 AND epoch = $4`,
			req.Seat, req.WorkKey, picked, req.Epoch); err != nil {
			return err
		}
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE profile_pools SET scores = $2 WHERE pool = $1`, req.Pool, b)
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("acquire a profile of pool %s for %s: %w", req.Pool, req.TurnID, schemaMissing(err))
	}
	return picked, freed, nil
}

// ReleaseProfile gives back a turn run's slot and its place among the
// waiters; it returns the profile freed, "" when it held none.
func (s *Store) ReleaseProfile(ctx context.Context, turnID string, epoch int64) (string, error) {
	// One statement, so both deletes commit together in one round trip:
	// a data-modifying WITH runs whether or not the query reads it.
	var freed string
	err := s.pool.QueryRow(ctx, releaseProfileSQL, turnID, epoch).Scan(&freed)
	if err != nil {
		return "", fmt.Errorf("release the profile slot of %s: %w", turnID, schemaMissing(err))
	}
	return freed, nil
}

// releaseProfileSQL is ReleaseProfile's statement, also sent by CloseTurn.
const releaseProfileSQL = `
	WITH slot AS (DELETE FROM profile_slots WHERE turn_id = $1 AND epoch = $2 RETURNING profile),
	     waiter AS (DELETE FROM profile_waiters WHERE turn_id = $1 AND epoch = $2)
	SELECT coalesce((SELECT profile FROM slot), '')`

const renewProfileSlotSQL = `UPDATE profile_slots SET expires_at = $4 WHERE turn_id = $1 AND epoch = $2 AND expires_at > $3`

// RenewProfileSlot pushes out when a turn run's slot stops counting, as of
// now. A slot whose lease already ran out is not revived: its capacity may
// have gone to another turn since, so renewed is false and the run must
// take a slot again, through a pick that checks the load. In the same round
// trip and transaction it reads the health of credential and the models
// switched off: what a round checks before it calls its profile's model.
func (s *Store) RenewProfileSlot(ctx context.Context, turnID string, epoch int64, now, expiresAt time.Time, credential string) (renewed bool, health pool.Health, err error) {
	var b pgx.Batch
	b.Queue(renewProfileSlotSQL, turnID, epoch, now, expiresAt).Exec(func(tag pgconn.CommandTag) error {
		renewed = tag.RowsAffected() > 0
		return nil
	})
	b.Queue(credentialHealthSQL, []string{credential}).Query(func(rows pgx.Rows) (err error) {
		health.Credentials, err = collectCredentials(rows)
		return err
	})
	b.Queue(disabledModelsSQL).Query(func(rows pgx.Rows) (err error) {
		health.DisabledModels, err = collectDisabled(rows)
		return err
	})
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return false, pool.Health{}, fmt.Errorf("renew the profile slot of %s and read its health: %w", turnID, schemaMissing(err))
	}
	return renewed, health, nil
}

// ProfileWaiters returns the turns waiting on any of profiles, oldest first.
func (s *Store) ProfileWaiters(ctx context.Context, profiles []string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT turn_id FROM profile_waiters WHERE profiles && $1 ORDER BY since, turn_id LIMIT $2`, profiles, limit)
	if err != nil {
		return nil, fmt.Errorf("read profile waiters: %w", schemaMissing(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read profile waiters: %w", err)
	}
	return ids, nil
}

// ForgetProfileWaiter drops a waiter that is gone (its workflow closed).
func (s *Store) ForgetProfileWaiter(ctx context.Context, turnID string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM profile_waiters WHERE turn_id = $1`, turnID); err != nil {
		return fmt.Errorf("forget profile waiter %s: %w", turnID, schemaMissing(err))
	}
	return nil
}

// LiveSlots counts each profile's live slots fleet-wide.
func (s *Store) LiveSlots(ctx context.Context, profiles []string, now time.Time) (map[string]int, error) {
	live, err := liveSlots(ctx, s.pool, profiles, "", 0, now)
	if err != nil {
		return nil, fmt.Errorf("count profile slots: %w", schemaMissing(err))
	}
	return live, nil
}

func liveSlots(ctx context.Context, q querier, profiles []string, exceptTurn string, exceptEpoch int64, now time.Time) (map[string]int, error) {
	rows, err := q.Query(ctx, `
		SELECT profile, count(*) FROM profile_slots
		WHERE profile = ANY($1) AND expires_at > $2 AND NOT (turn_id = $3 AND epoch = $4)
		GROUP BY profile`, profiles, now, exceptTurn, exceptEpoch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	live := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		live[name] = n
	}
	return live, rows.Err()
}

// CredentialHealth returns what is known of each credential; one never
// reported on is healthy (absent).
func (s *Store) CredentialHealth(ctx context.Context, credentials []string) (map[string]pool.CredentialState, error) {
	out, err := credentialHealth(ctx, s.pool, credentials)
	if err != nil {
		return nil, fmt.Errorf("read credential health: %w", schemaMissing(err))
	}
	return out, nil
}

const credentialColumns = `credential, quarantine_until, attempt, quarantine_reason, cooling_until, cooling_reason, last_failure, last_failure_turn`

func scanCredential(r pgx.Row) (string, pool.CredentialState, error) {
	var name string
	var st pool.CredentialState
	var qu, cu, lf *time.Time
	err := r.Scan(&name, &qu, &st.Attempt, &st.QuarantineReason, &cu, &st.CoolingReason, &lf, &st.LastFailureTurn)
	for _, f := range []struct {
		src *time.Time
		dst *time.Time
	}{{qu, &st.QuarantineUntil}, {cu, &st.CoolingUntil}, {lf, &st.LastFailure}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return name, st, err
}

const credentialHealthSQL = `SELECT ` + credentialColumns + ` FROM credential_health WHERE credential = ANY($1)`

func credentialHealth(ctx context.Context, q querier, credentials []string) (map[string]pool.CredentialState, error) {
	rows, err := q.Query(ctx, credentialHealthSQL, credentials)
	if err != nil {
		return nil, err
	}
	return collectCredentials(rows)
}

func collectCredentials(rows pgx.Rows) (map[string]pool.CredentialState, error) {
	defer rows.Close()
	out := map[string]pool.CredentialState{}
	for rows.Next() {
		name, st, err := scanCredential(rows)
		if err != nil {
			return nil, err
		}
		out[name] = st
	}
	return out, rows.Err()
}

// CredentialsOut counts the credentials in quarantine and cooling off at now.
func (s *Store) CredentialsOut(ctx context.Context, now time.Time) (quarantined, cooling int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE quarantine_until > $1), count(*) FILTER (WHERE cooling_until > $1)
		FROM credential_health`, now).Scan(&quarantined, &cooling)
	if err != nil {
		return 0, 0, fmt.Errorf("count credentials out: %w", schemaMissing(err))
	}
	return quarantined, cooling, nil
}

// ReportCredential applies a report (a usage-limit refusal, a failure) to a
// credential's health under its row lock, so two reports at once both
// count, and returns the state before and after.
func (s *Store) ReportCredential(ctx context.Context, credential string, apply func(pool.CredentialState) pool.CredentialState) (before, after pool.CredentialState, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO credential_health (credential) VALUES ($1) ON CONFLICT DO NOTHING`, credential); err != nil {
			return err
		}
		_, st, err := scanCredential(tx.QueryRow(ctx, `SELECT `+credentialColumns+` FROM credential_health WHERE credential = $1 FOR UPDATE`, credential))
		if err != nil {
			return err
		}
		before, after = st, apply(st)
		_, err = tx.Exec(ctx, `
			UPDATE credential_health SET quarantine_until = $2, attempt = $3, quarantine_reason = $4, cooling_until = $5,
			    cooling_reason = $6, last_failure = $7, last_failure_turn = $8, updated_at = now()
			WHERE credential = $1`,
			credential, nullTime(after.QuarantineUntil), after.Attempt, after.QuarantineReason, nullTime(after.CoolingUntil),
			after.CoolingReason, nullTime(after.LastFailure), after.LastFailureTurn)
		return err
	})
	if err != nil {
		return before, after, fmt.Errorf("report on credential %s: %w", credential, schemaMissing(err))
	}
	return before, after, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// SetModelSwitch switches a model off (or back on) for the whole fleet: every
// pick reads it, so the next turn on any node sees it.
func (s *Store) SetModelSwitch(ctx context.Context, sw crewlet.ModelSwitch) (crewlet.ModelSwitch, error) {
	err := s.pool.QueryRow(ctx, `
		INSERT INTO model_switches (model, disabled, by_whom, reason, at) VALUES ($1, $2, $3, $4, now())
		ON CONFLICT (model) DO UPDATE SET disabled = EXCLUDED.disabled, by_whom = EXCLUDED.by_whom, reason = EXCLUDED.reason, at = EXCLUDED.at
		RETURNING at`, sw.Model, sw.Disabled, sw.By, sw.Reason).Scan(&sw.At)
	if err != nil {
		return sw, fmt.Errorf("switch model %s: %w", sw.Model, schemaMissing(err))
	}
	return sw, nil
}

// ModelSwitches returns every model switch recorded, by model.
func (s *Store) ModelSwitches(ctx context.Context) ([]crewlet.ModelSwitch, error) {
	rows, err := s.pool.Query(ctx, `SELECT model, disabled, by_whom, reason, at FROM model_switches ORDER BY model`)
	if err != nil {
		return nil, fmt.Errorf("read model switches: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.ModelSwitch, error) {
		var sw crewlet.ModelSwitch
		err := r.Scan(&sw.Model, &sw.Disabled, &sw.By, &sw.Reason, &sw.At)
		return sw, err
	})
	if err != nil {
		return nil, fmt.Errorf("read model switches: %w", err)
	}
	return out, nil
}

const disabledModelsSQL = `SELECT model FROM model_switches WHERE disabled`

func disabledModels(ctx context.Context, q querier) (map[string]bool, error) {
	rows, err := q.Query(ctx, disabledModelsSQL)
	if err != nil {
		return nil, err
	}
	return collectDisabled(rows)
}

func collectDisabled(rows pgx.Rows) (map[string]bool, error) {
	models, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(models))
	for _, m := range models {
		out[m] = true
	}
	return out, nil
}

// DisabledModels returns the models switched off now.
func (s *Store) DisabledModels(ctx context.Context) (map[string]bool, error) {
	out, err := disabledModels(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("read disabled models: %w", schemaMissing(err))
	}
	return out, nil
}

// NoteAnsweredModel records that a profile's provider said another model
// than the configured one answered; changed is true when this differs from
// what was recorded for the profile before.
func (s *Store) NoteAnsweredModel(ctx context.Context, profile, configured, answered string) (changed bool, err error) {
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO profile_answers AS a (profile, configured, answered, at) VALUES ($1, $2, $3, now())
		ON CONFLICT (profile) DO UPDATE SET configured = EXCLUDED.configured, answered = EXCLUDED.answered, at = EXCLUDED.at
		WHERE a.answered <> EXCLUDED.answered OR a.configured <> EXCLUDED.configured`, profile, configured, answered)
	if err != nil {
		return false, fmt.Errorf("note the model answering for %s: %w", profile, schemaMissing(err))
	}
	return tag.RowsAffected() > 0, nil
}

// AnsweredModels returns, per profile, the model its provider last said
// answered when that differed from the configured one (configured → answered).
func (s *Store) AnsweredModels(ctx context.Context) (map[string][2]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT profile, configured, answered FROM profile_answers`)
	if err != nil {
		return nil, fmt.Errorf("read answered models: %w", schemaMissing(err))
	}
	defer rows.Close()
	out := map[string][2]string{}
	for rows.Next() {
		var p, c, a string
		if err := rows.Scan(&p, &c, &a); err != nil {
			return nil, fmt.Errorf("read answered models: %w", err)
		}
		out[p] = [2]string{c, a}
	}
	return out, rows.Err()
}
