package events_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/events"
)

// A token at a time, quickly, comes out as a few pieces, not one event a
// token: the first at once, the rest at most every DeltaEvery or per
// DeltaBytes, and nothing held back once the round flushes. The pieces
// join up to the text, in order.
func TestDeltasCoalesceTokensIntoFewPieces(t *testing.T) {
	var mu sync.Mutex
	var pieces []string
	d := events.NewDeltas(func(text string) {
		mu.Lock()
		defer mu.Unlock()
		pieces = append(pieces, text)
	})
	var want strings.Builder
	for i := range 500 {
		tok := "tok" + string(rune('a'+i%26)) + " "
		want.WriteString(tok)
		d.Add(tok)
	}
	d.Flush()
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(pieces, ""); got != want.String() {
		t.Fatalf("pieces join to %d bytes; want the %d bytes added, in order", len(got), want.Len())
	}
	if len(pieces) < 2 || len(pieces) > 10 {
		t.Errorf("500 tokens (%d bytes) sent at once came out as %d pieces; want the first alone, then pieces of up to %d bytes", want.Len(), len(pieces), events.DeltaBytes)
	}
	if pieces[0] != "toka " {
		t.Errorf("first piece %q; want the first token at once", pieces[0])
	}
}

// Text held when the provider pauses is sent by the timer, without
// waiting for more text or the round's end.
func TestDeltasSendHeldTextWhenTheProviderPauses(t *testing.T) {
	sent := make(chan string, 4)
	d := events.NewDeltas(func(text string) { sent <- text })
	d.Add("first ")
	d.Add("second")
	if got := <-sent; got != "first " {
		t.Fatalf("first piece %q; want %q", got, "first ")
	}
	select {
	case got := <-sent:
		if got != "second" {
			t.Fatalf("held piece %q; want %q", got, "second")
		}
	case <-time.After(10 * events.DeltaEvery):
		t.Fatal("text held over a pause was not sent by the timer")
	}
	d.Flush()
	select {
	case got := <-sent:
		t.Fatalf("flush after everything was sent emitted %q; want nothing", got)
	default:
	}
}
