package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

// TranscriptEntry is one message of a conversation as recorded.
type TranscriptEntry struct {
	// Seq orders the conversation; GET /conversations/{id}?after=SEQ reads
	// on from it.
	Seq        int64     `json:"seq"`
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	Body       string    `json:"body"`
	InReplyTo  string    `json:"in_reply_to,omitempty"`
	WorkKey    string    `json:"work_key,omitempty"`
	SentAt     time.Time `json:"sent_at"`
	RecordedAt time.Time `json:"recorded_at"`
}

// AppendMessages records messages in their conversations' transcripts in one
// transaction. Messages are keyed by event id, so appending one twice (a turn
// re-run after a crash) records it once. The statements go as one batch, in
// one round trip: a batch outside a transaction runs as one implicit
// transaction, all of it or none.
func (s *Store) AppendMessages(ctx context.Context, workKey string, msgs ...crewlet.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	var batch pgx.Batch
	queueMessages(&batch, workKey, msgs)
	err := s.pool.SendBatch(ctx, &batch).Close()
	if err != nil {
		return fmt.Errorf("append transcript: %w", schemaMissing(err))
	}
	return nil
}

// queueMessages queues AppendMessages' statements on b.
func queueMessages(b *pgx.Batch, workKey string, msgs []crewlet.Message) {
	for _, m := range msgs {
		b.Queue(`INSERT INTO conversations (id) VALUES ($1) ON CONFLICT DO NOTHING`, m.Conversation)
		b.Queue(`
			INSERT INTO messages (id, conversation_id, type, sender, recipient, body, in_reply_to, work_key, sent_at)
			VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), NULLIF($8, ''), $9)
			ON CONFLICT (id) DO NOTHING`,
			m.EventID, m.Conversation, m.Type, m.From, m.To, m.Body, m.InReplyTo, workKey, m.SentAt)
	}
}

// ConversationParty reports whether a conversation is recorded, and whether
// the seat sent or received a message in it.
func (s *Store) ConversationParty(ctx context.Context, id, handle string) (exists, party bool, err error) {
	err = s.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
		       EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1 AND (sender = $2 OR recipient = $2))`, id, handle).Scan(&exists, &party)
	if err != nil {
		return false, false, fmt.Errorf("read the parties of conversation %s: %w", id, schemaMissing(err))
	}
	return exists, party, nil
}

// Conversation returns a conversation's messages in the order they were
// recorded: at most limit (0: all) of those after the message with seq
// after.
func (s *Store) Conversation(ctx context.Context, id string, after int64, limit int) ([]TranscriptEntry, error) {
	if limit <= 0 {
		limit = math.MaxInt32
	}
	rows, err := s.pool.Query(ctx, `
		SELECT seq, id, type, sender, recipient, body, COALESCE(in_reply_to, ''), COALESCE(work_key, ''), sent_at, recorded_at
		FROM messages WHERE conversation_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read conversation %s: %w", id, schemaMissing(err))
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TranscriptEntry, error) {
		var e TranscriptEntry
		err := r.Scan(&e.Seq, &e.ID, &e.Type, &e.From, &e.To, &e.Body, &e.InReplyTo, &e.WorkKey, &e.SentAt, &e.RecordedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read conversation %s: %w", id, err)
	}
	if len(entries) == 0 {
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1)`, id).Scan(&exists); err != nil {
			return nil, fmt.Errorf("read conversation %s: %w", id, err)
		}
		if !exists {
			return nil, crewlet.Errorf(crewlet.ENOTFOUND, "no conversation %q; ids are returned when a message is sent", id)
		}
	}
	return entries, nil
}
