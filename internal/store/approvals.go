package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

const approvalColumns = `id, handle, turn_id, call_key, tool, args, args_hash, role, policy, approvers, on_timeout, epoch,
	status, decided_by, reason, remember_until, remember_args, created_at, until, decided_at, conversation, ticket`

func scanApproval(r pgx.Row) (crewlet.Approval, error) {
	var a crewlet.Approval
	err := r.Scan(&a.ID, &a.Handle, &a.TurnID, &a.CallKey, &a.Tool, &a.Args, &a.ArgsHash, &a.Role, &a.Policy, &a.Approvers,
		&a.OnTimeout, &a.Epoch, &a.Status, &a.DecidedBy, &a.Reason, &a.RememberUntil, &a.RememberArgs, &a.CreatedAt,
		&a.Until, &a.DecidedAt, &a.Conversation, &a.Ticket)
	return a, err
}

// CreateApproval records a pending approval under a.ID unless one is there:
// asking again for the same call, arguments and policy returns the row as
// it stands, with created false. A new row supersedes the pending rows of
// the same call: they were asked under other arguments or another policy.
func (s *Store) CreateApproval(ctx context.Context, a crewlet.Approval) (stored crewlet.Approval, created bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		stored, err = scanApproval(tx.QueryRow(ctx, `
			INSERT INTO approvals (id, handle, turn_id, call_key, tool, args, args_hash, role, policy, approvers, on_timeout, epoch, until, conversation, ticket)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
			ON CONFLICT (id) DO NOTHING
			RETURNING `+approvalColumns,
			a.ID, a.Handle, a.TurnID, a.CallKey, a.Tool, a.Args, a.ArgsHash, a.Role, a.Policy, a.Approvers, a.OnTimeout, a.Epoch, a.Until, a.Conversation, a.Ticket))
		if errors.Is(err, pgx.ErrNoRows) {
			stored, err = scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, a.ID))
			return err
		}
		if err != nil {
			return err
		}
		created = true
		_, err = tx.Exec(ctx, `
			UPDATE approvals SET status = 'superseded', decided_at = now()
			WHERE handle = $1 AND turn_id = $2 AND call_key = $3 AND id <> $4 AND status = 'pending'`,
			a.Handle, a.TurnID, a.CallKey, a.ID)
		return err
	})
	if err != nil {
		return crewlet.Approval{}, false, fmt.Errorf("create approval: %w", schemaMissing(err))
	}
	return stored, created, nil
}

// Approval returns one approval; ENOTFOUND when there is none.
func (s *Store) Approval(ctx context.Context, id string) (crewlet.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return crewlet.Approval{}, crewlet.Errorf(crewlet.ENOTFOUND, "no approval %q; `crewlet approvals ls` lists the pending ones", id)
	}
	if err != nil {
		return crewlet.Approval{}, fmt.Errorf("read approval %s: %w", id, schemaMissing(err))
	}
	return a, nil
}

// AdoptApproval hands an approval to the tenure at epoch, when its own is
// older: the compare-and-set a seat's next tenure makes when its re-run
// turn asks for the same call. It returns the row as it stands; an epoch
// above the caller's means a newer tenure holds it.
func (s *Store) AdoptApproval(ctx context.Context, id string, epoch int64) (crewlet.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `
		UPDATE approvals SET epoch = $2 WHERE id = $1 AND epoch < $2 RETURNING `+approvalColumns, id, epoch))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.Approval(ctx, id)
	}
	if err != nil {
		return crewlet.Approval{}, fmt.Errorf("adopt approval %s: %w", id, schemaMissing(err))
	}
	return a, nil
}

// Decision is how a pending approval ends.
type Decision struct {
	Status, By, Reason string
	// RememberUntil, set on an approval, also grants the seat the tool
	// until then; RememberArgs narrows the grant to the call's arguments.
	RememberUntil *time.Time
	RememberArgs  bool
}

// DecideApproval ends a pending approval, and records the grant an
// approve-and-remember makes, in one transaction. An approval that is no
// longer pending is returned as it stands, with decided false: the first
// decision stands.
func (s *Store) DecideApproval(ctx context.Context, id string, d Decision) (a crewlet.Approval, decided bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		a, err = scanApproval(tx.QueryRow(ctx, `
			UPDATE approvals SET status = $2, decided_by = $3, reason = $4, remember_until = $5, remember_args = $6, decided_at = now()
			WHERE id = $1 AND status = 'pending' RETURNING `+approvalColumns,
			id, d.Status, d.By, d.Reason, d.RememberUntil, d.RememberArgs))
		if errors.Is(err, pgx.ErrNoRows) {
			a, err = scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return crewlet.Errorf(crewlet.ENOTFOUND, "no approval %q; `crewlet approvals ls` lists the pending ones", id)
			}
			return err
		}
		if err != nil {
			return err
		}
		decided = true
		if d.Status != crewlet.ApprovalApproved || d.RememberUntil == nil {
			return nil
		}
		argsHash := ""
		if d.RememberArgs {
			argsHash = a.ArgsHash
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO approval_grants (handle, tool, args_hash, policy, until, granted_by, approval)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, a.Handle, a.Tool, argsHash, a.Policy, *d.RememberUntil, d.By, a.ID)
		return err
	})
	if err != nil {
		if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
			return crewlet.Approval{}, false, err
		}
		return crewlet.Approval{}, false, fmt.Errorf("decide approval %s: %w", id, schemaMissing(err))
	}
	return a, decided, nil
}

// Granted returns who granted the seat a call of tool with these
// arguments under this policy, remembered and still valid at now; "" when
// no grant covers it.
func (s *Store) Granted(ctx context.Context, handle, tool, argsHash, policy string, now time.Time) (string, error) {
	var by string
	err := s.pool.QueryRow(ctx, `
		SELECT granted_by FROM approval_grants
		WHERE handle = $1 AND tool = $2 AND (args_hash = '' OR args_hash = $3) AND policy = $4 AND until > $5
		ORDER BY until DESC LIMIT 1`, handle, tool, argsHash, policy, now).Scan(&by)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read approval grants of %s: %w", handle, schemaMissing(err))
	}
	return by, nil
}

// ApprovalFilter narrows an approval listing; empty fields match
// everything.
type ApprovalFilter struct {
	Handle, TurnID, Status string
	// Ticket keeps the approvals asked by turns serving that ticket.
	Ticket string
	// Approvers keeps the approvals whose policy names one of them.
	Approvers []string
	Limit     int
}

// Approvals lists approvals, newest first.
func (s *Store) Approvals(ctx context.Context, f ApprovalFilter) ([]crewlet.Approval, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE ($1 = '' OR handle = $1) AND ($2 = '' OR turn_id = $2) AND ($3 = '' OR status = $3)
		  AND ($5::text[] IS NULL OR approvers && $5::text[]) AND ($6 = '' OR ticket = $6)
		ORDER BY created_at DESC, id LIMIT $4`, f.Handle, f.TurnID, f.Status, f.Limit, f.Approvers, f.Ticket)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", schemaMissing(err))
	}
	defer rows.Close()
	out := []crewlet.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("list approvals: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
