package mailbox_test

import (
	"context"
	"fmt"
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
	t.Parallel()
	mb, ctx := setup(t)
	if _, _, err := mb.Publish(ctx, msg("e1", "cto", "early"), mailbox.Quotas{}); err != nil {
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
	t.Parallel()
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	id1, _, err := mb.Publish(ctx, msg("e1", "cto", "once"), mailbox.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	id2, _, err := mb.Publish(ctx, msg("e1", "cto", "once"), mailbox.Quotas{})
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
	t.Parallel()
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	wakes := func(ids ...string) []bool {
		var out []bool
		for _, id := range ids {
			_, wake, err := mb.Publish(ctx, msg(id, "cto", id), mailbox.Quotas{})
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
	t.Parallel()
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"1", "2", "3"} {
		if _, _, err := mb.Publish(ctx, msg(id, "cto", id), mailbox.Quotas{}); err != nil {
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
	t.Parallel()
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mb.Publish(ctx, msg("poison", "cto", "always fails"), mailbox.Quotas{}); err != nil {
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
	t.Parallel()
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"1", "2", "3", "4", "5"} {
		if _, _, err := mb.Publish(ctx, msg(id, "cto", id), mailbox.Quotas{}); err != nil {
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

// Overflow hands out a human seat's oldest entries past the bound, and
// Remove deletes exactly those: the newest stay, the agent seat next to it
// is not touched, and the emptied mailbox still takes mail.
func TestOverflowAndRemoveMoveTheOldest(t *testing.T) {
	t.Parallel()
	mb, ctx := setup(t)
	const keep = 3
	for _, seat := range []string{"alice", "cto"} {
		if err := mb.Ensure(ctx, seat); err != nil {
			t.Fatal(err)
		}
		for i := range keep + 5 {
			id := fmt.Sprint(i)
			if _, _, err := mb.Publish(ctx, msg(seat+id, seat, id), mailbox.Quotas{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	old, err := mb.Overflow(ctx, "alice", keep, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(bodies(old), ","); got != "0,1,2,3,4" {
		t.Fatalf("overflow = %s; want the oldest 0,1,2,3,4", got)
	}
	if first, _ := mb.Overflow(ctx, "alice", keep, 2); strings.Join(bodies(first), ",") != "0,1" {
		t.Errorf("overflow at most 2 = %v; want 0,1", bodies(first))
	}
	ids := make([]string, len(old))
	for i, m := range old {
		ids[i] = m.StreamID
	}
	if err := mb.Remove(ctx, "alice", ids); err != nil {
		t.Fatal(err)
	}
	if left, _ := mb.Recent(ctx, "alice", 100); strings.Join(bodies(left), ",") != "5,6,7" {
		t.Errorf("alice's mailbox holds %v; want the newest 5,6,7", bodies(left))
	}
	if more, _ := mb.Overflow(ctx, "alice", keep, 100); len(more) != 0 {
		t.Errorf("overflow after the move = %v; want none", bodies(more))
	}
	if others, _ := mb.Recent(ctx, "cto", 100); len(others) != keep+5 {
		t.Errorf("cto's mailbox holds %d; want all %d", len(others), keep+5)
	}
	all, _ := mb.Overflow(ctx, "alice", 0, 100)
	if err := mb.Remove(ctx, "alice", []string{all[0].StreamID, all[1].StreamID, all[2].StreamID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mb.Publish(ctx, msg("alice-late", "alice", "late"), mailbox.Quotas{}); err != nil {
		t.Fatal(err)
	}
	if left, _ := mb.Recent(ctx, "alice", 100); strings.Join(bodies(left), ",") != "late" {
		t.Errorf("after an empty move and a publish alice holds %v; want [late]", bodies(left))
	}
}

func TestDeadLetterOverflowIsTheOldest(t *testing.T) {
	t.Parallel()
	mb, ctx := setup(t)
	const keep = 3
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	for i := range keep + 5 {
		id := fmt.Sprint(i)
		if _, _, err := mb.Publish(ctx, msg(id, "cto", id), mailbox.Quotas{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every read hands out every pending entry again, until each is past
	// its delivery budget and dead-lettered, in stream order.
	dead := 0
	for range mailbox.DeliveryBudget + 1 {
		res, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		dead += len(res.DeadLettered)
	}
	if dead != keep+5 {
		t.Fatalf("dead-lettered %d; want %d", dead, keep+5)
	}
	old, err := mb.DeadLetterOverflow(ctx, keep, 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(old))
	var moved []string
	for i, dl := range old {
		ids[i] = dl.ID
		moved = append(moved, dl.Message.Body)
	}
	if strings.Join(moved, ",") != "0,1,2,3,4" {
		t.Fatalf("dead-letter overflow %v, oldest first; want [0 1 2 3 4]", moved)
	}
	if err := mb.RemoveDeadLetters(ctx, ids); err != nil {
		t.Fatal(err)
	}
	dls, err := mb.DeadLetters(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, dl := range dls {
		got = append(got, dl.Message.Body)
	}
	if strings.Join(got, ",") != "7,6,5" {
		t.Errorf("dead letters left %v, newest first; want [7 6 5]", got)
	}
}

// A stream id is two unsigned 64-bit numbers and a dash; anything else is
// refused before Redis sees it.
func TestValidStreamID(t *testing.T) {
	for id, want := range map[string]bool{
		"1700000000000-0":        true,
		"0-0":                    true,
		"18446744073709551615-1": true,
		"18446744073709551616-0": false,
		"99999999999999999999-0": false,
		"not-a-stream-id":        false,
		"1700000000000":          false,
		"-1-0":                   false,
		"+1-0":                   false,
		"1-":                     false,
		"":                       false,
		"1700000000000-0\x00":    false,
	} {
		if got := mailbox.ValidStreamID(id); got != want {
			t.Errorf("ValidStreamID(%q) = %v; want %v", id, got, want)
		}
	}
}
