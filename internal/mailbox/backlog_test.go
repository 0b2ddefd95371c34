package mailbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// A backlog counts what is not yet acked, read or not, and dates the oldest
// of it by when it was published; an answered mailbox has none, and a seat
// without a mailbox is left out.
func TestBacklogsCountWhatIsNotYetAnswered(t *testing.T) {
	t.Parallel()
	mb, ctx := setup(t)
	for _, h := range []string{"busy", "done"} {
		if err := mb.Ensure(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Millisecond)
	for _, id := range []string{"1", "2", "3"} {
		if _, _, err := mb.Publish(ctx, msg(id, "busy", id), mailbox.Quotas{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := mb.Publish(ctx, msg("4", "done", "4"), mailbox.Quotas{}); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Millisecond)
	check := func(when string, want map[string]int64, oldestSet bool) {
		t.Helper()
		got, err := mb.Backlogs(ctx, []string{"busy", "done", "nobox"})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["nobox"]; ok || len(got) != 2 {
			t.Fatalf("%s: backlogs %v; want busy and done only", when, got)
		}
		for h, n := range want {
			if got[h].Waiting != n {
				t.Errorf("%s: %s waiting %d; want %d", when, h, got[h].Waiting, n)
			}
		}
		if o := got["busy"].Oldest; oldestSet && (o.Before(before.Truncate(time.Millisecond)) || o.After(after)) {
			t.Errorf("%s: busy's oldest %s; want the first publish, between %s and %s", when, o, before, after)
		}
		if o := got["done"].Oldest; !o.IsZero() {
			t.Errorf("%s: done's oldest %s; want none", when, o)
		}
	}

	// done answers its one entry; busy reads two and acks the first.
	read, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "done", Consumer: "n1:e1", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := mb.Ack(ctx, "done", streamIDs(read.Messages)); err != nil {
		t.Fatal(err)
	}
	check("all unread", map[string]int64{"busy": 3, "done": 0}, true)
	read, err = mb.Read(ctx, mailbox.ReadRequest{Handle: "busy", Consumer: "n1:e1", Max: 2})
	if err != nil {
		t.Fatal(err)
	}
	check("two read, none acked", map[string]int64{"busy": 3}, true)
	if err := mb.Ack(ctx, "busy", streamIDs(read.Messages[:1])); err != nil {
		t.Fatal(err)
	}
	got, err := mb.Backlogs(ctx, []string{"busy"})
	if err != nil {
		t.Fatal(err)
	}
	second := read.Messages[1]
	if got["busy"].Waiting != 2 || got["busy"].Oldest.UnixMilli() != idMillis(t, second) {
		t.Fatalf("after acking the first: %+v; want 2 waiting, the oldest published at %s's id", got["busy"], second.StreamID)
	}
}

func idMillis(t *testing.T, m crewlet.Message) int64 {
	t.Helper()
	var ms, seq int64
	if _, err := fmt.Sscanf(m.StreamID, "%d-%d", &ms, &seq); err != nil {
		t.Fatal(err)
	}
	return ms
}
