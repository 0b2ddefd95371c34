package mailbox

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet"
)

// Nothing in a mailbox is deleted unread
// (docs/operations.md, "Redis durability"): what does not fit in Redis moves to Postgres. A move is
// two steps, the caller's insert keyed on the entry's stream id and then
// Remove, so a move cut short by a crash is repeated, never lost and never
// doubled.

// Overflow returns the oldest entries of a seat's mailbox beyond its newest
// keep, at most max of them, oldest first: what a human seat's mailbox
// moves to Postgres.
func (m *Mailbox) Overflow(ctx context.Context, handle string, keep, max int64) ([]crewlet.Message, error) {
	entries, err := m.overflow(ctx, m.Stream(handle), keep, max)
	if err != nil {
		return nil, fmt.Errorf("read the oldest mail of %s: %w", handle, err)
	}
	return decodeAll(entries), nil
}

// DeadLetterOverflow is Overflow for the dead-letter stream.
func (m *Mailbox) DeadLetterOverflow(ctx context.Context, keep, max int64) ([]DeadLetter, error) {
	entries, err := m.overflow(ctx, m.deadLetterKey(), keep, max)
	if err != nil {
		return nil, fmt.Errorf("read the oldest dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(entries))
	for _, e := range entries {
		out = append(out, decodeDeadLetter(e))
	}
	return out, nil
}

func (m *Mailbox) overflow(ctx context.Context, stream string, keep, max int64) ([]redis.XMessage, error) {
	length, err := m.rdb.XLen(ctx, stream).Result()
	if err != nil {
		return nil, err
	}
	excess := min(length-keep, max)
	if excess <= 0 {
		return nil, nil
	}
	return m.rdb.XRangeN(ctx, stream, "-", "+", excess).Result()
}

// Remove deletes entries from a seat's mailbox once they are kept
// elsewhere.
func (m *Mailbox) Remove(ctx context.Context, handle string, streamIDs []string) error {
	if len(streamIDs) == 0 {
		return nil
	}
	if err := m.rdb.XDel(ctx, m.Stream(handle), streamIDs...).Err(); err != nil {
		return fmt.Errorf("remove moved mail of %s: %w", handle, err)
	}
	return nil
}

// RemoveDeadLetters deletes dead letters once they are kept elsewhere.
func (m *Mailbox) RemoveDeadLetters(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := m.rdb.XDel(ctx, m.deadLetterKey(), ids...).Err(); err != nil {
		return fmt.Errorf("remove moved dead letters: %w", err)
	}
	return nil
}

// retireScript moves one entry of a retired mailbox to the dead-letter
// stream and deletes it from the mailbox in one step, so a retirement cut
// short and run again dead-letters each entry once.
// KEYS: dead-letter stream, seat stream. ARGV: stream id, fields...
var retireScript = redis.NewScript(`
if redis.call('XDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
return 1
`)

// retireBatch is how many entries one step of DeadLetterUnread reads.
const retireBatch = 500

// DeadLetterUnread moves every entry of a seat's mailbox that the seat has
// not handled (never delivered, or delivered and not acked) to the
// dead-letter stream with the reason, and returns how many it moved. Entries
// the seat handled stay for Delete. A mailbox without its group has
// handled nothing, so all of it moves.
func (m *Mailbox) DeadLetterUnread(ctx context.Context, handle, reason string) (int64, error) {
	stream, group := m.Stream(handle), m.Group(handle)
	delivered := "0-0"
	groups, err := m.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil && !isNoSuchKey(err) {
		return 0, fmt.Errorf("dead-letter the unread mail of %s: %w", handle, err)
	}
	for _, g := range groups {
		if g.Name == group {
			delivered = g.LastDeliveredID
		}
	}
	pending, err := m.allPending(ctx, stream, group)
	if err != nil {
		return 0, fmt.Errorf("dead-letter the unread mail of %s: %w", handle, err)
	}
	var moved int64
	for start := "-"; ; {
		entries, err := m.rdb.XRangeN(ctx, stream, start, "+", retireBatch).Result()
		if err != nil {
			return moved, fmt.Errorf("dead-letter the unread mail of %s: %w", handle, err)
		}
		for _, e := range entries {
			n, isPending := pending[e.ID]
			if !isPending && !idLess(delivered, e.ID) {
				continue // handled: acked, and Delete takes it
			}
			msg := decode(e)
			args := []any{e.ID, "seat", handle, "stream_id", e.ID, "reason", reason,
				"deliveries", n, "at", time.Now().UTC().Format(time.RFC3339Nano)}
			args = append(args, encode(msg)...)
			did, err := retireScript.Run(ctx, m.rdb, []string{m.deadLetterKey(), stream}, args...).Int()
			if err != nil {
				return moved, fmt.Errorf("dead-letter %s of %s: %w", msg.EventID, handle, err)
			}
			moved += int64(did)
		}
		if len(entries) < retireBatch {
			return moved, nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}

// allPending returns every entry of the group read and not acked, with
// its delivery count; none when the stream or group is missing.
func (m *Mailbox) allPending(ctx context.Context, stream, group string) (map[string]int64, error) {
	out := map[string]int64{}
	for start := "-"; ; {
		page, err := m.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: "+", Count: retireBatch}).Result()
		if err != nil {
			if isNoGroup(err) || isNoSuchKey(err) {
				return out, nil
			}
			return nil, err
		}
		for _, p := range page {
			out[p.ID] = p.RetryCount
		}
		if len(page) < retireBatch {
			return out, nil
		}
		start = "(" + page[len(page)-1].ID
	}
}

func isNoSuchKey(err error) bool { return err != nil && err.Error() == "ERR no such key" }

// upperBound is the XREVRANGE end for "before id": exclusive, or the
// stream's end when id is empty.
func upperBound(before string) string {
	if before == "" {
		return "+"
	}
	return "(" + before
}

// IDLess reports whether stream id a comes before b.
func IDLess(a, b string) bool { return idLess(a, b) }

// SplitID splits a stream id into its millisecond and sequence parts.
func SplitID(id string) (ms, seq uint64) { return splitID(id) }
