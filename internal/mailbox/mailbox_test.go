package mailbox_test

import (
	"context"
	"strings"
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
	res, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 10, ClearAwake: false})
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
	res, _ := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 10, ClearAwake: false})
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
	res, _ := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 10, ClearAwake: true})
	if err := mb.Ack(ctx, "cto", streamIDs(res.Messages)); err != nil {
		t.Fatal(err)
	}
	if res, _ := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 10, ClearAwake: true}); len(res.Messages) != 0 {
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
	first, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 2, ClearAwake: false})
	if err != nil {
		t.Fatal(err)
	}
	if err := mb.Ack(ctx, "cto", streamIDs(first.Messages[:1])); err != nil {
		t.Fatal(err)
	}
	// A later tenure (another consumer) reclaims "2", pending since the crash, before new mail.
	again, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n2:e2", Max: 10, ClearAwake: false})
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

func TestDeliveryBudgetDeadLettersAndRequeueGivesAFreshBudget(t *testing.T) {
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mb.Publish(ctx, msg("poison", "cto", "always fails")); err != nil {
		t.Fatal(err)
	}
	read := func() mailbox.ReadResult {
		t.Helper()
		res, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 10, LastError: "boom"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := 1; i <= mailbox.DeliveryBudget; i++ {
		res := read()
		if len(res.Messages) != 1 || res.Messages[0].Deliveries != int64(i) {
			t.Fatalf("delivery %d: read %+v; want the entry, delivery count %d", i, res.Messages, i)
		}
	}
	res := read()
	if len(res.Messages) != 0 || len(res.DeadLettered) != 1 {
		t.Fatalf("after %d deliveries: read %d messages, %d dead-lettered; want 0 and 1", mailbox.DeliveryBudget, len(res.Messages), len(res.DeadLettered))
	}
	if n, _ := mb.Pending(ctx, "cto"); n != 0 {
		t.Fatalf("pending after dead-lettering = %d; want 0 (acked)", n)
	}
	dls, err := mb.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters = %+v (%v); want one", dls, err)
	}
	dl := dls[0]
	if dl.Seat != "cto" || dl.Deliveries != mailbox.DeliveryBudget || dl.Message.EventID != "poison" || !strings.Contains(dl.Reason, "boom") {
		t.Fatalf("dead letter = %+v; want seat cto, %d deliveries, event poison, reason naming the last error", dl, mailbox.DeliveryBudget)
	}

	if _, err := mb.Requeue(ctx, dl.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.Requeue(ctx, dl.ID); err == nil {
		t.Fatal("second requeue of one dead letter succeeded; want an error")
	}
	res = read()
	if len(res.Messages) != 1 || res.Messages[0].EventID != "poison" || res.Messages[0].Deliveries != 1 {
		t.Fatalf("after requeue read %+v; want the entry again with delivery count 1", res.Messages)
	}
	if dls, _ := mb.DeadLetters(ctx, 10); len(dls) != 0 {
		t.Fatalf("dead letters after requeue = %d; want 0", len(dls))
	}
}

func TestTrimKeepsEverythingNotYetHandled(t *testing.T) {
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"1", "2", "3", "4", "5"} {
		if _, _, err := mb.Publish(ctx, msg(id, "cto", id)); err != nil {
			t.Fatal(err)
		}
	}
	res, _ := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 3})
	// 1 and 2 handled, 3 pending (read, not acked), 4 and 5 never delivered.
	if err := mb.Ack(ctx, "cto", streamIDs(res.Messages[:2])); err != nil {
		t.Fatal(err)
	}
	n, err := mb.Trim(ctx, "cto", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("trimmed %d; want the 2 handled entries", n)
	}
	res, _ = mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n2:e2", Max: 10})
	if got := bodies(res.Messages); strings.Join(got, ",") != "3,4,5" {
		t.Fatalf("after trim read %v; want [3 4 5]", got)
	}
	if err := mb.Delete(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n2:e2", Max: 10}); err == nil {
		t.Fatal("read after Delete succeeded; want the mailbox gone")
	}
}
