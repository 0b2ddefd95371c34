package mailbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/testenv"
)

func setup(t *testing.T) (*mailbox.Mailbox, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	mb, err := mailbox.Open(ctx, testenv.Stack(t).RedisURL, "test"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	return mb, ctx
}

func msg(id, to, body string) crewlet.Message {
	return crewlet.Message{EventID: id, Type: crewlet.MessageChat, From: "operator", To: to, Conversation: "c", Body: body, SentAt: time.Now()}
}

func bodies(msgs []crewlet.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}

func TestMailPublishedBeforeTheGroupExistsIsDelivered(t *testing.T) {
	mb, ctx := setup(t)
	if _, _, err := mb.Publish(ctx, msg("e1", "cto", "early")); err != nil {
		t.Fatal(err)
	}
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	res, err := mb.Read(ctx, "cto", "n1:e1", 10, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := bodies(res.Messages); len(got) != 1 || got[0] != "early" {
		t.Fatalf("read %v; want [early]", got)
	}
}

func TestPublishIsIdempotentPerEventID(t *testing.T) {
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	id1, _, err := mb.Publish(ctx, msg("e1", "cto", "once"))
	if err != nil {
		t.Fatal(err)
	}
	id2, _, err := mb.Publish(ctx, msg("e1", "cto", "once"))
	if err != nil {
		t.Fatal(err)
	}
	if id1 != id2 {
		t.Fatalf("republish got stream id %s; want the first one %s", id2, id1)
	}
	res, _ := mb.Read(ctx, "cto", "n1:e1", 10, false)
	if len(res.Messages) != 1 {
		t.Fatalf("read %d entries; want 1", len(res.Messages))
	}
}

func TestWakeIsCoalescedUntilTheSeatSleeps(t *testing.T) {
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	wakes := func(ids ...string) []bool {
		var out []bool
		for _, id := range ids {
			_, wake, err := mb.Publish(ctx, msg(id, "cto", id))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, wake)
		}
		return out
	}
	if got := wakes("a", "b", "c"); !got[0] || got[1] || got[2] {
		t.Fatalf("wakes = %v; want only the first publish to wake", got)
	}
	// The seat drains its mailbox, then sleeps: the empty read clears the flag.
	res, _ := mb.Read(ctx, "cto", "n1:e1", 10, true)
	if err := mb.Ack(ctx, "cto", streamIDs(res.Messages)); err != nil {
		t.Fatal(err)
	}
	if res, _ := mb.Read(ctx, "cto", "n1:e1", 10, true); len(res.Messages) != 0 {
		t.Fatalf("mailbox not empty: %v", bodies(res.Messages))
	}
	if got := wakes("d", "e"); !got[0] || got[1] {
		t.Fatalf("after sleep wakes = %v; want the first publish to wake again", got)
	}
}

func streamIDs(msgs []crewlet.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.StreamID
	}
	return out
}

func TestUnackedMailIsHandedOutAgainInOrder(t *testing.T) {
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"1", "2", "3"} {
		if _, _, err := mb.Publish(ctx, msg(id, "cto", id)); err != nil {
			t.Fatal(err)
		}
	}
	first, err := mb.Read(ctx, "cto", "n1:e1", 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := mb.Ack(ctx, "cto", streamIDs(first.Messages[:1])); err != nil {
		t.Fatal(err)
	}
	// A later tenure (another consumer) reclaims "2", pending since the crash, before new mail.
	again, err := mb.Read(ctx, "cto", "n2:e2", 10, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := bodies(again.Messages); len(got) != 2 || got[0] != "2" || got[1] != "3" {
		t.Fatalf("second read = %v; want [2 3]", got)
	}
	if n, _ := mb.Pending(ctx, "cto"); n != 2 {
		t.Fatalf("pending = %d; want 2", n)
	}
	if err := mb.Ack(ctx, "cto", streamIDs(again.Messages)); err != nil {
		t.Fatal(err)
	}
	if n, _ := mb.Pending(ctx, "cto"); n != 0 {
		t.Fatalf("pending after ack = %d; want 0", n)
	}
}
