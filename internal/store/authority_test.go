package store_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// A turn's tool calls are admitted under its caps, counted over all its
// threads: a call admitted again counts once, a refused call is not
// recorded, calls made at once cannot all slip under a cap, and a write
// admitted before it starts still starts once.
func TestAdmitToolCallCountsEachCallOnce(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: "turn1", TurnID: "turn-a", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	errCap := errors.New("over the cap")
	admit := func(thread string, round, call int, name string, limit int) error {
		return st.AdmitToolCall(ctx, store.ToolCallAdmission{
			Seat: "cto", Turn: "turn1", Threads: []string{"th1", "th2"}, Thread: thread, Round: round, Call: call,
			Name: name, Messages: []string{"send_message"},
		}, func(calls, messages int) error {
			if calls >= limit {
				return fmt.Errorf("%w: %d calls, %d messages", errCap, calls, messages)
			}
			return nil
		})
	}
	for _, step := range []struct {
		thread      string
		round, call int
		want        error
	}{
		{"th1", 1, 0, nil},
		{"th1", 1, 0, nil}, // the same call again: admitted, not counted
		{"th2", 1, 0, nil}, // another thread of the same turn counts toward it
		{"th2", 1, 1, nil},
		{"th1", 2, 0, errCap},
		{"th1", 1, 0, nil}, // still admitted: it was before
	} {
		if err := admit(step.thread, step.round, step.call, "send_message", 3); !errors.Is(err, step.want) {
			t.Fatalf("admit %s r%dc%d = %v; want %v", step.thread, step.round, step.call, err, step.want)
		}
	}
	// Only the turn's threads given count.
	if err := st.AdmitToolCall(ctx, store.ToolCallAdmission{Seat: "cto", Turn: "turn1", Threads: []string{"th3"}, Thread: "th3", Round: 1, Call: 0, Name: "x"},
		func(calls, _ int) error {
			if calls != 0 {
				return fmt.Errorf("counted %d calls of other threads", calls)
			}
			return nil
		}); err != nil {
		t.Fatal(err)
	}

	// A write admitted (it may then wait for an approval) starts once.
	first, err := st.StartToolCall(ctx, "cto", "th1", 1, 0, "send_message", false)
	if err != nil || !first {
		t.Fatalf("StartToolCall of an admitted call = %v, %v; want the first start", first, err)
	}
	if first, err := st.StartToolCall(ctx, "cto", "th1", 1, 0, "send_message", false); err != nil || first {
		t.Fatalf("StartToolCall again = %v, %v; want false: an earlier attempt may have written", first, err)
	}

	// Eight calls of one round at once under a cap of five: five admitted.
	testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: "turn2", TurnID: "turn-b", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := st.AdmitToolCall(ctx, store.ToolCallAdmission{Seat: "cto", Turn: "turn2", Threads: []string{"th9"}, Thread: "th9", Round: 1, Call: i, Name: "x"},
				func(calls, _ int) error {
					if calls >= 5 {
						return errCap
					}
					return nil
				})
			switch {
			case err == nil:
				mu.Lock()
				admitted++
				mu.Unlock()
			case !errors.Is(err, errCap):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if admitted != 5 {
		t.Fatalf("%d of 8 concurrent calls admitted under a cap of 5; want 5", admitted)
	}
}

// A ticket carries its chain as given; one given none is its delegator's
// first hop, as a ticket opened before chains were recorded reads.
func TestTicketChainIsStored(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	first, _, err := st.CreateTicket(ctx, "k1", crewlet.Ticket{From: "alice", To: "cto", Task: "x", Conversation: "c"})
	if err != nil || first.Hops != 1 || strings.Join(first.Chain, ",") != "alice" {
		t.Fatalf("a ticket given no chain = %+v, %v; want hop 1 of [alice]", first, err)
	}
	next, _, err := st.CreateTicket(ctx, "k2", crewlet.Ticket{From: "cto", To: "eng-1", Task: "x", Conversation: "c", Hops: 2, Chain: []string{"alice", "cto"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Ticket(ctx, next.ID)
	if err != nil || got.Hops != 2 || strings.Join(got.Chain, ",") != "alice,cto" {
		t.Fatalf("stored second hop = %+v, %v; want hop 2 of [alice cto]", got, err)
	}
}
