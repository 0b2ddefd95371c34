package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// A member (bea, for bob's seat) reads its own seat's conversations and
// tickets and not another seat's: another conversation, its stream, a turn
// of another seat and another's ticket are 403, and it cannot slip into
// another conversation by continuing it. GET /tickets and GET /approvals
// show it only its own.
func TestMemberActsOnItsOwnOnly(t *testing.T) {
	base, st := authServer(t)
	ctx := t.Context()
	sent := time.Now().UTC()
	if err := st.AppendMessages(ctx, "w-bob",
		crewlet.Message{EventID: "m-bob-1", Type: crewlet.MessageChat, From: "bob", To: "cto", Conversation: "c-bob", Body: "hi", SentAt: sent},
		crewlet.Message{EventID: "m-bob-2", Type: crewlet.MessageReply, From: "cto", To: "bob", Conversation: "c-bob", Body: "hello", InReplyTo: "m-bob-1", SentAt: sent},
		crewlet.Message{EventID: "m-alice-1", Type: crewlet.MessageChat, From: "alice", To: "cto", Conversation: "c-alice", Body: "secret plan", SentAt: sent},
	); err != nil {
		t.Fatal(err)
	}
	bobs := openTicket(t, st, "k-bob", crewlet.Ticket{From: "bob", To: "cto", Task: "t", Conversation: "c-bob", OpenedBy: "bea"})
	alices := openTicket(t, st, "k-alice", crewlet.Ticket{From: "alice", To: "cto", Task: "t", Conversation: "c-alice", OpenedBy: "alice-bot"})
	for _, a := range []crewlet.Approval{
		{ID: "ap-bob", Handle: "cto", TurnID: "turn/cto/w1", CallKey: "w1:1:0", Tool: "x", Args: "{}", Approvers: []string{"bob"}},
		{ID: "ap-alice", Handle: "cto", TurnID: "turn/cto/w2", CallKey: "w2:1:0", Tool: "x", Args: "{}", Approvers: []string{"alice", "operator"}},
	} {
		a.Until = sent.Add(time.Hour)
		if _, _, err := st.CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}

	member := tokens["member"]
	for _, c := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"its own conversation", "GET", "/conversations/c-bob", "", 200},
		{"another's conversation", "GET", "/conversations/c-alice", "", 403},
		{"a conversation not recorded yet", "GET", "/conversations/c-none", "", 404},
		{"another's conversation's stream", "GET", "/conversations/c-alice/stream", "", 403},
		{"another seat's stream", "GET", "/seats/cto/stream", "", 403},
		{"another seat's turn", "GET", "/turns/cto/w1", "", 403},
		{"another seat's inbox", "GET", "/seats/alice/inbox", "", 403},
		{"continuing another's conversation", "POST", "/seats/cto/messages", `{"text":"me too","conversation":"c-alice"}`, 403},
		{"opening a ticket into another's conversation", "POST", "/tickets", `{"to":"cto","task":"x","conversation":"c-alice"}`, 403},
		{"its own ticket", "GET", "/tickets/" + bobs.ID, "", 200},
		{"another's ticket", "GET", "/tickets/" + alices.ID, "", 403},
		{"answering another's ticket", "POST", "/tickets/" + alices.ID + "/answer", `{"text":"yes"}`, 403},
		{"cancelling another's ticket", "POST", "/tickets/" + alices.ID + "/cancel", `{}`, 403},
		{"denying an approval naming another", "POST", "/approvals/ap-alice/deny", `{"reason":"no"}`, 403},
		{"a fleet read", "GET", "/deadletters", "", 403},
	} {
		if status, body := call(t, c.method, base+c.path, member, c.body); status != c.want {
			t.Errorf("member: %s (%s %s): %d %s; want %d", c.name, c.method, c.path, status, body, c.want)
		}
	}

	var conv struct{ Messages []store.TranscriptEntry }
	getJSON(t, base+"/conversations/c-bob", member, &conv)
	if len(conv.Messages) != 2 {
		t.Errorf("member's own conversation: %+v; want its 2 messages", conv.Messages)
	}
	var list []crewlet.Ticket
	getJSON(t, base+"/tickets", member, &list)
	if len(list) != 1 || list[0].ID != bobs.ID {
		t.Errorf("GET /tickets as the member: %+v; want its own ticket only", list)
	}
	getJSON(t, base+"/tickets?to=cto", tokens["viewer"], &list)
	if len(list) != 2 {
		t.Errorf("GET /tickets as a viewer: %d tickets; want both", len(list))
	}
	var approvals []crewlet.Approval
	getJSON(t, base+"/approvals", member, &approvals)
	if len(approvals) != 1 || approvals[0].ID != "ap-bob" {
		t.Errorf("GET /approvals as the member: %+v; want the one naming bob only", approvals)
	}
	getJSON(t, base+"/approvals", tokens["viewer"], &approvals)
	if len(approvals) != 2 {
		t.Errorf("GET /approvals as a viewer: %d approvals; want both", len(approvals))
	}
}

// Only a ticket's delegator answers or cancels it: the member whose seat
// opened it, the principal that opened it; an operator that did not is
// refused. An admin may, and its audit row says it overrode. The ticket
// records who answered.
func TestOnlyTheDelegatorAnswersOrCancels(t *testing.T) {
	base, st := authServer(t)
	ctx := t.Context()
	bobs := openTicket(t, st, "k-bob", crewlet.Ticket{From: "bob", To: "cto", Task: "t", Conversation: "c-bob", OpenedBy: "bea"})
	ottos := openTicket(t, st, "k-otto", crewlet.Ticket{From: crewlet.ExternalSender, To: "cto", Task: "t", Conversation: "c-otto", OpenedBy: "otto"})
	ask := func(id, key string) {
		t.Helper()
		if _, ok, err := st.AskTicket(ctx, id, "which one?", key, ""); err != nil || !ok {
			t.Fatalf("ask on %s: %v, %v", id, ok, err)
		}
	}
	answer := func(id, token string, want int) crewlet.Ticket {
		t.Helper()
		status, body := call(t, "POST", base+"/tickets/"+id+"/answer", token, `{"text":"the blue one"}`)
		if status != want {
			t.Fatalf("answer %s: %d %s; want %d", id, status, body, want)
		}
		var tk crewlet.Ticket
		_ = json.Unmarshal([]byte(body), &tk)
		return tk
	}

	ask(bobs.ID, "w:1:0")
	answer(bobs.ID, tokens["operator"], http.StatusForbidden)
	answer(bobs.ID, tokens["alice"], http.StatusForbidden)
	if tk := answer(bobs.ID, tokens["member"], http.StatusOK); tk.AnsweredBy != "bob" || tk.Answer != "the blue one" {
		t.Fatalf("the member's answer: %+v; want answered by bob", tk)
	}

	ask(bobs.ID, "w:2:0")
	if tk := answer(bobs.ID, tokens["admin"], http.StatusOK); tk.AnsweredBy != "ann" {
		t.Fatalf("the admin's answer: %+v; want answered by ann", tk)
	}
	rows, err := st.Audit(ctx, store.AuditFilter{Principal: "ann", Action: "POST /tickets/{id}/answer", Limit: 5})
	want := "admin override: ann answers ticket " + bobs.ID + ", which bob delegated"
	if err != nil || len(rows) != 1 || rows[0].Outcome != wire.AuditAllowed || rows[0].Reason != want {
		t.Fatalf("audit of the admin's answer: %+v, %v; want one allowed row saying %q", rows, err, want)
	}
	rows, err = st.Audit(ctx, store.AuditFilter{Principal: "bea", Action: "POST /tickets/{id}/answer", Limit: 5})
	if err != nil || len(rows) != 1 || rows[0].Reason != "" {
		t.Fatalf("audit of the delegator's answer: %+v, %v; want one row without an override", rows, err)
	}

	// A ticket opened by a principal bound to no seat is from "operator":
	// its opener cancels it, another operator may not.
	if status, body := call(t, "POST", base+"/tickets/"+ottos.ID+"/cancel", tokens["alice"], `{}`); status != http.StatusForbidden {
		t.Fatalf("another operator cancelling otto's ticket: %d %s; want 403", status, body)
	}
	if status, body := call(t, "POST", base+"/tickets/"+ottos.ID+"/cancel", tokens["member"], `{}`); status != http.StatusForbidden {
		t.Fatalf("a member cancelling otto's ticket: %d %s; want 403", status, body)
	}
	status, body := call(t, "POST", base+"/tickets/"+ottos.ID+"/cancel", tokens["operator"], `{"reason":"done elsewhere"}`)
	if status != http.StatusOK || !strings.Contains(body, `"phase":"cancelled"`) {
		t.Fatalf("otto cancelling its own ticket: %d %s; want it cancelled", status, body)
	}
}

// openTicket records a pending ticket straight in the store: the API under
// test has no Redis to deliver a request to.
func openTicket(t *testing.T, st *store.Store, key string, tk crewlet.Ticket) crewlet.Ticket {
	t.Helper()
	stored, _, err := st.CreateTicket(t.Context(), key, tk)
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

// getJSON reads url as token's principal into out, failing unless it is
// 200.
func getJSON(t *testing.T, url, token string, out any) {
	t.Helper()
	status, body := call(t, "GET", url, token, "")
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, status, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
