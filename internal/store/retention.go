package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Retention is how long each kind of record TrimRetention trims is kept.
type Retention struct {
	// Messages bounds conversation messages, emptied conversations and
	// compaction summaries.
	Messages       time.Duration
	Events         time.Duration
	Diary          time.Duration
	Episodes       time.Duration
	Counterparties time.Duration
	// Nodes bounds the rows of node incarnations that stopped or went
	// silent; it must exceed the heartbeat timeout, or a live node's row
	// could go.
	Nodes time.Duration
}

// RetentionTrimmed counts what one TrimRetention deleted.
type RetentionTrimmed struct {
	Messages, Conversations, Summaries, Events, Diary, Episodes, Counterparties, Nodes int64
	// HealthTransitions are seat health transitions, kept as long as seat
	// events.
	HealthTransitions int64
}

// TrimRetention deletes, table by table, the records older than their
// retention: messages recorded before it, then conversations created before
// it that have no message left; compaction summaries, seat events, diary
// entries and episodes written before theirs; counterparty profiles last seen
// before theirs; and the rows of node incarnations that stopped, or never
// stopped but last beat, before theirs. Each table is its own statement, so
// one that fails (reported, with the others' counts kept) leaves the rest
// trimmed; the next pass retries it.
func (s *Store) TrimRetention(ctx context.Context, r Retention) (RetentionTrimmed, error) {
	var out RetentionTrimmed
	var errs []error
	for _, step := range []struct {
		what string
		n    *int64
		sql  string
		age  time.Duration
	}{
		{"messages", &out.Messages, `DELETE FROM messages WHERE recorded_at < now() - make_interval(secs => $1)`, r.Messages},
		// SKIP LOCKED passes over a conversation a transcript append is
		// adding a message to (its foreign-key check holds the row), rather
		// than failing on that message once the append commits.
		{"conversations", &out.Conversations, `
			DELETE FROM conversations WHERE id IN (
				SELECT c.id FROM conversations c
				WHERE c.created_at < now() - make_interval(secs => $1)
				  AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id)
				FOR UPDATE SKIP LOCKED)`, r.Messages},
		{"conversation summaries", &out.Summaries, `DELETE FROM conversation_summaries WHERE created_at < now() - make_interval(secs => $1)`, r.Messages},
		{"seat events", &out.Events, `DELETE FROM seat_events WHERE recorded_at < now() - make_interval(secs => $1)`, r.Events},
		{"seat health transitions", &out.HealthTransitions, `DELETE FROM seat_health_transitions WHERE at < now() - make_interval(secs => $1)`, r.Events},
		{"diary entries", &out.Diary, `DELETE FROM agent_diary WHERE recorded_at < now() - make_interval(secs => $1)`, r.Diary},
		{"episodes", &out.Episodes, `DELETE FROM episodes WHERE recorded_at < now() - make_interval(secs => $1)`, r.Episodes},
		{"counterparty profiles", &out.Counterparties, `DELETE FROM counterparty_profiles WHERE last_seen < now() - make_interval(secs => $1)`, r.Counterparties},
		// A stopped row counts from its stop; one that never stopped from
		// its last beat, which a live node renews every few seconds.
		{"node rows", &out.Nodes, `DELETE FROM nodes WHERE COALESCE(stopped_at, heartbeat_at) < now() - make_interval(secs => $1)`, r.Nodes},
	} {
		if step.age <= 0 {
			// A zero retention would delete everything: never what a
			// caller that forgot a field meant.
			errs = append(errs, fmt.Errorf("trim %s: retention %s is not positive", step.what, step.age))
			continue
		}
		tag, err := s.pool.Exec(ctx, step.sql, step.age.Seconds())
		if err != nil {
			errs = append(errs, fmt.Errorf("trim %s: %w", step.what, schemaMissing(err)))
			continue
		}
		*step.n = tag.RowsAffected()
	}
	return out, errors.Join(errs...)
}
