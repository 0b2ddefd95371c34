package a2a_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/events"
)

// Every ticket phase is an A2A state, and a stream of it ends exactly when
// it ended or waits for the client.
func TestEveryPhaseIsAState(t *testing.T) {
	t.Parallel()
	want := map[crewlet.TicketPhase]struct {
		state string
		final bool
	}{
		crewlet.TicketPending:   {a2a.StateWorking, false},
		crewlet.TicketAsking:    {a2a.StateInputRequired, true},
		crewlet.TicketDone:      {a2a.StateCompleted, true},
		crewlet.TicketFailed:    {a2a.StateFailed, true},
		crewlet.TicketExpired:   {a2a.StateFailed, true},
		crewlet.TicketCancelled: {a2a.StateCanceled, true},
	}
	for _, phase := range crewlet.TicketPhases {
		w, ok := want[phase]
		if !ok {
			t.Errorf("phase %s has no A2A state in this test; decide it", phase)
			continue
		}
		if got := a2a.StateOf(phase); got != w.state {
			t.Errorf("StateOf(%s) = %s; want %s", phase, got, w.state)
		}
		if got := a2a.Final(crewlet.Ticket{Phase: phase}); got != w.final {
			t.Errorf("Final(%s) = %v; want %v", phase, got, w.final)
		}
	}
}

func text(p a2a.Part) string {
	if p.Text == nil {
		return "<not text>"
	}
	return *p.Text
}

// A ticket is a task: its id, its conversation as the context, its task
// (and answer) as the user's history; settled, its reply is the artifact
// and the status message; asking, the question is the status message;
// ended otherwise, the reason is.
func TestATicketIsATask(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := crewlet.Ticket{ID: "t-1", To: "eng-1", Task: "fix it", Conversation: "c-1", UpdatedAt: at}

	done := base
	done.Phase, done.Reply, done.Answer = crewlet.TicketDone, "Fixed it", "the red one"
	task := a2a.TaskOf(done)
	if task.ID != "t-1" || task.ContextID != "c-1" || task.Status.State != a2a.StateCompleted || task.Status.Timestamp != "2026-01-02T03:04:05Z" {
		t.Fatalf("done task = %+v", task)
	}
	if len(task.Artifacts) != 1 || text(task.Artifacts[0].Parts[0]) != "Fixed it" || text(task.Status.Message.Parts[0]) != "Fixed it" {
		t.Fatalf("done task's reply: artifacts %+v, status %+v", task.Artifacts, task.Status)
	}
	if len(task.History) != 2 || text(task.History[0].Parts[0]) != "fix it" || text(task.History[1].Parts[0]) != "the red one" || task.History[0].Role != a2a.RoleUser {
		t.Fatalf("done task's history = %+v", task.History)
	}

	asking := base
	asking.Phase, asking.Question = crewlet.TicketAsking, "which one?"
	if st := a2a.TaskOf(asking).Status; st.State != a2a.StateInputRequired || st.Message == nil || text(st.Message.Parts[0]) != "which one?" || st.Message.Role != a2a.RoleAgent {
		t.Fatalf("asking status = %+v", st)
	}
	failed := base
	failed.Phase, failed.Reason = crewlet.TicketExpired, "it outlived tickets.expire_after"
	if task := a2a.TaskOf(failed); task.Status.State != a2a.StateFailed || text(task.Status.Message.Parts[0]) != failed.Reason || len(task.Artifacts) != 0 {
		t.Fatalf("expired task = %+v", task)
	}
	pending := base
	pending.Phase = crewlet.TicketPending
	if st := a2a.TaskOf(pending).Status; st.State != a2a.StateWorking || st.Message != nil {
		t.Fatalf("pending status = %+v", st)
	}

	// Settling streams the artifact before the status that ends the stream.
	ups := a2a.Updates(done)
	if len(ups) != 2 || ups[0].ArtifactUpdate == nil || !ups[0].ArtifactUpdate.LastChunk || ups[1].StatusUpdate == nil || ups[1].StatusUpdate.Status.State != a2a.StateCompleted {
		t.Fatalf("updates of a settled ticket = %+v", ups)
	}
	if ups := a2a.Updates(asking); len(ups) != 1 || ups[0].StatusUpdate.Status.State != a2a.StateInputRequired {
		t.Fatalf("updates of an asking ticket = %+v", ups)
	}
}

// The wire shape is A2A 1.0's JSON: a client parses a state by its enum
// name and a part by the field it has.
func TestTheTaskIsA2AJSON(t *testing.T) {
	t.Parallel()
	data, err := json.Marshal(a2a.StreamResponse{Task: &a2a.Task{ID: "t-1", ContextID: "c", Status: a2a.TaskStatus{State: a2a.StateWorking},
		History: []a2a.Message{{MessageID: "m", Role: a2a.RoleUser, Parts: []a2a.Part{a2a.TextPart("hi")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"task":{"id":"t-1","contextId":"c","status":{"state":"TASK_STATE_WORKING"},"history":[{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}]}}`
	if string(data) != want {
		t.Fatalf("got  %s\nwant %s", data, want)
	}
}

// A message's task is its text parts; any other part is refused, as is a
// message with none.
func TestAMessageIsText(t *testing.T) {
	t.Parallel()
	got, e := a2a.Text(a2a.Message{Parts: []a2a.Part{a2a.TextPart("one"), a2a.TextPart("two")}})
	if e != nil || got != "one\n\ntwo" {
		t.Fatalf("Text = %q, %v", got, e)
	}
	// A URL part: {"url": "https://x"}.
	if _, e := a2a.Text(a2a.Message{Parts: []a2a.Part{a2a.TextPart("one"), {}}}); e == nil || e.Code != a2a.CodeContentTypeNotSupported {
		t.Fatalf("a URL part: %v; want content type not supported", e)
	}
	if _, e := a2a.Text(a2a.Message{}); e == nil || e.Code != a2a.CodeInvalidParams {
		t.Fatalf("no parts: %v; want invalid params", e)
	}
}

// Each request is checked before it reaches a ticket: its envelope, and a
// method that is not served gets the error that says why.
func TestRequestsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		req  a2a.Request
		code int
	}{
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: a2a.MethodSendMessage}, 0},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`"a"`), Method: a2a.MethodSubscribeToTask}, 0},
		{a2a.Request{JSONRPC: "1.0", ID: json.RawMessage(`1`), Method: a2a.MethodGetTask}, a2a.CodeInvalidRequest},
		{a2a.Request{JSONRPC: "2.0", Method: a2a.MethodGetTask}, a2a.CodeInvalidRequest},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`{}`), Method: a2a.MethodGetTask}, a2a.CodeInvalidRequest},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "Nope"}, a2a.CodeMethodNotFound},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "CreateTaskPushNotificationConfig"}, 0},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "ListTaskPushNotificationConfigs"}, 0},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "ListTaskPushNotificationConfig"}, a2a.CodeVersionNotSupported},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "tasks/pushNotificationConfig/set"}, a2a.CodeVersionNotSupported},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "ListTasks"}, a2a.CodeUnsupportedOperation},
		{a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "message/send"}, a2a.CodeVersionNotSupported},
	} {
		e := c.req.Check()
		if (e == nil && c.code != 0) || (e != nil && e.Code != c.code) {
			t.Errorf("%+v: %v; want code %d", c.req, e, c.code)
		}
	}
	if e := a2a.CheckVersion("0.3"); e == nil || e.Code != a2a.CodeVersionNotSupported {
		t.Errorf("A2A-Version 0.3: %v; want version not supported", e)
	}
	for _, v := range []string{"", "1.0", "1.1"} {
		if e := a2a.CheckVersion(v); e != nil {
			t.Errorf("A2A-Version %q: %v", v, e)
		}
	}
}

// crewlet's errors are A2A's: a task that is not there, one that cannot
// be cancelled, one that takes no message now, bad params; refusals and
// internal errors travel with their HTTP status.
func TestErrorsAreA2AErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code, method string
		want         int
		protocol     bool
	}{
		{crewlet.EINVALID, a2a.MethodSendMessage, a2a.CodeInvalidParams, true},
		{crewlet.ENOTFOUND, a2a.MethodGetTask, a2a.CodeTaskNotFound, true},
		{crewlet.ENOTFOUND, a2a.MethodSendMessage, a2a.CodeInvalidParams, true},
		{crewlet.ECONFLICT, a2a.MethodCancelTask, a2a.CodeTaskNotCancelable, true},
		{crewlet.ECONFLICT, a2a.MethodSendMessage, a2a.CodeUnsupportedOperation, true},
		{crewlet.EFORBIDDEN, a2a.MethodSendMessage, a2a.CodeRefused, false},
		{crewlet.ERATELIMITED, a2a.MethodSendMessage, a2a.CodeRefused, false},
		{crewlet.EINTERNAL, a2a.MethodGetTask, a2a.CodeInternal, false},
	} {
		e, protocol := a2a.ErrorOf(crewlet.Errorf(c.code, "why"), c.method)
		if e.Code != c.want || protocol != c.protocol {
			t.Errorf("%s in %s: %d, protocol %v; want %d, %v", c.code, c.method, e.Code, protocol, c.want, c.protocol)
		}
	}
}

// The serving seat's live events in the conversation are working updates;
// another seat's are not the task's, and a tool's arguments are shown
// only to a reader of the transcript.
func TestLiveEventsAreWorkingUpdates(t *testing.T) {
	t.Parallel()
	ticket := crewlet.Ticket{ID: "t-1", To: "eng-1", Conversation: "c-1"}
	call := events.Event{ID: "1-0", Seat: "eng-1", Kind: events.ToolStarted, Data: events.Data{Tool: "fs__read", Args: json.RawMessage(`{"path":"secret"}`)}}
	up, ok := a2a.LiveUpdate(ticket, call, true)
	if !ok || up.StatusUpdate.Status.State != a2a.StateWorking || text(up.StatusUpdate.Status.Message.Parts[0]) != `eng-1 calls fs__read {"path":"secret"}` || up.StatusUpdate.Metadata["event"] != events.ToolStarted {
		t.Fatalf("tool_started for a transcript reader = %+v, %v", up, ok)
	}
	up, _ = a2a.LiveUpdate(ticket, call, false)
	if got := text(up.StatusUpdate.Status.Message.Parts[0]); strings.Contains(got, "secret") {
		t.Fatalf("tool_started for a reader without the transcript says %q", got)
	}
	other := call
	other.Seat = "eng-2"
	if _, ok := a2a.LiveUpdate(ticket, other, true); ok {
		t.Fatal("another seat's event became an update of the task")
	}
	if _, ok := a2a.LiveUpdate(ticket, events.Event{Seat: "eng-1", Kind: events.ModelDelta}, true); ok {
		t.Fatal("a model delta became an update; the reply comes as the artifact")
	}
}

// A card says what A2A needs to reach the agent: its JSON-RPC endpoint at
// 1.0, streaming and no push notifications, crewlet's bearer token, and
// skills from the roles' charters and tools.
func TestCardsNameTheirSeatsAndRoles(t *testing.T) {
	t.Parallel()
	org := &config.Config{Company: config.Company{Name: "acme"},
		Roles: map[string]config.Role{"engineer": {Charter: "fixes what it is given", MCP: []config.MCPServer{{Name: "fs"}}}, "lead": {Charter: "leads"}},
		Seats: []config.Seat{{Handle: "cto", Role: "lead"}, {Handle: "eng-1", Role: "engineer"}, {Handle: "eng-2", Role: "engineer"}, {Handle: "alice", Kind: "human"}}}
	card := a2a.SeatCard(org, org.Seats[1], "https://api/a2a/seats/eng-1")
	if len(card.SupportedInterfaces) != 1 || card.SupportedInterfaces[0] != (a2a.AgentInterface{URL: "https://api/a2a/seats/eng-1", ProtocolBinding: "JSONRPC", ProtocolVersion: "1.0"}) {
		t.Fatalf("interfaces = %+v", card.SupportedInterfaces)
	}
	if !card.Capabilities.Streaming || !card.Capabilities.PushNotifications || card.SecuritySchemes["bearer"].HTTPAuth.Scheme != "Bearer" {
		t.Fatalf("capabilities %+v, schemes %+v", card.Capabilities, card.SecuritySchemes)
	}
	if len(card.Skills) != 1 || card.Skills[0].Description != "fixes what it is given" || strings.Join(card.Skills[0].Tags, ",") != "role:engineer,tools:fs" {
		t.Fatalf("skills = %+v", card.Skills)
	}
	company := a2a.CompanyCard(org, "https://api/a2a", func(h string) string { return "seat/" + h }, func(r string) string { return "role/" + r })
	var ids []string
	for _, sk := range company.Skills {
		ids = append(ids, sk.ID)
	}
	if strings.Join(ids, ",") != "cto,eng-1,eng-2,role:engineer,role:lead" {
		t.Fatalf("company skills = %v; want each agent seat, then each role", ids)
	}
}

// An approver's message on a task waiting for approval is read by its
// first word: approve (a note after it is the reason) or deny with the
// reason the model is told; anything else is sent back saying what to
// send.
func TestAnApproversMessageIsADecision(t *testing.T) {
	t.Parallel()
	ap := crewlet.Approval{ID: "ap-1", Tool: "ledger__write"}
	for _, c := range []struct {
		text    string
		approve bool
		reason  string
		code    int
	}{
		{"approve", true, "", 0},
		{"  Approve. ", true, "", 0},
		{"approve: checked the invoice", true, "checked the invoice", 0},
		{"deny: over budget", false, "over budget", 0},
		{"DENY over budget", false, "over budget", 0},
		{"deny", false, "", a2a.CodeInvalidParams},
		{"deny:  ", false, "", a2a.CodeInvalidParams},
		{"yes", false, "", a2a.CodeInvalidParams},
		{"approved", false, "", a2a.CodeInvalidParams},
		{"", false, "", a2a.CodeInvalidParams},
	} {
		approve, reason, e := a2a.ApprovalDecision(ap, c.text)
		switch {
		case c.code != 0 && (e == nil || e.Code != c.code || !strings.Contains(e.Message, "ap-1")):
			t.Errorf("%q: %v; want error %d naming the approval", c.text, e, c.code)
		case c.code == 0 && (e != nil || approve != c.approve || reason != c.reason):
			t.Errorf("%q = %v %q %v; want %v %q", c.text, approve, reason, e, c.approve, c.reason)
		}
	}
	st := a2a.ApprovalStatus(crewlet.Ticket{ID: "t-1", To: "s01"}, crewlet.Approval{ID: "ap-1", Tool: "ledger__write", Approvers: []string{"olga", "role:finance"}})
	if st.State != a2a.StateInputRequired || text(st.Message.Parts[0]) != `s01 waits for approval ap-1 of ledger__write by olga, role:finance. An approver answers with a message on this task: "approve", or "deny: REASON"; or with POST /approvals/ap-1/approve or /deny.` {
		t.Fatalf("the status of a task waiting for approval: %+v %q", st, text(st.Message.Parts[0]))
	}
}
