package store

import (
	"context"
	"fmt"
	"time"

	"github.com/crewlet/crewlet/internal/wire"

	"github.com/jackc/pgx/v5"
)

// RecordAudit appends to the audit log.
func (s *Store) RecordAudit(ctx context.Context, e wire.AuditEntry) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO audit_log (principal, role, action, target, outcome, status, reason, request_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		e.Principal, e.Role, e.Action, e.Target, e.Outcome, e.Status, e.Reason, e.RequestID)
	if err != nil {
		return fmt.Errorf("record audit: %w", schemaMissing(err))
	}
	return nil
}

// AuditFilter narrows an audit listing; empty fields match everything.
type AuditFilter struct {
	Principal, Outcome, Action string
	// Before pages back: only rows with a smaller id.
	Before int64
	Limit  int
}

// Audit lists the audit log, newest first.
func (s *Store) Audit(ctx context.Context, f AuditFilter) ([]wire.AuditEntry, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, principal, role, action, target, outcome, status, reason, request_id FROM audit_log
		WHERE ($1 = '' OR principal = $1) AND ($2 = '' OR outcome = $2) AND ($3 = '' OR action = $3) AND ($4 = 0 OR id < $4)
		ORDER BY id DESC LIMIT $5`, f.Principal, f.Outcome, f.Action, f.Before, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[wire.AuditEntry])
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}

// TrimAudit deletes audit rows older than age.
func (s *Store) TrimAudit(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM audit_log WHERE at < now() - make_interval(secs => $1)`, age.Seconds())
	if err != nil {
		return 0, fmt.Errorf("trim audit log: %w", schemaMissing(err))
	}
	return tag.RowsAffected(), nil
}
