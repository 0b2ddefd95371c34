package activities

import (
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// busyOrg is turnsOrg's seat cto under a busy policy.
func busyOrg(policy string) string {
	return strings.Replace(turnsOrg, "profile: local,", "profile: local, on_busy: "+policy+",", 1)
}

// publishIn puts a message of the given type from a person in cto's
// mailbox, in conversation conv.
func (e *turnEnv) publishIn(t testing.TB, eventID, typ, conv, body string) crewlet.MailRef {
	t.Helper()
	id, _, err := e.mb.Publish(e.ctx, crewlet.Message{
		EventID: eventID, Type: typ, From: crewlet.ExternalSender, To: "cto",
		Conversation: conv, Body: body, SentAt: e.now,
	}, mailbox.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	return crewlet.MailRef{StreamID: id, EventID: eventID}
}

func refNames(refs []crewlet.MailRef) string {
	var out []string
	for _, r := range refs {
		out = append(out, r.EventID)
	}
	return strings.Join(out, ",")
}

// Under reject, a chat message that arrives mid-turn is answered "busy" in
// its conversation and ledgered; a reply is kept for the next turn. Run
// again (a retry after a crash between its steps), the message is answered
// once and ledgered once.
func TestBusyMailRejectAnswersOnceAcrossARetry(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, busyOrg(crewlet.OnBusyReject), nil)
	e.begin(t, "k1", e.publishIn(t, "m1", crewlet.MessageChat, "c1", "first"))
	m2 := e.publishIn(t, "m2", crewlet.MessageChat, "c1", "second")
	r3 := e.publishIn(t, "r3", crewlet.MessageReply, "c9", "a reply")
	in := crewlet.BusyMailInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: "turn/cto/k1", WorkKey: "k1",
		Mail: []crewlet.MailRef{m2, r3}, MayInterrupt: true}
	for attempt := 1; attempt <= 2; attempt++ {
		out, err := e.turns.BusyMail(e.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if refNames(out.Done) != "m2" || refNames(out.Keep) != "r3" || len(out.Interrupt) != 0 || out.Policy != crewlet.OnBusyReject {
			t.Fatalf("attempt %d: %+v; want m2 done, r3 kept", attempt, out)
		}
	}
	conv, err := e.store.Conversation(e.ctx, "c1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var busy []string
	for _, m := range conv {
		if m.InReplyTo == "m2" {
			busy = append(busy, m.Body)
		}
	}
	if len(busy) != 1 || busy[0] != crewlet.BusyText("cto", "turn/cto/k1") {
		t.Fatalf("answers to m2: %q; want the busy answer once", busy)
	}
	rows, err := e.store.LedgerRows(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows["m2"] != "busy:"+crewlet.ThreadKey("m2") {
		t.Fatalf("ledger %v; want m2 alone, under its busy work key", rows)
	}
}

// Under interrupt, a chat message in the conversation of an unfinished
// thread interrupts (one of another conversation is kept, and none
// interrupts once MayInterrupt is off). InterruptTurn records it in that
// thread after what the thread holds, and the turn interrupted; the next
// turn over both has one thread, the first's, whose answer covers both.
func TestInterruptJoinsTheThreadTheNextTurnAnswers(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, busyOrg(crewlet.OnBusyInterrupt), nil)
	tenure := crewlet.Tenure{Handle: "cto", Epoch: e.epoch}
	m1 := e.publishIn(t, "m1", crewlet.MessageChat, "c1", "first")
	e.begin(t, "k1", m1)
	m2 := e.publishIn(t, "m2", crewlet.MessageChat, "c1", "second")
	m3 := e.publishIn(t, "m3", crewlet.MessageChat, "c3", "elsewhere")
	in := crewlet.BusyMailInput{Tenure: tenure, TurnID: "turn/cto/k1", WorkKey: "k1", Mail: []crewlet.MailRef{m2, m3}, MayInterrupt: true}
	out, err := e.turns.BusyMail(e.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if refNames(out.Interrupt) != "m2" || refNames(out.Keep) != "m3" || len(out.Done) != 0 {
		t.Fatalf("BusyMail: %+v; want m2 to interrupt, m3 kept", out)
	}
	in.MayInterrupt = false
	if out, err := e.turns.BusyMail(e.ctx, in); err != nil || refNames(out.Keep) != "m2,m3" {
		t.Fatalf("BusyMail past the interrupt bound: %+v, %v; want both kept", out, err)
	}

	interrupt := crewlet.InterruptTurnInput{Tenure: tenure, TurnID: "turn/cto/k1", WorkKey: "k1", Rounds: 1, Mail: []crewlet.MailRef{m2, m3}}
	for range 2 {
		if err := e.turns.InterruptTurn(e.ctx, interrupt); err != nil {
			t.Fatal(err)
		}
	}
	thread, err := e.store.TurnMessages(e.ctx, "cto", crewlet.ThreadKey("m1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range thread {
		keys = append(keys, m.Key)
	}
	if got, want := strings.Join(keys, ","), "user,interrupt:m2"; got != want {
		t.Fatalf("m1's thread: %s; want the trigger, then m2 once (m3 is of another conversation)", got)
	}
	if last := thread[len(thread)-1].Message; last.Role != "user" || !strings.Contains(last.Content, "interrupted") || !strings.HasSuffix(last.Content, "second") {
		t.Fatalf("the interruption reads %+v; want a user message saying so, with m2", last)
	}
	row, err := e.store.Turn(e.ctx, "cto", "k1")
	if err != nil || row.Status != string(crewlet.TurnInterrupted) {
		t.Fatalf("turn k1: %+v, %v; want it recorded interrupted", row.Status, err)
	}

	next := e.begin(t, "k2", m1, m2, m3)
	if next.Threads != 2 {
		t.Fatalf("the next turn has %d threads; want m1's (answering m2 too) and m3's", next.Threads)
	}
}
