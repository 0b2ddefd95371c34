package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
)

// ledgerRows returns the seat's completion ledger as trigger key → work key.
func (c *company) ledgerRows(seat string) map[string]string {
	c.t.Helper()
	st := c.store()
	rows, err := st.LedgerRows(context.Background(), seat)
	if err != nil {
		c.t.Fatal(err)
	}
	return rows
}

func TestCrashMatrix(t *testing.T) {
	for _, point := range []testhook.CrashPoint{testhook.AfterModel, testhook.AfterPublish, testhook.AfterLedger, testhook.AfterAck} {
		t.Run(string(point), func(t *testing.T) {
			c := newCompany(t, fleetOrg(t, 2, 0))
			c.apiServer()
			crashing := c.workerWithEnv("n1", []string{testhook.Hooks{CrashAt: point, CrashSeat: "s01"}.Env()})
			c.waitAttached(30 * time.Second)

			first := c.send("s01", "one", from("s02"))
			conv := inConversation(first.Conversation)
			sent := []crewlet.Message{first, c.send("s01", "two", from("s02"), conv), c.send("s01", "three", from("s02"), conv)}
			if code := crashing.wait(t, 30*time.Second); code == 0 {
				t.Fatalf("worker exited 0; want it killed at %s", point)
			}
			c.worker("n2")
			c.assertExactlyOneReply(t, sent, 30*time.Second)

			// The replies to a seat are delivered to its mailbox once each.
			testenv.Eventually(t, 10*time.Second, "replies in s02's mailbox", func() error {
				var inbox []crewlet.Message
				if err := c.call(http.MethodGet, "/seats/s02/inbox?limit=100", nil, &inbox); err != nil {
					return err
				}
				count := map[string]int{}
				for _, m := range inbox {
					count[m.InReplyTo]++
				}
				for _, m := range sent {
					if count[m.EventID] != 1 {
						return fmt.Errorf("reply to %q delivered %d times", m.Body, count[m.EventID])
					}
				}
				return nil
			})
			testenv.Eventually(t, 10*time.Second, "ledger rows equal messages and nothing pending", func() error {
				if rows := c.ledgerRows("s01"); len(rows) != len(sent) {
					return fmt.Errorf("ledger has %d rows; want %d", len(rows), len(sent))
				}
				if n, err := c.mailbox().Pending(context.Background(), "s01"); err != nil || n != 0 {
					return fmt.Errorf("pending = %d (%v); want 0", n, err)
				}
				return nil
			})
		})
	}
}

func TestPartialOverlapRunsOnlyTheNewTrigger(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 0))
	c.apiServer()
	// The first worker dies after recording A+B in the ledger, before the ack.
	crashing := c.workerWithEnv("n1", []string{testhook.Hooks{CrashAt: testhook.AfterLedger}.Env()})
	c.waitAttached(30 * time.Second)
	if err := c.call(http.MethodPost, "/seats/s01/pause", crewlet.PauseRequest{By: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "s01 paused", func() error {
		if st := c.state("s01"); st.Status != crewlet.StatusPaused {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	a := c.send("s01", "A")
	b := c.send("s01", "B", inConversation(a.Conversation))
	if err := c.call(http.MethodPost, "/seats/s01/resume", crewlet.ResumeRequest{By: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	crashing.wait(t, 30*time.Second)
	cc := c.send("s01", "C", inConversation(a.Conversation))
	c.worker("n2")
	c.assertExactlyOneReply(t, []crewlet.Message{a, b, cc}, 30*time.Second)

	rows := c.ledgerRows("s01")
	wantAB, wantC := crewlet.WorkKey([]string{a.EventID, b.EventID}), crewlet.WorkKey([]string{cc.EventID})
	if rows[a.EventID] != wantAB || rows[b.EventID] != wantAB || rows[cc.EventID] != wantC {
		t.Fatalf("ledger = %v; want A and B under work key %s (the first turn) and C alone under %s", rows, wantAB, wantC)
	}
	var events []map[string]any
	if err := c.call(http.MethodGet, "/seats/s01/events", nil, &events); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for _, e := range events {
		if e["kind"] == "turn_trigger_skipped" {
			skipped = append(skipped, fmt.Sprint(e["event_id"]))
		}
	}
	// The turn of A+B either finished on the surviving node (its workflow
	// task moved there) and was acked, or it was abandoned with the host and
	// the next read skipped A and B by the ledger. Either way only C ran
	// again, alone, as the ledger shows; a skip is never C.
	for _, id := range skipped {
		if id != a.EventID && id != b.EventID {
			t.Fatalf("turn_trigger_skipped events for %v; want only A or B (%s, %s)", skipped, a.EventID, b.EventID)
		}
	}
	t.Logf("A and B skipped by the ledger: %d of 2", len(skipped))
}

func TestDeadLetterAfterTheDeliveryBudgetAndRequeue(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 0))
	c.setenv("CREWLET_MAILBOX_RETRY_BACKOFF=20ms")
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	poison := c.send("s01", "poison pill")
	var dls []mailbox.DeadLetter
	testenv.Eventually(t, 90*time.Second, "poison dead-lettered", func() error {
		if err := c.call(http.MethodGet, "/deadletters", nil, &dls); err != nil {
			return err
		}
		if len(dls) == 0 {
			return fmt.Errorf("no dead letter yet; seat state %+v", c.state("s01").Counters)
		}
		return nil
	})
	dl := dls[0]
	if len(dls) != 1 || dl.Seat != "s01" || dl.Message.EventID != poison.EventID || dl.Deliveries != mailbox.DeliveryBudget ||
		!strings.Contains(dl.Reason, "always fails") {
		t.Fatalf("dead letters = %+v; want one for s01's poison after %d deliveries naming the failure", dls, mailbox.DeliveryBudget)
	}
	if failures := c.state("s01").Counters.Failures; failures != mailbox.DeliveryBudget {
		t.Fatalf("seat ran the poison %d times; want exactly %d before it was dead-lettered", failures, mailbox.DeliveryBudget)
	}
	// The seat is free again: new mail is answered.
	c.waitReply(c.send("s01", "hello"), replyWait)

	out, err := c.cli("deadletters", "requeue", dl.ID)
	if err != nil {
		t.Fatalf("crewlet deadletters requeue: %v\n%s", err, out)
	}
	// A fresh budget: it runs again (and fails again) rather than being dead-lettered at once.
	testenv.Eventually(t, 30*time.Second, "requeued poison runs again", func() error {
		if f := c.state("s01").Counters.Failures; f <= mailbox.DeliveryBudget+1 {
			return fmt.Errorf("failures %d", f)
		}
		return nil
	})
	var events []map[string]any
	if err := c.call(http.MethodGet, "/seats/s01/events", nil, &events); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, e := range events {
		kinds[fmt.Sprint(e["kind"])] = true
	}
	if !kinds["dead_lettered"] || !kinds["requeued"] {
		t.Fatalf("seat events %v; want dead_lettered and requeued", kinds)
	}
}

func TestPausedSeatStaysPausedOnItsNextNode(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 0))
	c.apiServer()
	n1 := c.worker("n1")
	c.waitAttached(30 * time.Second)
	n2 := c.worker("n2")
	_ = n2
	if err := c.call(http.MethodPost, "/seats/s01/pause", crewlet.PauseRequest{By: "ops", Reason: "incident"}, nil); err != nil {
		t.Fatal(err)
	}
	before := c.state("s01")
	testenv.Eventually(t, 10*time.Second, "s01 paused", func() error {
		if before = c.state("s01"); before.Status != crewlet.StatusPaused {
			return fmt.Errorf("status %s", before.Status)
		}
		return nil
	})
	victim := n1
	if !strings.HasPrefix(before.Node, "n1:") {
		victim = n2
	}
	victim.kill(t)
	sending := time.Now()
	held := c.send("s01", "held while paused")
	testenv.Eventually(t, 30*time.Second, "s01 on a new node, still paused", func() error {
		st := c.state("s01")
		if st.Epoch <= before.Epoch || st.Status != crewlet.StatusPaused || st.Pause == nil || st.Pause.By != "ops" {
			return fmt.Errorf("state %s epoch %d node %s pause %+v", st.Status, st.Epoch, st.Node, st.Pause)
		}
		return nil
	})
	c.waitWakeHandled("s01", sending, 30*time.Second)
	if r := c.repliesTo(held); len(r) != 0 {
		t.Fatalf("paused seat answered %v after moving", r)
	}
	if err := c.call(http.MethodPost, "/seats/s01/resume", crewlet.ResumeRequest{By: "ops"}, nil); err != nil {
		t.Fatal(err)
	}
	c.waitReply(held, replyWait)
}

// withoutSeat writes a copy of a fleetOrg file without one of its worker
// seats and returns its path.
func withoutSeat(t *testing.T, org, handle string) string {
	t.Helper()
	body, err := os.ReadFile(org)
	if err != nil {
		t.Fatal(err)
	}
	seat := "  - { handle: " + handle + ", role: worker }\n"
	if !strings.Contains(string(body), seat) {
		t.Fatalf("%s has no seat %s", org, handle)
	}
	path := filepath.Join(t.TempDir(), "without-"+handle+".yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(string(body), seat, "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRemovedSeatMailboxIsKeptForTheGraceThenRetired(t *testing.T) {
	both := fleetOrg(t, 2, 0)
	onlyFirst := withoutSeat(t, both, "s02")
	c := newCompany(t, both)
	// A reconcile pass every second: a seat added back while its previous
	// workflow is still ending the stop of its removal is started again by
	// the next periodic pass (the one its apply triggered saw it running),
	// which the default minute would put past the reply's wait.
	c.setenv("CREWLET_MAINTENANCE_INTERVAL=1s", "CREWLET_NODES_RECONCILE_INTERVAL=1s")
	mb := c.mailbox()
	// The API runs throughout; each step applies the org of the moment and
	// runs a worker on it.
	c.apiServer()
	withWorker := func(org, nodeID string, env []string, during func()) {
		t.Helper()
		if out, err := c.cli("config", "apply", org); err != nil {
			t.Fatalf("config apply %s: %v\n%s", org, err, out)
		}
		c.config = org
		w := c.workerWithEnv(nodeID, env)
		during()
		w.signal(t, os.Interrupt)
		if code := w.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("worker %s exited %d; want 0", nodeID, code)
		}
	}

	// s02 gets mail while no worker runs; then s02 leaves the org.
	kept := c.send("s02", "kept through the grace")
	withWorker(onlyFirst, "n1", []string{"CREWLET_MAILBOX_RETIRE_AFTER=1h"}, func() {
		testenv.Eventually(t, 20*time.Second, "s02's absence stamped", func() error {
			if found, missing, err := c.store().MailboxRegistry(context.Background(), "s02"); err != nil || !found || missing == nil {
				return fmt.Errorf("registered %v, missing since %v (%v)", found, missing, err)
			}
			return nil
		})
	})

	// Added back within the grace: it finds its mail.
	withWorker(both, "n2", nil, func() { c.waitReply(kept, replyWait) })

	// Removed again, with a short grace: the mailbox goes, with its mail.
	lost := c.send("s02", "sent to a seat about to be retired")
	withWorker(onlyFirst, "n3", []string{"CREWLET_MAILBOX_RETIRE_AFTER=2s"}, func() {
		testenv.Eventually(t, 30*time.Second, "s02's mailbox retired", func() error {
			if _, err := mb.Pending(context.Background(), "s02"); err == nil {
				return fmt.Errorf("s02's mailbox still exists")
			}
			if found, _, _ := c.store().MailboxRegistry(context.Background(), "s02"); found {
				return fmt.Errorf("registry row still there")
			}
			return nil
		})
	})

	// Added back after the grace: it starts empty.
	withWorker(both, "n4", nil, func() {
		c.waitAttached(30 * time.Second)
		msgs, err := mb.Recent(context.Background(), "s02", 10)
		if err != nil || len(msgs) != 0 {
			t.Fatalf("s02's mailbox after re-adding: %d entries (%v); want empty", len(msgs), err)
		}
		// Mail sent now is answered: s02 has read its mailbox, and the
		// retired mail was not in it.
		c.waitReply(c.send("s02", "after the retirement"), replyWait)
		if r := c.repliesTo(lost); len(r) != 0 {
			t.Fatalf("mail of the retired mailbox was answered: %v", r)
		}
	})
}

func TestOneChatMessageDeliveredTwiceIsAnsweredOnce(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 0))
	c.serve()
	chat := func(r *api.SendMessageRequest) { r.ChatID = "slack-1700000000.000100" }
	if err := c.call(http.MethodPost, "/seats/s01/pause", crewlet.PauseRequest{By: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "s01 paused", func() error {
		if st := c.state("s01"); st.Status != crewlet.StatusPaused {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	// A chat bridge delivers the same message twice (two event ids) before
	// the seat runs: one turn answers it once.
	first := c.send("s01", "deploy?", chat)
	second := c.send("s01", "deploy?", chat, inConversation(first.Conversation))
	if err := c.call(http.MethodPost, "/seats/s01/resume", crewlet.ResumeRequest{By: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	c.waitReply(first, replyWait)
	// And again after it was answered: the ledger skips it.
	third := c.send("s01", "deploy?", chat, inConversation(first.Conversation))
	testenv.Eventually(t, replyWait, "the late copy skipped", func() error {
		var events []map[string]any
		if err := c.call(http.MethodGet, "/seats/s01/events", nil, &events); err != nil {
			return err
		}
		for _, e := range events {
			if e["kind"] == "turn_trigger_skipped" && e["event_id"] == third.EventID {
				return nil
			}
		}
		return fmt.Errorf("no skip recorded for the late copy: %v", events)
	})
	replies := 0
	for _, m := range c.conversation(first.Conversation)[0].Messages {
		if m.Type == crewlet.MessageReply {
			replies++
		}
	}
	if replies != 1 || len(c.repliesTo(second)) != 0 || len(c.repliesTo(third)) != 0 {
		t.Fatalf("conversation has %d replies; want the chat message answered exactly once", replies)
	}
}

// A message whose turn the provider refuses as a bad request will never
// succeed: it is dead-lettered at once with that reason, after one
// delivery, not its whole budget; the seat goes on answering.
func TestPermanentFailureIsDeadLetteredAtOnce(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 0))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	bad := c.send("s01", "malformed request")
	var dls []mailbox.DeadLetter
	testenv.Eventually(t, 30*time.Second, "malformed dead-lettered", func() error {
		if err := c.call(http.MethodGet, "/deadletters", nil, &dls); err != nil {
			return err
		}
		if len(dls) == 0 {
			return fmt.Errorf("no dead letter yet")
		}
		return nil
	})
	dl := dls[0]
	if len(dls) != 1 || dl.Message.EventID != bad.EventID || dl.Deliveries != 1 || !strings.Contains(dl.Reason, "the provider refuses this request") {
		t.Fatalf("dead letters = %+v; want one for the message after 1 delivery naming the provider's refusal", dls)
	}
	if failures := c.state("s01").Counters.Failures; failures != 1 {
		t.Fatalf("the seat ran it %d times; want once", failures)
	}
	c.waitReply(c.send("s01", "hello"), replyWait)
}
