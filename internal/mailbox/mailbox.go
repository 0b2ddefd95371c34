// Package mailbox keeps each seat's mailbox in a Redis stream with one
// consumer group per seat (docs/architecture.md, "Mailboxes").
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

// Mailbox reads and writes seat mailboxes.
type Mailbox struct {
	rdb    *redis.Client
	prefix string
	memory *Memory
}

// Open connects to Redis and checks the connection.
func Open(ctx context.Context, url, prefix string) (*Mailbox, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, errors.New("parse redis url: not a valid redis:// URL")
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect redis at %s: %w", opts.Addr, err)
	}
	return &Mailbox{rdb: rdb, prefix: prefix, memory: NewMemory(rdb)}, nil
}

// Close closes the Redis client.
func (m *Mailbox) Close() error { return m.rdb.Close() }

// Redis is the client the mailboxes use, for the other Redis keys crewlet
// keeps under the same prefix (the live event streams).
func (m *Mailbox) Redis() *redis.Client { return m.rdb }

// Prefix is the key prefix (mailbox.key_prefix) every key is under.
func (m *Mailbox) Prefix() string { return m.prefix }

// Ping checks that Redis answers.
func (m *Mailbox) Ping(ctx context.Context) error { return m.rdb.Ping(ctx).Err() }

// Stream is the Redis stream holding a seat's mailbox.
func (m *Mailbox) Stream(handle string) string { return m.prefix + ":seat:" + handle + ":inbox" }

// Group is the consumer group the seat reads its mailbox through.
func (m *Mailbox) Group(handle string) string { return "seat-" + handle }

func (m *Mailbox) awakeKey(handle string) string { return m.prefix + ":seat:" + handle + ":awake" }

func (m *Mailbox) sentKey(eventID string) string { return m.prefix + ":sent:" + eventID }

// Ensure creates the seat's stream and consumer group if they are missing.
// The group starts at the beginning of the stream, so mail published before
// the group existed is still delivered.
func (m *Mailbox) Ensure(ctx context.Context, handle string) error {
	_, err := m.EnsureCreated(ctx, handle)
	return err
}

// EnsureCreated is Ensure, and says whether the group (and with it, maybe,
// the stream) had to be created.
func (m *Mailbox) EnsureCreated(ctx context.Context, handle string) (created bool, err error) {
	err = m.rdb.XGroupCreateMkStream(ctx, m.Stream(handle), m.Group(handle), "0").Err()
	switch {
	case err == nil:
		return true, nil
	case strings.HasPrefix(err.Error(), "BUSYGROUP"):
		return false, nil
	}
	return false, fmt.Errorf("create mailbox for %s: %w", handle, err)
}

// awakeTTL bounds how long a stale "awake" flag can suppress wake signals if a
// seat workflow vanished without clearing it; the seat's backstop timer and the
// reconciler cover the same gap from the other side.
const awakeTTL = 10 * time.Minute

// sentTTL is how long a published event id is remembered, so re-publishing the
// same event (a turn re-run after a crash) adds nothing. It outlives any
// redelivery of the turn that produced the event.
const sentTTL = 7 * 24 * time.Hour

// Quotas are what a new message is checked against, in the same step that
// adds it, so no two publishes both take the last room. A zero field is
// not checked: mail carrying accepted work (crewlet.AcceptedWork) is
// published with none.
type Quotas struct {
	// MaxUnread refuses mail to a mailbox holding this many unhandled
	// entries (mailbox.max_unread).
	MaxUnread int64
	// SenderPerMinute refuses a sender's message past this many in its
	// current minute (mailbox.sender_per_minute); the minute starts at
	// the sender's first message.
	SenderPerMinute int64
	// MemoryShare refuses mail while Redis uses more than this share of
	// its maxmemory (mailbox.max_memory_percent).
	MemoryShare float64
}

// senderWindow is the span SenderPerMinute counts over.
const senderWindow = time.Minute

func (m *Mailbox) senderKey(from string) string { return m.prefix + ":sender:" + from }

// publishScript appends an entry unless its event id was already published,
// then raises the seat's awake flag; with quotas, it first refuses the entry
// if the mailbox holds max unread entries or the sender is past its count
// this minute. It runs atomically in Redis.
// Unhandled entries are the group's pending plus its lag (entries never
// delivered); when Redis cannot tell the lag (entries were deleted, as in
// a human seat's mailbox whose oldest went to Postgres), or the group is
// missing, the stream's length counts instead, which is never less.
// KEYS: stream, sent key, awake key, sender key.
// ARGV: sent ttl s, awake ttl s, group, max unread (0: unchecked),
// sender per window (0: unchecked), window s, fields...
// Returns {stream id, 1 if this call raised the awake flag}, or
// {"", -1, unread} for a full mailbox, {"", -2, seconds left} for a
// sender past its quota.
var publishScript = redis.NewScript(`
local prev = redis.call('GET', KEYS[2])
if prev then return {prev, 0} end
local cap = tonumber(ARGV[4])
if cap > 0 then
  local unread = 0
  local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
  if type(groups) == 'table' and not groups.err then
    unread = -1
    for _, g in ipairs(groups) do
      local f = {}
      for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
      if f['name'] == ARGV[3] and f['lag'] then unread = f['pending'] + f['lag'] end
    end
    if unread < 0 then unread = redis.call('XLEN', KEYS[1]) end
  end
  if unread >= cap then return {'', -1, unread} end
end
local limit = tonumber(ARGV[5])
if limit > 0 then
  local n = redis.call('INCR', KEYS[4])
  if n == 1 then redis.call('EXPIRE', KEYS[4], ARGV[6]) end
  if n > limit then return {'', -2, redis.call('TTL', KEYS[4])} end
end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 7))
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
if redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[2]) then return {id, 1} end
return {id, 0}
`)

// Publish appends msg to its recipient's mailbox, at most once per event id,
// unless q refuses it: a full mailbox or a Redis past its memory line is
// EFULL, a sender past its quota ERATELIMITED (with when to try again).
// It reports whether the caller must signal wake: true only when this
// publish found the seat asleep, so wake signals are bounded by sleep
// cycles.
func (m *Mailbox) Publish(ctx context.Context, msg crewlet.Message, q Quotas) (streamID string, wake bool, err error) {
	if q.MemoryShare > 0 && m.memory.Above(ctx, q.MemoryShare) {
		return "", false, crewlet.Errorf(crewlet.EFULL, "Redis is past %.0f%% of its memory (mailbox.max_memory_percent), so new mail is refused until seats catch up or an operator adds memory; try again later", q.MemoryShare*100)
	}
	args := []any{int(sentTTL.Seconds()), int(awakeTTL.Seconds()), m.Group(msg.To), q.MaxUnread, q.SenderPerMinute, int(senderWindow.Seconds())}
	args = append(args, encode(msg)...)
	res, err := publishScript.Run(ctx, m.rdb,
		[]string{m.Stream(msg.To), m.sentKey(msg.EventID), m.awakeKey(msg.To), m.senderKey(msg.From)}, args...).Slice()
	if err != nil {
		return "", false, fmt.Errorf("publish to %s: %w", msg.To, err)
	}
	id, _ := res[0].(string)
	code, _ := res[1].(int64)
	switch code {
	case -1:
		return "", false, crewlet.Errorf(crewlet.EFULL, "the mailbox of %s holds %d unhandled messages, the most mailbox.max_unread allows; it takes new mail once %s catches up", msg.To, q.MaxUnread, msg.To)
	case -2:
		left, _ := res[2].(int64)
		if left < 1 {
			left = 1
		}
		e := crewlet.Errorf(crewlet.ERATELIMITED, "%s sent more than %d messages in a minute (mailbox.sender_per_minute); try again in %d s", msg.From, q.SenderPerMinute, left)
		e.RetryAfter = time.Duration(left) * time.Second
		return "", false, e
	}
	return id, code == 1, nil
}

// ReadResult is one mailbox read.
type ReadResult struct {
	Messages []crewlet.Message
	// DeadLettered are entries this read found past the delivery budget and
	// moved to the dead-letter stream instead of handing them out.
	DeadLettered []DeadLetter
	// Lag is how many entries are still unread after this read.
	Lag int64
}

// ReadRequest says who reads, how much, and what to record on an entry that
// exhausted its delivery budget.
type ReadRequest struct {
	Handle   string
	Consumer string
	Max      int
	// ClearAwake lowers the awake flag when the mailbox is empty and reads
	// once more, so mail published in between is not missed and the next
	// publish signals wake.
	ClearAwake bool
	// NewOnly skips the reclaim: only entries never delivered are read. A
	// seat reads so while a turn runs (on_busy reject or interrupt), whose
	// own triggers are pending and must not be taken back. With ClearAwake
	// the flag is lowered before the read, whatever it finds.
	NewOnly bool
	// LastError is the seat's last error, recorded as the reason of a dead
	// letter.
	LastError string
}

// Read hands the seat up to Max entries: first those still pending from
// earlier reads that never acked (a crashed turn, an earlier tenure), then new
// ones. An entry delivered DeliveryBudget times already goes to the
// dead-letter stream instead.
func (m *Mailbox) Read(ctx context.Context, req ReadRequest) (ReadResult, error) {
	var res ReadResult
	if req.NewOnly && req.ClearAwake {
		// A read while a turn runs: the flag goes down first, so whatever
		// is published after this read signals wake again.
		if err := m.ClearAwake(ctx, req.Handle); err != nil {
			return res, err
		}
	}
	if err := m.read(ctx, req, &res); err != nil {
		return res, err
	}
	if len(res.Messages) == 0 && req.ClearAwake && !req.NewOnly {
		if err := m.ClearAwake(ctx, req.Handle); err != nil {
			return res, err
		}
		if err := m.read(ctx, req, &res); err != nil {
			return res, err
		}
	}
	groups, err := m.rdb.XInfoGroups(ctx, m.Stream(req.Handle)).Result()
	if err == nil {
		for _, g := range groups {
			if g.Name == m.Group(req.Handle) {
				res.Lag = g.Lag
			}
		}
	}
	return res, nil
}

// ClearAwake lowers the seat's awake flag, so the next publish signals wake.
func (m *Mailbox) ClearAwake(ctx context.Context, handle string) error {
	if err := m.rdb.Del(ctx, m.awakeKey(handle)).Err(); err != nil {
		return fmt.Errorf("clear awake flag of %s: %w", handle, err)
	}
	return nil
}

func (m *Mailbox) read(ctx context.Context, req ReadRequest, res *ReadResult) error {
	handle := req.Handle
	stream, group := m.Stream(handle), m.Group(handle)
	var claimed []redis.XMessage
	if !req.NewOnly {
		var err error
		claimed, _, err = m.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: group, Consumer: req.Consumer, MinIdle: 0, Start: "0-0", Count: int64(req.Max),
		}).Result()
		if err != nil {
			return fmt.Errorf("reclaim mail of %s: %w", handle, noGroup(err, handle))
		}
	}
	reclaimed := decodeAll(claimed)
	counts, err := m.deliveries(ctx, handle, reclaimed)
	if err != nil {
		return err
	}
	for _, msg := range reclaimed {
		msg.Deliveries = counts[msg.StreamID]
		if msg.Deliveries <= DeliveryBudget {
			res.Messages = append(res.Messages, msg)
			continue
		}
		reason := fmt.Sprintf("delivered %d times without completing", DeliveryBudget)
		if req.LastError != "" {
			reason += "; last error: " + req.LastError
		}
		if err := m.deadLetter(ctx, handle, msg, msg.Deliveries-1, reason); err != nil {
			return err
		}
		res.DeadLettered = append(res.DeadLettered, DeadLetter{Seat: handle, Reason: reason, Deliveries: msg.Deliveries - 1, StreamID: msg.StreamID, Message: msg})
	}
	if len(res.Messages) >= req.Max || len(claimed) >= req.Max {
		return nil
	}
	streams, err := m.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: group, Consumer: req.Consumer, Streams: []string{stream, ">"}, Count: int64(req.Max - len(res.Messages)), Block: -1,
	}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read mail of %s: %w", handle, noGroup(err, handle))
	}
	for _, s := range streams {
		for _, msg := range decodeAll(s.Messages) {
			msg.Deliveries = 1
			res.Messages = append(res.Messages, msg)
		}
	}
	return nil
}

func noGroup(err error, handle string) error {
	if isNoGroup(err) {
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "mailbox of %s does not exist yet; it is created when a node boots", handle)
	}
	return err
}

// isNoGroup reports Redis saying a stream's consumer group does not exist.
func isNoGroup(err error) bool {
	return strings.HasPrefix(err.Error(), "NOGROUP")
}

// Get returns the entries with the given stream ids, in the order asked.
// Entries that no longer exist are left out.
func (m *Mailbox) Get(ctx context.Context, handle string, streamIDs []string) ([]crewlet.Message, error) {
	pipe := m.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(streamIDs))
	for i, id := range streamIDs {
		cmds[i] = pipe.XRange(ctx, m.Stream(handle), id, id)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("fetch mail of %s: %w", handle, err)
	}
	var msgs []crewlet.Message
	for _, c := range cmds {
		msgs = append(msgs, decodeAll(c.Val())...)
	}
	return msgs, nil
}

// Ack marks entries handled; they are never delivered again.
func (m *Mailbox) Ack(ctx context.Context, handle string, streamIDs []string) error {
	if len(streamIDs) == 0 {
		return nil
	}
	if err := m.rdb.XAck(ctx, m.Stream(handle), m.Group(handle), streamIDs...).Err(); err != nil {
		return fmt.Errorf("ack mail of %s: %w", handle, err)
	}
	return nil
}

// Recent returns the newest n entries of a seat's mailbox, newest last.
func (m *Mailbox) Recent(ctx context.Context, handle string, n int64) ([]crewlet.Message, error) {
	return m.RecentBefore(ctx, handle, "", n)
}

// RecentBefore returns the newest n entries of a seat's mailbox whose
// stream id is before the given one (all, when before is empty), newest
// last. It is how people read what of a human seat's mail is still in
// Redis.
func (m *Mailbox) RecentBefore(ctx context.Context, handle, before string, n int64) ([]crewlet.Message, error) {
	entries, err := m.rdb.XRevRangeN(ctx, m.Stream(handle), upperBound(before), "-", n).Result()
	if err != nil {
		return nil, fmt.Errorf("list mail of %s: %w", handle, err)
	}
	msgs := decodeAll(entries)
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	return msgs, nil
}

// Pending returns how many entries the seat has read but not acked.
func (m *Mailbox) Pending(ctx context.Context, handle string) (int64, error) {
	p, err := m.rdb.XPending(ctx, m.Stream(handle), m.Group(handle)).Result()
	if err != nil {
		return 0, fmt.Errorf("count pending mail of %s: %w", handle, err)
	}
	return p.Count, nil
}

// Deliveries returns, for each entry the seat has read but not acked (by
// stream id), how many times it was delivered: what its delivery budget has
// spent. A held turn's triggers keep their count while they wait.
func (m *Mailbox) Deliveries(ctx context.Context, handle string) (map[string]int64, error) {
	pending, err := m.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: m.Stream(handle), Group: m.Group(handle), Start: "-", End: "+", Count: maxPendingShown,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("count deliveries of %s: %w", handle, err)
	}
	out := make(map[string]int64, len(pending))
	for _, p := range pending {
		out[p.ID] = p.RetryCount
	}
	return out, nil
}

// maxPendingShown bounds Deliveries: a seat reads at most a batch at a time,
// so more pending entries than this mean something else is wrong.
const maxPendingShown = 1000

func encode(msg crewlet.Message) []any {
	fields := []any{
		"event_id", msg.EventID,
		"type", msg.Type,
		"from", msg.From,
		"to", msg.To,
		"conversation", msg.Conversation,
		"in_reply_to", msg.InReplyTo,
		"chat_id", msg.ChatID,
		"ticket", msg.Ticket,
		"body", msg.Body,
		"sent_at", msg.SentAt.UTC().Format(time.RFC3339Nano),
	}
	if msg.Trace != "" {
		fields = append(fields, "traceparent", msg.Trace)
	}
	return fields
}

func decodeAll(entries []redis.XMessage) []crewlet.Message {
	msgs := make([]crewlet.Message, 0, len(entries))
	for _, e := range entries {
		if e.Values == nil {
			continue
		}
		msgs = append(msgs, decode(e))
	}
	return msgs
}

func decode(e redis.XMessage) crewlet.Message {
	field := func(k string) string { s, _ := e.Values[k].(string); return s }
	sentAt, _ := time.Parse(time.RFC3339Nano, field("sent_at"))
	return crewlet.Message{
		EventID:      field("event_id"),
		StreamID:     e.ID,
		Type:         field("type"),
		From:         field("from"),
		To:           field("to"),
		Conversation: field("conversation"),
		InReplyTo:    field("in_reply_to"),
		ChatID:       field("chat_id"),
		Ticket:       field("ticket"),
		Body:         field("body"),
		Trace:        field("traceparent"),
		SentAt:       sentAt,
	}
}

// ValidStreamID reports whether id is a Redis stream entry id, two
// unsigned 64-bit numbers joined by a dash (milliseconds, then a sequence
// number): a dead letter's id, or a live stream's Last-Event-ID.
func ValidStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, msErr := strconv.ParseUint(ms, 10, 64)
	_, seqErr := strconv.ParseUint(seq, 10, 64)
	return msErr == nil && seqErr == nil
}
