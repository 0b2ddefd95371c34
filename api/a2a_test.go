package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// rpcAnswer is a JSON-RPC response with a task as its result.
type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *a2a.Error      `json:"error"`
}

// rpc calls method on the A2A endpoint at path as token's principal.
func rpc(t *testing.T, base, path, token, method, params string) (int, rpcAnswer) {
	t.Helper()
	status, body := call(t, http.MethodPost, base+path, token, `{"jsonrpc":"2.0","id":7,"method":"`+method+`","params":`+params+`}`)
	var ans rpcAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatalf("%s: %d %q is not a JSON-RPC response: %v", method, status, body, err)
	}
	if ans.JSONRPC != "2.0" {
		t.Fatalf("%s: %s; want a JSON-RPC 2.0 response", method, body)
	}
	return status, ans
}

func taskOf(t *testing.T, ans rpcAnswer) a2a.Task {
	t.Helper()
	if ans.Error != nil {
		t.Fatalf("error %v; want a task", ans.Error)
	}
	var task a2a.Task
	if err := json.Unmarshal(ans.Result, &task); err != nil {
		t.Fatal(err)
	}
	return task
}

// sentTask is SendMessage's task.
func sentTask(t *testing.T, ans rpcAnswer) a2a.Task {
	t.Helper()
	if ans.Error != nil {
		t.Fatalf("error %v; want a task", ans.Error)
	}
	var sent a2a.SendMessageResponse
	if err := json.Unmarshal(ans.Result, &sent); err != nil || sent.Task == nil {
		t.Fatalf("SendMessage's result %s: %v; want {task}", ans.Result, err)
	}
	return *sent.Task
}

// wantError checks an answer is the JSON-RPC error code with the HTTP
// status.
func wantError(t *testing.T, what string, status int, ans rpcAnswer, wantStatus, wantCode int) {
	t.Helper()
	if status != wantStatus || ans.Error == nil || ans.Error.Code != wantCode {
		t.Errorf("%s: %d %+v; want %d with error %d", what, status, ans.Error, wantStatus, wantCode)
	}
}

// A ticket is an A2A task through the seat's endpoint: read by any reader
// of tickets, answered while it asks and cancelled by its delegator only,
// as the /tickets routes allow; what it cannot do is a protocol error,
// what the token may not a 403; each is on the audit log.
func TestA2ATasksAreTickets(t *testing.T) {
	base, st := authServer(t)
	ottos := openTicket(t, st, "k-otto", crewlet.Ticket{From: crewlet.ExternalSender, To: "cto", Task: "fix it", Conversation: "c-otto", OpenedBy: "otto"})
	const seat = "/a2a/seats/cto"
	get := `{"id":"` + ottos.ID + `"}`

	status, ans := rpc(t, base, seat, tokens["viewer"], a2a.MethodGetTask, get)
	if task := taskOf(t, ans); status != http.StatusOK || task.ID != ottos.ID || task.ContextID != "c-otto" || task.Status.State != a2a.StateWorking || string(ans.ID) != "7" {
		t.Fatalf("GetTask as a viewer: %d %+v", status, task)
	}
	status, ans = rpc(t, base, seat, tokens["viewer"], a2a.MethodGetTask, `{"id":"t-000000000000"}`)
	wantError(t, "GetTask of no task", status, ans, http.StatusOK, a2a.CodeTaskNotFound)
	status, ans = rpc(t, base, seat, tokens["member"], a2a.MethodGetTask, get)
	wantError(t, "GetTask of otto's task by bob's member", status, ans, http.StatusForbidden, a2a.CodeRefused)

	// A message to a task that asks nothing is refused; while it asks, the
	// delegator's message answers it.
	answer := `{"message":{"messageId":"m-1","taskId":"` + ottos.ID + `","role":"ROLE_USER","parts":[{"text":"the blue one"}]}}`
	status, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodSendMessage, answer)
	wantError(t, "a message to a working task", status, ans, http.StatusOK, a2a.CodeUnsupportedOperation)
	if _, ok, err := st.AskTicket(t.Context(), ottos.ID, "which one?", "w:1:0", ""); err != nil || !ok {
		t.Fatalf("ask: %v, %v", ok, err)
	}
	_, ans = rpc(t, base, seat, tokens["viewer"], a2a.MethodGetTask, get)
	if st := taskOf(t, ans).Status; st.State != a2a.StateInputRequired || st.Message == nil || *st.Message.Parts[0].Text != "which one?" {
		t.Fatalf("an asking task's status = %+v; want input-required with the question", st)
	}
	status, ans = rpc(t, base, seat, tokens["alice"], a2a.MethodSendMessage, answer)
	wantError(t, "another operator answering otto's task", status, ans, http.StatusForbidden, a2a.CodeRefused)
	status, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodSendMessage, strings.Replace(answer, `"m-1"`, `"m-2"`, 1))
	if task := sentTask(t, ans); status != http.StatusOK || task.Status.State != a2a.StateWorking || len(task.History) != 2 || *task.History[1].Parts[0].Text != "the blue one" {
		t.Fatalf("otto's answer: %d %+v; want the task working again with the answer in its history", status, task)
	}

	// Cancelling needs the delegator, and a task ends once.
	status, ans = rpc(t, base, seat, tokens["viewer"], a2a.MethodCancelTask, get)
	wantError(t, "CancelTask as a viewer", status, ans, http.StatusForbidden, a2a.CodeRefused)
	status, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodCancelTask, get)
	if task := taskOf(t, ans); status != http.StatusOK || task.Status.State != a2a.StateCanceled || *task.Status.Message.Parts[0].Text != "cancelled by otto" {
		t.Fatalf("otto's CancelTask: %d %+v", status, task)
	}
	status, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodCancelTask, get)
	wantError(t, "CancelTask of a cancelled task", status, ans, http.StatusOK, a2a.CodeTaskNotCancelable)
	rows, err := st.Audit(t.Context(), store.AuditFilter{Principal: "otto", Action: "POST /a2a/seats/{handle}", Limit: 10})
	if err != nil || len(rows) != 4 || rows[0].Outcome != wire.AuditFailed || !strings.HasPrefix(rows[0].Reason, "A2A CancelTask: task "+ottos.ID+" is TASK_STATE_CANCELED already") ||
		rows[1].Outcome != wire.AuditAllowed || rows[1].Reason != "A2A CancelTask: ticket "+ottos.ID {
		t.Fatalf("otto's audit rows: %+v, %v; want the failed cancel, the cancel, the answer and the refused message", rows, err)
	}
}

// What is not an A2A request gets the protocol's error, never a 500, and
// a viewer may read tasks but not send one.
func TestA2ABadRequests(t *testing.T) {
	base, _ := authServer(t)
	const seat = "/a2a/seats/cto"
	for _, c := range []struct {
		name, body string
		code       int
	}{
		{"not JSON", `{"jsonrpc":`, a2a.CodeParseError},
		{"a batch", `[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]`, a2a.CodeInvalidRequest},
		{"no id", `{"jsonrpc":"2.0","method":"GetTask","params":{"id":"t-1"}}`, a2a.CodeInvalidRequest},
		{"an unknown method", `{"jsonrpc":"2.0","id":1,"method":"DoIt"}`, a2a.CodeMethodNotFound},
		{"an A2A 0.3 method", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, a2a.CodeVersionNotSupported},
		{"an A2A 0.3 push method", `{"jsonrpc":"2.0","id":1,"method":"tasks/pushNotificationConfig/set","params":{}}`, a2a.CodeVersionNotSupported},
		{"no params", `{"jsonrpc":"2.0","id":1,"method":"GetTask"}`, a2a.CodeInvalidParams},
		{"a bad task id", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"../x"}}`, a2a.CodeInvalidParams},
		{"no message", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}`, a2a.CodeInvalidParams},
		{"a file part", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"url":"https://x/y"}]}}}`, a2a.CodeContentTypeNotSupported},
		{"a body over 1 MiB", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"text":"` + strings.Repeat("a", 1<<20) + `"}]}}}`, a2a.CodeInvalidRequest},
	} {
		status, body := call(t, http.MethodPost, base+seat, tokens["operator"], c.body)
		var ans rpcAnswer
		if err := json.Unmarshal([]byte(body), &ans); err != nil || status != http.StatusOK || ans.Error == nil || ans.Error.Code != c.code {
			t.Errorf("%s: %d %s; want 200 with error %d", c.name, status, body, c.code)
		}
	}
	status, ans := rpc(t, base, seat, tokens["viewer"], a2a.MethodSendMessage, `{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}`)
	wantError(t, "SendMessage as a viewer", status, ans, http.StatusForbidden, a2a.CodeRefused)
	status, ans = rpc(t, base, "/a2a", tokens["operator"], a2a.MethodSendMessage, `{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}`)
	wantError(t, "SendMessage to the company naming no seat", status, ans, http.StatusOK, a2a.CodeInvalidParams)
	if status, body := call(t, http.MethodPost, base+"/a2a/seats/alice", tokens["operator"], `{}`); status != http.StatusNotFound {
		t.Errorf("the endpoint of a person's seat: %d %s; want 404", status, body)
	}
}

// A card is read with a token that may list the seats, and names the
// endpoint the reader called.
func TestA2ACards(t *testing.T) {
	base, _ := authServer(t)
	var card a2a.AgentCard
	getJSON(t, base+"/a2a/seats/cto/.well-known/agent-card.json", tokens["member"], &card)
	if card.Name != "cto at authco" || card.SupportedInterfaces[0].URL != base+"/a2a/seats/cto" || card.Skills[0].Description != "works as lead" {
		t.Fatalf("cto's card = %+v", card)
	}
	getJSON(t, base+"/a2a/roles/lead/.well-known/agent-card.json", tokens["viewer"], &card)
	if card.SupportedInterfaces[0].URL != base+"/a2a/roles/lead" || card.Skills[0].ID != "role:lead" {
		t.Fatalf("role:lead's card = %+v", card)
	}
	getJSON(t, base+"/.well-known/agent-card.json", tokens["viewer"], &card)
	if card.Name != "authco" || card.SupportedInterfaces[0].URL != base+"/a2a" || len(card.Skills) != 2 {
		t.Fatalf("the company's card = %+v; want cto and role:lead as skills", card)
	}
	for _, path := range []string{"/a2a/seats/bob/.well-known/agent-card.json", "/a2a/roles/nope/.well-known/agent-card.json"} {
		if status, body := call(t, http.MethodGet, base+path, tokens["viewer"], ""); status != http.StatusNotFound {
			t.Errorf("GET %s: %d %s; want 404", path, status, body)
		}
	}
	if status, _ := call(t, http.MethodGet, base+"/.well-known/agent-card.json", "", ""); status != http.StatusUnauthorized {
		t.Errorf("the company's card without a token: %d; want 401", status)
	}
}

// A2A's requests are all POSTs, but only those that change something
// spend api.mutations_per_minute: reading a task costs what GET
// /tickets/{id} does, and a send past the budget is refused with 429.
func TestA2AReadsSpendNoMutations(t *testing.T) {
	base, st := authServerWith(t, "api: { mutations_per_minute: 2 }\n")
	ticket := openTicket(t, st, "k-read", crewlet.Ticket{From: crewlet.ExternalSender, To: "cto", Task: "fix it", Conversation: "c-read", OpenedBy: "otto"})
	for i := range 5 {
		status, ans := rpc(t, base, "/a2a/seats/cto", tokens["operator"], a2a.MethodGetTask, `{"id":"`+ticket.ID+`"}`)
		if task := taskOf(t, ans); status != http.StatusOK || task.ID != ticket.ID {
			t.Fatalf("GetTask %d: %d %+v; want the task", i+1, status, task)
		}
	}
	for i := range 3 {
		status, ans := rpc(t, base, "/a2a/seats/cto", tokens["operator"], a2a.MethodCancelTask, `{"id":"t-000000000000"}`)
		if limited := status == http.StatusTooManyRequests; limited != (i >= 2) {
			t.Fatalf("CancelTask %d: %d %+v; want 429 from the 3rd on", i+1, status, ans.Error)
		}
		if i >= 2 {
			wantError(t, "CancelTask past the budget", status, ans, http.StatusTooManyRequests, a2a.CodeRefused)
		}
	}
}
