package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

// PushConfig is a webhook an A2A task's state changes are posted to
// (docs/operations.md, "Push notifications"): the task is Ticket.
type PushConfig struct {
	Ticket string
	ID     string
	URL    string
	// Token is sent as X-A2A-Notification-Token and keys the signature.
	Token string
	// AuthScheme and AuthCredentials, when set, are sent as the
	// Authorization header.
	AuthScheme      string
	AuthCredentials string
	CreatedBy       string
	CreatedAt       time.Time
}

const pushConfigColumns = `ticket, id, url, token, auth_scheme, auth_credentials, created_by, created_at`

func scanPushConfig(r pgx.Row) (PushConfig, error) {
	var c PushConfig
	err := r.Scan(&c.Ticket, &c.ID, &c.URL, &c.Token, &c.AuthScheme, &c.AuthCredentials, &c.CreatedBy, &c.CreatedAt)
	return c, err
}

// PutPushConfig records c, or replaces the ticket's config of c's id,
// when the ticket has fewer than most others. seen is the phase the
// caller last told the client of (a SendMessage's task): when the ticket
// has moved on since, that change is owed to the new config at once, as
// if it had been there. The ticket's row is locked meanwhile, so a phase
// change either waits for the config, and its trigger owes the change to
// it, or comes first, and seen tells.
func (s *Store) PutPushConfig(ctx context.Context, c PushConfig, most int, seen crewlet.TicketPhase) (PushConfig, error) {
	var out PushConfig
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var phase crewlet.TicketPhase
		if err := tx.QueryRow(ctx, `SELECT phase FROM tickets WHERE id = $1 FOR UPDATE`, c.Ticket).Scan(&phase); errors.Is(err, pgx.ErrNoRows) {
			return crewlet.Errorf(crewlet.ENOTFOUND, "no task %s", c.Ticket)
		} else if err != nil {
			return err
		}
		var others int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM a2a_push_configs WHERE ticket = $1 AND id <> $2`, c.Ticket, c.ID).Scan(&others); err != nil {
			return err
		}
		if others >= most {
			return crewlet.Errorf(crewlet.EINVALID, "task %s has %d push notification configs, the most a task may have; delete one (DeleteTaskPushNotificationConfig) or reuse its id", c.Ticket, others)
		}
		var err error
		out, err = scanPushConfig(tx.QueryRow(ctx, `
			INSERT INTO a2a_push_configs (ticket, id, url, token, auth_scheme, auth_credentials, created_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (ticket, id) DO UPDATE SET url = EXCLUDED.url, token = EXCLUDED.token, auth_scheme = EXCLUDED.auth_scheme,
				auth_credentials = EXCLUDED.auth_credentials, created_by = EXCLUDED.created_by, created_at = now()
			RETURNING `+pushConfigColumns, c.Ticket, c.ID, c.URL, c.Token, c.AuthScheme, c.AuthCredentials, c.CreatedBy))
		if err != nil || seen == "" || phase == seen {
			return err
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO a2a_push_outbox (ticket, config, task)
			SELECT t.id, $2, crewlet_a2a_push_task(t) FROM tickets t WHERE t.id = $1`, c.Ticket, c.ID)
		return err
	})
	if err != nil {
		if crewlet.ErrorCode(err) != "" {
			return PushConfig{}, err
		}
		return PushConfig{}, fmt.Errorf("put push config of ticket %s: %w", c.Ticket, schemaMissing(err))
	}
	return out, nil
}

// PushConfigOf is the ticket's push config id.
func (s *Store) PushConfigOf(ctx context.Context, ticket, id string) (PushConfig, error) {
	c, err := scanPushConfig(s.pool.QueryRow(ctx, `SELECT `+pushConfigColumns+` FROM a2a_push_configs WHERE ticket = $1 AND id = $2`, ticket, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, crewlet.Errorf(crewlet.ENOTFOUND, "task %s has no push notification config %s; ListTaskPushNotificationConfigs lists its configs", ticket, id)
	}
	if err != nil {
		return c, fmt.Errorf("read push config %s of ticket %s: %w", id, ticket, schemaMissing(err))
	}
	return c, nil
}

// PushConfigs are the ticket's push configs, oldest first.
func (s *Store) PushConfigs(ctx context.Context, ticket string) ([]PushConfig, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+pushConfigColumns+` FROM a2a_push_configs WHERE ticket = $1 ORDER BY created_at, id`, ticket)
	if err != nil {
		return nil, fmt.Errorf("list push configs of ticket %s: %w", ticket, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PushConfig, error) { return scanPushConfig(r) })
	if err != nil {
		return nil, fmt.Errorf("list push configs of ticket %s: %w", ticket, err)
	}
	return out, nil
}

// DeletePushConfig deletes the ticket's push config id, and the
// notifications still owed to it.
func (s *Store) DeletePushConfig(ctx context.Context, ticket, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM a2a_push_configs WHERE ticket = $1 AND id = $2`, ticket, id)
	if err != nil {
		return fmt.Errorf("delete push config %s of ticket %s: %w", id, ticket, schemaMissing(err))
	}
	if tag.RowsAffected() == 0 {
		return crewlet.Errorf(crewlet.ENOTFOUND, "task %s has no push notification config %s; ListTaskPushNotificationConfigs lists its configs", ticket, id)
	}
	return nil
}

// Push is one notification owed: the ticket as it stood at a state
// change, to one of its configs.
type Push struct {
	// ID is the notification's, the same at every attempt.
	ID     int64
	Ticket crewlet.Ticket
	// Approval, when set, is the approval the turn serving the ticket
	// waited on then: the task needed an approver's input.
	Approval *crewlet.Approval
	Config   PushConfig
	// Attempts counts the attempts, this one included.
	Attempts  int
	CreatedAt time.Time
}

// ClaimPushes claims up to limit notifications that are due, each the
// oldest its config is owed (so a receiver gets a task's states in
// order), for lease: none is claimed again before the lease ends, unless
// it is given back by PushFailed first.
func (s *Store) ClaimPushes(ctx context.Context, limit int, lease time.Duration) ([]Push, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE a2a_push_outbox o SET attempts = o.attempts + 1, next_at = now() + make_interval(secs => $2)
		FROM a2a_push_configs c
		WHERE o.id IN (
			SELECT d.id FROM a2a_push_outbox d
			WHERE d.delivered_at IS NULL AND d.gave_up_at IS NULL AND d.next_at <= now()
			  AND NOT EXISTS (SELECT 1 FROM a2a_push_outbox p
			                  WHERE p.ticket = d.ticket AND p.config = d.config AND p.id < d.id
			                    AND p.delivered_at IS NULL AND p.gave_up_at IS NULL)
			ORDER BY d.id LIMIT $1
			FOR UPDATE SKIP LOCKED)
		  AND c.ticket = o.ticket AND c.id = o.config
		RETURNING o.id, o.task, o.attempts, o.created_at,
			c.ticket, c.id, c.url, c.token, c.auth_scheme, c.auth_credentials, c.created_by, c.created_at`, limit, lease.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim push notifications: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Push, error) {
		var p Push
		var task []byte
		c := &p.Config
		if err := r.Scan(&p.ID, &task, &p.Attempts, &p.CreatedAt,
			&c.Ticket, &c.ID, &c.URL, &c.Token, &c.AuthScheme, &c.AuthCredentials, &c.CreatedBy, &c.CreatedAt); err != nil {
			return p, err
		}
		var waiting struct {
			Approval *crewlet.Approval `json:"approval"`
		}
		if err := json.Unmarshal(task, &waiting); err != nil {
			return p, err
		}
		p.Approval = waiting.Approval
		return p, json.Unmarshal(task, &p.Ticket)
	})
	if err != nil {
		return nil, fmt.Errorf("claim push notifications: %w", err)
	}
	return out, nil
}

// PushDelivered marks notification id delivered.
func (s *Store) PushDelivered(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE a2a_push_outbox SET delivered_at = now(), last_error = '' WHERE id = $1`, id); err != nil {
		return fmt.Errorf("mark push notification %d delivered: %w", id, err)
	}
	return nil
}

// PushFailed records why notification id's attempt failed: it is tried
// again after retry, or never again when retry is 0.
func (s *Store) PushFailed(ctx context.Context, id int64, why string, retry time.Duration) error {
	sql, args := `UPDATE a2a_push_outbox SET gave_up_at = now(), last_error = $2 WHERE id = $1`, []any{id, why}
	if retry > 0 {
		sql = `UPDATE a2a_push_outbox SET next_at = now() + make_interval(secs => $3), last_error = $2 WHERE id = $1`
		args = append(args, retry.Seconds())
	}
	if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("record push notification %d failed: %w", id, err)
	}
	return nil
}

// TrimPushes deletes the notifications delivered or given up on that were
// owed longer than age ago.
func (s *Store) TrimPushes(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM a2a_push_outbox
		WHERE (delivered_at IS NOT NULL OR gave_up_at IS NOT NULL) AND created_at < now() - make_interval(secs => $1)`, age.Seconds())
	if err != nil {
		return 0, fmt.Errorf("trim push notifications: %w", schemaMissing(err))
	}
	return tag.RowsAffected(), nil
}
