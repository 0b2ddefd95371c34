package mailbox_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// A mailbox holding max_unread unhandled entries refuses new mail with
// EFULL, whoever sends it; handling one makes room. Entries read but not
// acked still count, and a repeat of an event already taken is never
// refused (it adds nothing).
func TestPublishRefusesAFullMailbox(t *testing.T) {
	t.Parallel()
	mb, ctx := setup(t)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	q := mailbox.Quotas{MaxUnread: 3}
	for i := range 3 {
		if _, _, err := mb.Publish(ctx, msg(fmt.Sprint(i), "cto", fmt.Sprint(i)), q); err != nil {
			t.Fatalf("publish %d of 3: %v", i, err)
		}
	}
	_, _, err := mb.Publish(ctx, msg("3", "cto", "3"), q)
	if crewlet.ErrorCode(err) != crewlet.EFULL || !strings.Contains(crewlet.ErrorMessage(err), "mailbox.max_unread") {
		t.Fatalf("publish to a full mailbox: %v; want EFULL naming mailbox.max_unread", err)
	}
	if _, _, err := mb.Publish(ctx, msg("2", "cto", "2"), q); err != nil {
		t.Errorf("repeat of an accepted event refused: %v", err)
	}
	res, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "cto", Consumer: "n1:e1", Max: 1})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("read = %+v, %v", res, err)
	}
	if _, _, err := mb.Publish(ctx, msg("3", "cto", "3"), q); crewlet.ErrorCode(err) != crewlet.EFULL {
		t.Fatalf("publish with one entry read, not acked: %v; want EFULL (it is not handled yet)", err)
	}
	if err := mb.Ack(ctx, "cto", []string{res.Messages[0].StreamID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mb.Publish(ctx, msg("3", "cto", "3"), q); err != nil {
		t.Fatalf("publish after one was handled: %v", err)
	}
	if got, _ := mb.Recent(ctx, "cto", 100); strings.Join(bodies(got), ",") != "0,1,2,3" {
		t.Errorf("mailbox = %v; want 0,1,2,3, nothing accepted lost", bodies(got))
	}
}

// A sender past its count this minute is refused with ERATELIMITED and
// when to try again; another sender is not, and everything accepted before
// the refusal is in the mailboxes.
func TestPublishRefusesASenderOverQuota(t *testing.T) {
	t.Parallel()
	mb, ctx := setup(t)
	for _, h := range []string{"cto", "eng"} {
		if err := mb.Ensure(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	q := mailbox.Quotas{SenderPerMinute: 4}
	from := func(sender, id, to string) crewlet.Message {
		m := msg(id, to, id)
		m.From = sender
		return m
	}
	for i := range 4 {
		to := []string{"cto", "eng"}[i%2]
		if _, _, err := mb.Publish(ctx, from("spammer", fmt.Sprint("s", i), to), q); err != nil {
			t.Fatalf("publish %d of 4: %v", i, err)
		}
	}
	_, _, err := mb.Publish(ctx, from("spammer", "s4", "cto"), q)
	if crewlet.ErrorCode(err) != crewlet.ERATELIMITED || !strings.Contains(crewlet.ErrorMessage(err), "mailbox.sender_per_minute") {
		t.Fatalf("fifth publish in a minute: %v; want ERATELIMITED naming mailbox.sender_per_minute", err)
	}
	if d := crewlet.ErrorRetryAfter(err); d <= 0 || d > time.Minute {
		t.Errorf("retry after %s; want within the minute", d)
	}
	if _, _, err := mb.Publish(ctx, from("someone-else", "o1", "cto"), q); err != nil {
		t.Errorf("another sender refused: %v", err)
	}
	cto, _ := mb.Recent(ctx, "cto", 100)
	eng, _ := mb.Recent(ctx, "eng", 100)
	if got := strings.Join(append(bodies(cto), bodies(eng)...), ","); got != "s0,s2,o1,s1,s3" {
		t.Errorf("mailboxes hold %s; want s0,s2,o1 and s1,s3: every accepted message, the refused one not", got)
	}
}
