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
	// Tickets bounds settled tickets, counted from their settling; an open
	// one is never trimmed.
	Tickets time.Duration
	// Approvals bounds decided approvals, counted from their decision; a
	// pending one, or one whose remembered grant still holds, is kept.
	Approvals time.Duration
	// PersonMail bounds a person's archived mail, counted from when it was
	// sent; mail past the person's read mark is kept however old.
	PersonMail time.Duration
	// DiaryPerSeat is the most diary entries a seat keeps: its newest.
	DiaryPerSeat int
}

// RetentionTrimmed counts what one TrimRetention deleted.
type RetentionTrimmed struct {
	Messages, Conversations, Summaries, Events, Diary, Episodes, Counterparties, Nodes int64
	Tickets, Approvals, PersonMail                                                     int64
	// DiaryOverCap are diary entries past their seat's DiaryPerSeat.
	DiaryOverCap int64
	// HealthTransitions are seat health transitions, kept as long as seat
	// events.
	HealthTransitions int64
}

// TrimRetention deletes, table by table, the records older than their
// retention: messages recorded before it, then conversations created before
// it that have no message left; compaction summaries, seat events, diary
// entries and episodes written before theirs; counterparty profiles last seen
// before theirs; the rows of node incarnations that stopped, or never
// stopped but last beat, before theirs; tickets settled, approvals decided and
// a person's read mail sent before theirs; and each seat's diary entries past
// its newest DiaryPerSeat. Each table is its own statement, so
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
		// Nothing references a ticket by key: a sub-ticket copies its
		// parent's chain when it is opened, so it outlives its parent.
		{"tickets", &out.Tickets, `
			DELETE FROM tickets WHERE phase NOT IN ('pending', 'asking')
			  AND settled_at < now() - make_interval(secs => $1)`, r.Tickets},
		// An approval's grants go with it (ON DELETE CASCADE), so one
		// whose approve-and-remember still holds stays until it lapses.
		{"approvals", &out.Approvals, `
			DELETE FROM approvals a WHERE a.status <> 'pending'
			  AND a.decided_at < now() - make_interval(secs => $1)
			  AND NOT EXISTS (SELECT 1 FROM approval_grants g WHERE g.approval = a.id AND g.until > now())`, r.Approvals},
		// ms is the entry's stream time, when it was sent; nothing after
		// the person's read mark goes, so mail never read stays.
		{"person mail", &out.PersonMail, `
			DELETE FROM person_mail p
			WHERE p.ms < (extract(epoch FROM now()) - $1) * 1000
			  AND EXISTS (SELECT 1 FROM person_mail_read r WHERE r.seat = p.seat AND (p.ms, p.seq) <= (r.ms, r.seq))`, r.PersonMail},
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
	if r.DiaryPerSeat <= 0 {
		errs = append(errs, fmt.Errorf("trim diary entries past the per-seat cap: cap %d is not positive", r.DiaryPerSeat))
		return out, errors.Join(errs...)
	}
	// Each seat's newest entries by id, as the diary pages read them, walk
	// the (seat, id DESC) index; the cap's worth are skipped and the rest go.
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM agent_diary WHERE id IN (
			SELECT over.id FROM (SELECT DISTINCT seat FROM agent_diary) s
			CROSS JOIN LATERAL (
				SELECT id FROM agent_diary d WHERE d.seat = s.seat ORDER BY id DESC OFFSET $1) over)`, r.DiaryPerSeat)
	if err != nil {
		errs = append(errs, fmt.Errorf("trim diary entries past the per-seat cap: %w", schemaMissing(err)))
	} else {
		out.DiaryOverCap = tag.RowsAffected()
	}
	return out, errors.Join(errs...)
}
