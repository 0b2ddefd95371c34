package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

// ThreadContext is what a thread's model rounds are assembled from, besides
// the thread itself: the seat's part of the trigger's conversation before
// the trigger.
type ThreadContext struct {
	// Summary is the latest compaction summary of what came before the
	// trigger; nil when none was made.
	Summary *crewlet.ConversationSummary
	// Earlier are the exchanges after Summary and before the trigger.
	Earlier []crewlet.Exchange
	// TokensPerByte is the latest calibration of the seat's token estimate
	// among the rounds of the thread and of Earlier's: the input tokens the
	// provider reported over the bytes of context sent. 0 when none is
	// known.
	TokensPerByte float64
}

// ThreadContext reads the seat's part of conversation before the transcript
// message triggerID: the latest summary that covers a prefix of it, then
// every later message the seat was sent, each with the rounds of the thread
// that answered it (a reply received, or a trigger no thread answered, reads
// as its text alone). The trigger's place in the transcript bounds it, so a
// round re-run later reads the same exchanges. threadKey is the key of the
// thread the context is for, whose rounds calibrate TokensPerByte with
// Earlier's. All of it is one transaction.
func (s *Store) ThreadContext(ctx context.Context, seat, conversation, triggerID, threadKey string, userText func(crewlet.Message) string) (ThreadContext, error) {
	return s.ThreadContextAsOf(ctx, seat, conversation, triggerID, threadKey, userText, time.Time{})
}

// ThreadContextAsOf is ThreadContext as it read at asOf (the zero time:
// now): summaries made, turn messages written and rounds recorded at asOf
// or later
// are left out, so a replay reads what the turn it replays read. The
// transcript before the trigger needs no cut: its place bounds it.
func (s *Store) ThreadContextAsOf(ctx context.Context, seat, conversation, triggerID, threadKey string, userText func(crewlet.Message) string, asOf time.Time) (ThreadContext, error) {
	var out ThreadContext
	var cut *time.Time
	if !asOf.IsZero() {
		cut = &asOf
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var until int64
		err := tx.QueryRow(ctx, `SELECT seq FROM messages WHERE id = $1`, triggerID).Scan(&until)
		if errors.Is(err, pgx.ErrNoRows) {
			return crewlet.Errorf(crewlet.ENOTFOUND, "trigger %s is not in the transcript", triggerID)
		}
		if err != nil {
			return err
		}
		var since int64
		var sum crewlet.ConversationSummary
		err = tx.QueryRow(ctx, `
			SELECT through_id, through_seq, covered, summary FROM conversation_summaries
			WHERE seat = $1 AND conversation = $2 AND through_seq < $3 AND ($4::timestamptz IS NULL OR created_at < $4)
			ORDER BY through_seq DESC LIMIT 1`, seat, conversation, until, cut).
			Scan(&sum.ThroughID, &sum.ThroughSeq, &sum.Covered, &sum.Text)
		switch {
		case err == nil:
			out.Summary, since = &sum, sum.ThroughSeq
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT id, seq, type, sender, recipient, body, COALESCE(in_reply_to, ''), sent_at FROM messages
			WHERE conversation_id = $1 AND recipient = $2 AND seq > $3 AND seq < $4 ORDER BY seq`,
			conversation, seat, since, until)
		if err != nil {
			return err
		}
		type sent struct {
			msg crewlet.Message
			seq int64
		}
		msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sent, error) {
			var m sent
			err := r.Scan(&m.msg.EventID, &m.seq, &m.msg.Type, &m.msg.From, &m.msg.To, &m.msg.Body, &m.msg.InReplyTo, &m.msg.SentAt)
			m.msg.Conversation = conversation
			return m, err
		})
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(msgs))
		for _, m := range msgs {
			keys = append(keys, crewlet.ThreadKey(m.msg.EventID))
		}
		threads, err := threadMessages(ctx, tx, seat, keys, cut)
		if err != nil {
			return err
		}
		var unthreaded []string
		for i, m := range msgs {
			if len(threads[keys[i]]) == 0 {
				unthreaded = append(unthreaded, m.msg.EventID)
			}
		}
		answers, err := transcriptAnswers(ctx, tx, seat, conversation, unthreaded, cut)
		if err != nil {
			return err
		}
		for i, m := range msgs {
			x := crewlet.Exchange{MessageID: m.msg.EventID, Seq: m.seq, Messages: threads[keys[i]]}
			if len(x.Messages) == 0 {
				// No thread: a reply received, or a trigger whose turn
				// records were trimmed (turn_retention is shorter than
				// message_retention), which reads as the transcript has it.
				answer, answered := answers[m.msg.EventID]
				if m.msg.Type != crewlet.MessageReply && !answered {
					continue // never answered on its own: a chat message answered with another
				}
				x.Messages = []crewlet.ChatMessage{{Role: "user", Content: userText(m.msg)}}
				if answered {
					x.Messages = append(x.Messages, crewlet.ChatMessage{Role: "assistant", Content: answer})
				}
			}
			out.Earlier = append(out.Earlier, x)
		}
		calibrated := []string{threadKey}
		for _, x := range out.Earlier {
			calibrated = append(calibrated, crewlet.ThreadKey(x.MessageID))
		}
		out.TokensPerByte, err = tokensPerByte(ctx, tx, seat, calibrated, cut)
		return err
	})
	if err != nil {
		return ThreadContext{}, fmt.Errorf("read context of %s in conversation %s: %w", seat, conversation, schemaMissing(err))
	}
	return out, nil
}

// transcriptAnswers returns the seat's recorded replies to the given
// messages of a conversation, by the message they answer.
func transcriptAnswers(ctx context.Context, q pgx.Tx, seat, conversation string, ids []string, cut *time.Time) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `
		SELECT in_reply_to, body FROM messages
		WHERE conversation_id = $1 AND sender = $2 AND type = $3 AND in_reply_to = ANY($4) AND ($5::timestamptz IS NULL OR sent_at < $5) ORDER BY seq`,
		conversation, seat, crewlet.MessageReply, ids, cut)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, body string
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		out[id] = body
	}
	return out, rows.Err()
}

// threadMessages returns the messages of the seat's threads with the given
// keys, each in the order it was written.
func threadMessages(ctx context.Context, q pgx.Tx, seat string, keys []string, cut *time.Time) (map[string][]crewlet.ChatMessage, error) {
	out := map[string][]crewlet.ChatMessage{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `
		SELECT work_key, message FROM turn_messages WHERE seat = $1 AND work_key = ANY($2) AND ($3::timestamptz IS NULL OR created_at < $3)
		ORDER BY seq`, seat, keys, cut)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var m crewlet.ChatMessage
		if err := rows.Scan(&key, &m); err != nil {
			return nil, err
		}
		out[key] = append(out[key], m)
	}
	return out, rows.Err()
}

// tokensPerByte is ThreadContext's TokensPerByte over the rounds of the
// given threads.
func tokensPerByte(ctx context.Context, q pgx.Tx, seat string, threadKeys []string, cut *time.Time) (float64, error) {
	var tokens, bytes int64
	err := q.QueryRow(ctx, `
		SELECT input_tokens, context_bytes FROM turn_rounds
		WHERE seat = $1 AND work_key = ANY($2) AND context_bytes > 0 AND input_tokens > 0 AND ($3::timestamptz IS NULL OR recorded_at < $3)
		ORDER BY recorded_at DESC, round DESC LIMIT 1`, seat, threadKeys, cut).Scan(&tokens, &bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read token calibration of %s: %w", seat, err)
	}
	return float64(tokens) / float64(bytes), nil
}

const summaryColumns = `seat, conversation, through_id, through_seq, covered, summary, profile, input_tokens, output_tokens, created_at`

func scanSummary(r pgx.Row) (wire.Summary, error) {
	var x wire.Summary
	err := r.Scan(&x.Seat, &x.Conversation, &x.ThroughID, &x.ThroughSeq, &x.Covered, &x.Text, &x.Profile,
		&x.InputTokens, &x.OutputTokens, &x.CreatedAt)
	return x, err
}

// SummaryThrough returns the seat's summary of conversation through the
// message throughID; ENOTFOUND when none was made.
func (s *Store) SummaryThrough(ctx context.Context, seat, conversation, throughID string) (wire.Summary, error) {
	x, err := scanSummary(s.pool.QueryRow(ctx, `
		SELECT `+summaryColumns+` FROM conversation_summaries WHERE seat = $1 AND conversation = $2 AND through_id = $3`,
		seat, conversation, throughID))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Summary{}, crewlet.Errorf(crewlet.ENOTFOUND, "no summary of %s through %s", conversation, throughID)
	}
	if err != nil {
		return wire.Summary{}, fmt.Errorf("read summary of %s: %w", conversation, schemaMissing(err))
	}
	return x, nil
}

// SaveSummary stores a compaction summary once per (seat, conversation,
// through id) and returns the one stored: a second writer (a round re-run
// after a crash mid-call) keeps the first.
func (s *Store) SaveSummary(ctx context.Context, x wire.Summary) (wire.Summary, error) {
	stored, err := scanSummary(s.pool.QueryRow(ctx, `
		INSERT INTO conversation_summaries (seat, conversation, through_id, through_seq, covered, summary, profile, input_tokens, output_tokens)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (seat, conversation, through_id) DO NOTHING
		RETURNING `+summaryColumns,
		x.Seat, x.Conversation, x.ThroughID, x.ThroughSeq, x.Covered, x.Text, x.Profile, x.InputTokens, x.OutputTokens))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.SummaryThrough(ctx, x.Seat, x.Conversation, x.ThroughID)
	}
	if err != nil {
		return wire.Summary{}, fmt.Errorf("save summary of %s: %w", x.Conversation, schemaMissing(err))
	}
	return stored, nil
}

// ConversationSummaries returns every summary of a conversation, by seat
// and then in the order of what they cover.
func (s *Store) ConversationSummaries(ctx context.Context, conversation string) ([]wire.Summary, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+summaryColumns+` FROM conversation_summaries WHERE conversation = $1 ORDER BY through_seq, seat`, conversation)
	if err != nil {
		return nil, fmt.Errorf("read summaries of %s: %w", conversation, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.Summary, error) { return scanSummary(r) })
	if err != nil {
		return nil, fmt.Errorf("read summaries of %s: %w", conversation, err)
	}
	return out, nil
}
