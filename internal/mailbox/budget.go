package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet"
)

// DeliveryBudget is how many times an entry is handed to its seat before it
// goes to the dead-letter stream. A handoff between nodes costs one delivery,
// which is what the budget is sized for.
const DeliveryBudget = 25

// DeadLetter is an entry the mailbox gave up on.
type DeadLetter struct {
	// ID is the dead-letter stream id; requeue takes it.
	ID         string          `json:"id"`
	Seat       string          `json:"seat"`
	Reason     string          `json:"reason"`
	Deliveries int64           `json:"deliveries"`
	StreamID   string          `json:"stream_id"`
	At         time.Time       `json:"at"`
	Message    crewlet.Message `json:"message"`
	// Archived says the dead letter was moved to Postgres past
	// mailbox.dead_letter_keep; requeue takes it all the same.
	Archived bool `json:"archived,omitempty"`
}

func (m *Mailbox) deadLetterKey() string { return m.prefix + ":deadletter" }

// deadLetterScript moves one entry to the dead-letter stream and acks it, in
// one step, so it is never both dead-lettered and pending, nor neither.
// KEYS: dead-letter stream, seat stream. ARGV: group, stream id, fields...
var deadLetterScript = redis.NewScript(`
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
`)

// deliveries returns how many times each pending entry was delivered.
func (m *Mailbox) deliveries(ctx context.Context, handle string, msgs []crewlet.Message) (map[string]int64, error) {
	out := map[string]int64{}
	if len(msgs) == 0 {
		return out, nil
	}
	pending, err := m.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: m.Stream(handle), Group: m.Group(handle),
		Start: msgs[0].StreamID, End: msgs[len(msgs)-1].StreamID, Count: int64(len(msgs)) + 1,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("count deliveries of %s: %w", handle, err)
	}
	for _, p := range pending {
		out[p.ID] = p.RetryCount
	}
	return out, nil
}

// deadLetter moves msg to the dead-letter stream with the reason.
func (m *Mailbox) deadLetter(ctx context.Context, handle string, msg crewlet.Message, deliveries int64, reason string) error {
	args := []any{m.Group(handle), msg.StreamID,
		"seat", handle, "stream_id", msg.StreamID, "reason", reason,
		"deliveries", deliveries, "at", time.Now().UTC().Format(time.RFC3339Nano)}
	args = append(args, encode(msg)...)
	if err := deadLetterScript.Run(ctx, m.rdb, []string{m.deadLetterKey(), m.Stream(handle)}, args...).Err(); err != nil {
		return fmt.Errorf("dead-letter %s of %s: %w", msg.EventID, handle, err)
	}
	return nil
}

// DeadLetters returns the newest n dead letters, newest first.
func (m *Mailbox) DeadLetters(ctx context.Context, n int64) ([]DeadLetter, error) {
	return m.DeadLettersBefore(ctx, "", n)
}

// DeadLettersBefore returns the newest n dead letters whose id is before
// the given one (all, when before is empty), newest first.
func (m *Mailbox) DeadLettersBefore(ctx context.Context, before string, n int64) ([]DeadLetter, error) {
	entries, err := m.rdb.XRevRangeN(ctx, m.deadLetterKey(), upperBound(before), "-", n).Result()
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(entries))
	for _, e := range entries {
		out = append(out, decodeDeadLetter(e))
	}
	return out, nil
}

func decodeDeadLetter(e redis.XMessage) DeadLetter {
	field := func(k string) string { s, _ := e.Values[k].(string); return s }
	n, _ := strconv.ParseInt(field("deliveries"), 10, 64)
	at, _ := time.Parse(time.RFC3339Nano, field("at"))
	msg := decode(e)
	msg.StreamID = field("stream_id")
	return DeadLetter{ID: e.ID, Seat: field("seat"), Reason: field("reason"), Deliveries: n,
		StreamID: field("stream_id"), At: at, Message: msg}
}

// requeueScript puts a dead letter back in its seat's mailbox as a new entry
// (a fresh delivery budget) and removes it from the dead-letter stream, in
// one step. It keeps the event id, so the completion ledger still knows it.
// KEYS: dead-letter stream, seat stream. ARGV: dead-letter id, fields...
var requeueScript = redis.NewScript(`
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return false end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
`)

// Requeue puts the dead letter with id back in its seat's mailbox and returns
// it as requeued (StreamID is the new entry's).
func (m *Mailbox) Requeue(ctx context.Context, id string) (DeadLetter, error) {
	entries, err := m.rdb.XRange(ctx, m.deadLetterKey(), id, id).Result()
	if err != nil {
		return DeadLetter{}, fmt.Errorf("read dead letter %s: %w", id, err)
	}
	if len(entries) == 0 {
		return DeadLetter{}, crewlet.Errorf(crewlet.ENOTFOUND, "no dead letter %q; GET /deadletters lists them", id)
	}
	dl := decodeDeadLetter(entries[0])
	args := append([]any{id}, encode(dl.Message)...)
	newID, err := requeueScript.Run(ctx, m.rdb, []string{m.deadLetterKey(), m.Stream(dl.Seat)}, args...).Text()
	if errors.Is(err, redis.Nil) {
		return DeadLetter{}, crewlet.Errorf(crewlet.ENOTFOUND, "dead letter %q was requeued already", id)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("requeue dead letter %s: %w", id, err)
	}
	dl.Message.StreamID = newID
	return dl, nil
}

// Restore puts an archived dead letter back in its seat's mailbox as a new
// entry, as Requeue does one still in the stream, and returns the entry's
// stream id.
func (m *Mailbox) Restore(ctx context.Context, dl DeadLetter) (string, error) {
	id, err := m.rdb.XAdd(ctx, &redis.XAddArgs{Stream: m.Stream(dl.Seat), Values: encode(dl.Message)}).Result()
	if err != nil {
		return "", fmt.Errorf("requeue dead letter %s: %w", dl.ID, err)
	}
	return id, nil
}

// Trim deletes entries the seat has handled (acked) that are older than
// maxAge or beyond the newest maxLen, and never an entry still pending or not
// yet delivered. It returns how many it deleted.
func (m *Mailbox) Trim(ctx context.Context, handle string, maxLen int64, maxAge time.Duration) (int64, error) {
	stream, group := m.Stream(handle), m.Group(handle)
	groups, err := m.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return 0, fmt.Errorf("trim mailbox of %s: %w", handle, noGroup(err, handle))
	}
	safe := ""
	for _, g := range groups {
		if g.Name == group {
			safe = nextID(g.LastDeliveredID)
		}
	}
	if safe == "" {
		return 0, nil
	}
	pending, err := m.rdb.XPending(ctx, stream, group).Result()
	if err != nil {
		return 0, fmt.Errorf("trim mailbox of %s: %w", handle, err)
	}
	if pending.Count > 0 && idLess(pending.Lower, safe) {
		safe = pending.Lower
	}
	bound := fmt.Sprintf("%d-0", time.Now().Add(-maxAge).UnixMilli())
	length, err := m.rdb.XLen(ctx, stream).Result()
	if err != nil {
		return 0, fmt.Errorf("trim mailbox of %s: %w", handle, err)
	}
	if excess := length - maxLen; excess > 0 {
		oldest, err := m.rdb.XRangeN(ctx, stream, "-", "+", excess+1).Result()
		if err != nil {
			return 0, fmt.Errorf("trim mailbox of %s: %w", handle, err)
		}
		if last := oldest[len(oldest)-1].ID; idLess(bound, last) {
			bound = last
		}
	}
	if idLess(safe, bound) {
		bound = safe
	}
	n, err := m.rdb.XTrimMinID(ctx, stream, bound).Result()
	if err != nil {
		return 0, fmt.Errorf("trim mailbox of %s: %w", handle, err)
	}
	return n, nil
}

// Delete removes a seat's mailbox: its stream, group and flags.
func (m *Mailbox) Delete(ctx context.Context, handle string) error {
	if err := m.rdb.Del(ctx, m.Stream(handle), m.awakeKey(handle)).Err(); err != nil {
		return fmt.Errorf("delete mailbox of %s: %w", handle, err)
	}
	return nil
}

// idLess compares two stream ids "ms-seq".
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || (am == bm && as < bs)
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	s, _ := strconv.ParseUint(seq, 10, 64)
	return m, s
}

// nextID is the smallest id after id.
func nextID(id string) string {
	m, s := splitID(id)
	return fmt.Sprintf("%d-%d", m, s+1)
}
