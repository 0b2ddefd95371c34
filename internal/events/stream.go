package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// SeatStream is the Redis stream of a seat's events, next to its mailbox.
func SeatStream(prefix, handle string) string { return prefix + ":seat:" + handle + ":events" }

// ConversationStream is the Redis stream of a conversation's events: the
// cursor a conversation's watcher resumes from is an id of this stream.
func ConversationStream(prefix, id string) string {
	return prefix + ":conversation:" + id + ":events"
}

// toldKey is the hash of the identities of a turn's events written so
// far: one key per turn, not one per event, so what dedupes events costs
// Redis a few hundred bytes a turn.
func toldKey(prefix, handle, turn string) string {
	return prefix + ":seat:" + handle + ":told:" + turn
}

// How long a turn's told identities are kept. While the turn runs, longer
// than any of its waits (an approval's or a ticket's), since a turn re-run
// after its node was lost tells its recorded steps again; once it told
// turn_finished, only as long as a finished step may still be re-run.
const (
	toldWhileRunning = 30 * 24 * time.Hour
	toldAfterFinish  = time.Hour
)

// emitScript writes an event once: unless its identity is in its turn's
// told hash, it adds it there and appends the event to the seat's stream
// and to each conversation stream, each capped and kept for keep_for after
// its last event. One round trip.
// KEYS: told hash, seat stream, conversation streams...
// ARGV: told ttl s, keep, keep_for s, event JSON, identity.
var emitScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], ARGV[5], '1') == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], ARGV[1])
for i = 2, #KEYS do
  redis.call('XADD', KEYS[i], 'MAXLEN', '~', ARGV[2], '*', 'e', ARGV[4])
  redis.call('EXPIRE', KEYS[i], ARGV[3])
end
return 1
`)

// queueSize bounds the events waiting to be written; past it they are
// dropped, so a Redis that stalls costs the turn nothing.
const queueSize = 4096

// batchTimeout bounds one batch's write.
const batchTimeout = 2 * time.Second

// Emitter writes events for one process, in the order they were emitted,
// from one goroutine that pipelines what has queued up. Emit never waits;
// Flush waits, a bounded time, for what was emitted before it.
type Emitter struct {
	rdb    *redis.Client
	prefix string
	org    config.Source
	log    *slog.Logger
	// Dropped counts an event not written: "full" (the queue was) or
	// "failed" (Redis did not take it in time). nil counts nothing.
	Dropped func(reason string)

	// memory is the writer's watch on Redis's memory; memoryFull its last
	// answer, logged when it changes. Only run touches memoryFull.
	memory     *mailbox.Memory
	memoryFull bool

	mu       sync.Mutex
	queue    chan pending
	emitted  uint64
	written  atomic.Uint64
	progress chan struct{}
}

type pending struct {
	seq      uint64
	keys     []string
	payload  string
	identity string
	// told is how long the turn's told identities are kept from now.
	told time.Duration
}

// NewEmitter starts an emitter writing to rdb under the key prefix.
func NewEmitter(rdb *redis.Client, prefix string, org config.Source, log *slog.Logger) *Emitter {
	e := &Emitter{rdb: rdb, prefix: prefix, org: org, log: log, memory: mailbox.NewMemory(rdb), queue: make(chan pending, queueSize), progress: make(chan struct{})}
	go e.run()
	return e
}

// Emit queues ev under its logical identity (what it is of which turn: the
// same step re-run emits the same identity, which is written once). It
// never blocks: a full queue drops the event.
func (e *Emitter) Emit(ev Event, identity string) {
	if e == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	ev.ID = ""
	payload, err := json.Marshal(ev)
	if err != nil {
		e.drop("failed")
		return
	}
	told := toldWhileRunning
	if ev.Kind == TurnFinished {
		told = toldAfterFinish
	}
	keys := []string{toldKey(e.prefix, ev.Seat, ev.Turn), SeatStream(e.prefix, ev.Seat)}
	convs := ev.Data.Conversations
	if ev.Conversation != "" {
		convs = []string{ev.Conversation}
	}
	for _, c := range convs {
		keys = append(keys, ConversationStream(e.prefix, c))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case e.queue <- pending{seq: e.emitted + 1, keys: keys, payload: string(payload), identity: identity, told: told}:
		e.emitted++
	default:
		e.drop("full")
	}
}

func (e *Emitter) drop(reason string) {
	if e.Dropped != nil {
		e.Dropped(reason)
	}
}

// Flush waits until every event emitted before it was written or dropped,
// or until timeout: an activity flushes before it returns, so a node lost
// after the step finished has not lost the step's events.
func (e *Emitter) Flush(timeout time.Duration) {
	if e == nil {
		return
	}
	e.mu.Lock()
	target := e.emitted
	e.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		progress := e.progress
		e.mu.Unlock()
		if e.written.Load() >= target {
			return
		}
		select {
		case <-progress:
		case <-deadline.C:
			return
		}
	}
}

// run writes the queue in batches until the process ends.
func (e *Emitter) run() {
	batch := make([]pending, 0, 256)
	for first := range e.queue {
		batch = append(batch[:0], first)
	more:
		for len(batch) < cap(batch) {
			select {
			case p := <-e.queue:
				batch = append(batch, p)
			default:
				break more
			}
		}
		if e.redisNearlyFull() {
			for range batch {
				e.drop("redis_full")
			}
		} else {
			e.write(batch)
		}
		e.written.Store(batch[len(batch)-1].seq)
		e.mu.Lock()
		close(e.progress)
		e.progress = make(chan struct{})
		e.mu.Unlock()
	}
}

// Events give way to mail: while Redis is past memoryShare of its
// maxmemory, the emitter drops events rather than take the room a publish
// needs (the mailbox refuses new mail only past mailbox.max_memory_percent,
// which is higher).
const memoryShare = 0.8

// redisNearlyFull reports whether Redis is past memoryShare of its
// maxmemory, logging when that changes.
func (e *Emitter) redisNearlyFull() bool {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	full := e.memory.Above(ctx, memoryShare)
	if full != e.memoryFull {
		e.log.Warn("events_redis_memory", "nearly_full", full, "share", memoryShare)
	}
	e.memoryFull = full
	return full
}

func (e *Emitter) write(batch []pending) {
	s := e.org.Now().Stream
	if s.Keep <= 0 || s.KeepFor <= 0 {
		// An org built without the defaults (a test's).
		s.Keep, s.KeepFor = config.DefaultStream.Keep, config.DefaultStream.KeepFor
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, p := range batch {
		cmds[i] = emitScript.EvalSha(ctx, pipe, p.keys, int(p.told.Seconds()), s.Keep, int(s.KeepFor.Seconds()), p.payload, p.identity)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// First use on this Redis: load the script, then go again.
		if err = emitScript.Load(ctx, e.rdb).Err(); err == nil {
			pipe = e.rdb.Pipeline()
			for i, p := range batch {
				cmds[i] = emitScript.EvalSha(ctx, pipe, p.keys, int(p.told.Seconds()), s.Keep, int(s.KeepFor.Seconds()), p.payload, p.identity)
			}
			_, err = pipe.Exec(ctx)
		}
	}
	if err == nil {
		return
	}
	failed := 0
	for _, c := range cmds {
		if c.Err() != nil {
			failed++
			e.drop("failed")
		}
	}
	e.log.Warn("events_unwritten", "events", failed, "error", err)
}

// Reader reads event streams for the API, on a Redis client of its own:
// each open stream holds one of its connections in a blocking read.
type Reader struct {
	rdb    *redis.Client
	prefix string
}

// NewReader reads with a client like base's, whose pool holds maxOpen
// blocking reads besides a few quick ones.
func NewReader(base *redis.Client, prefix string, maxOpen int) *Reader {
	opts := *base.Options()
	opts.PoolSize = maxOpen + 8
	return &Reader{rdb: redis.NewClient(&opts), prefix: prefix}
}

// Close closes the reader's client.
func (r *Reader) Close() error { return r.rdb.Close() }

// SeatStream and ConversationStream are the streams a reader reads.
func (r *Reader) SeatStream(handle string) string { return SeatStream(r.prefix, handle) }

// ConversationStream is the stream of a conversation's events.
func (r *Reader) ConversationStream(id string) string { return ConversationStream(r.prefix, id) }

// Tail is the id of the stream's newest event, "0-0" when it has none: the
// cursor of a reader that wants what comes from now on.
func (r *Reader) Tail(ctx context.Context, stream string) (string, error) {
	last, err := r.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("read the tail of %s: %w", stream, err)
	}
	if len(last) == 0 {
		return "0-0", nil
	}
	return last[0].ID, nil
}

// readBatch is the most events one read returns.
const readBatch = 256

// Read returns the stream's events after the id after, oldest first,
// waiting up to block for one when there is none yet (an empty answer
// then); a block of 0 does not wait.
func (r *Reader) Read(ctx context.Context, stream, after string, block time.Duration) ([]Event, error) {
	if block <= 0 {
		block = -1 // XREAD without BLOCK; BLOCK 0 would wait forever
	}
	res, err := r.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, after}, Count: readBatch, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", stream, err)
	}
	var out []Event
	for _, s := range res {
		for _, m := range s.Messages {
			var ev Event
			raw, _ := m.Values["e"].(string)
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				return nil, fmt.Errorf("event %s of %s: %w", m.ID, stream, err)
			}
			ev.ID = m.ID
			out = append(out, ev)
		}
	}
	return out, nil
}
