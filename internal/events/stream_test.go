package events_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/testenv"
)

func emitter(t *testing.T) (*events.Emitter, *events.Reader, string) {
	t.Helper()
	opts, err := redis.ParseURL(testenv.Stack(t).RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	org, err := config.Parse([]byte("company: { name: streamco }\nseats: [ { handle: alice, kind: human } ]\n"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := "events" + testenv.Suffix()
	r := events.NewReader(rdb, prefix, 4)
	t.Cleanup(func() { _ = r.Close() })
	return events.NewEmitter(rdb, prefix, org, slog.New(slog.DiscardHandler)), r, prefix
}

// An event emitted twice under one identity (a step re-run) is written
// once; events come out in the order they went in, to the seat's stream
// and the conversation's, and a reader resumes after the id it last saw.
func TestEmitWritesEachEventOnceInOrder(t *testing.T) {
	e, r, _ := emitter(t)
	ctx := context.Background()
	ev := func(kind string, round int) events.Event {
		return events.Event{Seat: "s1", Conversation: "c1", Turn: "turn/s1/w1", Kind: kind, Data: events.Data{Round: round}}
	}
	e.Emit(ev(events.TurnStarted, 0), "started")
	e.Emit(ev(events.RoundStarted, 1), "round|1")
	e.Emit(ev(events.RoundStarted, 1), "round|1")
	e.Emit(ev(events.ModelOutput, 1), "output|1")
	e.Flush(5 * time.Second)
	e.Emit(ev(events.TurnStarted, 0), "started")
	e.Flush(5 * time.Second)

	for _, stream := range []string{r.SeatStream("s1"), r.ConversationStream("c1")} {
		got, err := r.Read(ctx, stream, "0-0", 0)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, g := range got {
			kinds = append(kinds, g.Kind)
		}
		want := []string{events.TurnStarted, events.RoundStarted, events.ModelOutput}
		if len(kinds) != len(want) || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
			t.Fatalf("%s holds %v; want %v, each once", stream, kinds, want)
		}
		rest, err := r.Read(ctx, stream, got[0].ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rest) != 2 || rest[0].ID != got[1].ID {
			t.Errorf("read after %s gave %d events starting %v; want the 2 after it", got[0].ID, len(rest), rest)
		}
	}
	tail, err := r.Tail(ctx, r.SeatStream("s1"))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	none, err := r.Read(ctx, r.SeatStream("s1"), tail, 200*time.Millisecond)
	if err != nil || len(none) != 0 {
		t.Errorf("read after the tail: %v %v; want nothing", none, err)
	}
	if time.Since(began) < 150*time.Millisecond {
		t.Errorf("an empty read returned after %s; want it to wait its block", time.Since(began))
	}
}

// What a principal who may not read the transcript sees: the event and its
// shape, without model text, tool arguments or results.
func TestRedactWithholdsTheWords(t *testing.T) {
	ev := events.Event{Kind: events.ToolFinished, Data: events.Data{
		Tool: "ledger__write", Outcome: "ok", Args: json.RawMessage(`{"text":"secret"}`), Result: "secret", Text: "secret",
	}}
	got := events.Redact(ev)
	data, _ := json.Marshal(got)
	if got.Data.Tool != "ledger__write" || got.Data.Outcome != "ok" || !got.Data.Redacted {
		t.Errorf("redacted %s; want the tool and its outcome kept and redacted set", data)
	}
	if got.Data.Args != nil || got.Data.Result != "" || got.Data.Text != "" {
		t.Errorf("redacted %s; want no arguments, result or text", data)
	}
	if ev.Data.Result != "secret" {
		t.Error("Redact changed the event it was given")
	}
	plain := events.Redact(events.Event{Kind: events.TurnStarted})
	if plain.Data.Redacted {
		t.Error("an event with no words is marked redacted")
	}
}

// What dedupes a turn's events is one Redis key per turn, kept while the
// turn may still re-run a step and for an hour once it told turn_finished:
// not one key per event, which at a few hundred turns a minute would fill
// Redis.
func TestATurnsToldIdentitiesAreOneKeyKeptAnHourAfterItFinishes(t *testing.T) {
	e, _, prefix := emitter(t)
	opts, err := redis.ParseURL(testenv.Stack(t).RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	ev := func(kind string) events.Event {
		return events.Event{Seat: "s1", Turn: "turn/s1/w2", Kind: kind}
	}
	told := func() (int, time.Duration) {
		keys, err := rdb.Keys(ctx, prefix+":seat:s1:told:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 {
			return len(keys), 0
		}
		ttl, err := rdb.TTL(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return 1, ttl
	}
	e.Emit(ev(events.TurnStarted), "started")
	e.Emit(ev(events.RoundStarted), "round|1")
	e.Emit(ev(events.ModelOutput), "output|1")
	e.Flush(5 * time.Second)
	if n, ttl := told(); n != 1 || ttl < 24*time.Hour {
		t.Fatalf("a running turn's identities: %d keys, ttl %s; want one key kept longer than a day", n, ttl)
	}
	e.Emit(ev(events.TurnFinished), "finished")
	e.Flush(5 * time.Second)
	if n, ttl := told(); n != 1 || ttl <= 0 || ttl > time.Hour {
		t.Fatalf("a finished turn's identities: %d keys, ttl %s; want one key kept an hour at most", n, ttl)
	}
}
