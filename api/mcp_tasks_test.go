package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// The task methods' params and answers, as a client sends and reads them.
type (
	taskParams struct {
		mcp.ParamsBase
		TaskID string `json:"taskId,omitempty"`
	}
	listTasksParams struct {
		mcp.ParamsBase
		Cursor string `json:"cursor,omitempty"`
	}
	taskAnswer struct {
		mcp.ResultBase
		api.MCPTask
	}
	taskListAnswer struct {
		mcp.ResultBase
		Tasks      []api.MCPTask `json:"tasks"`
		NextCursor string        `json:"nextCursor"`
	}
)

// taskCall sends a task method naming id in cs's session.
func taskCall[R mcp.Result](t *testing.T, cs *mcp.ClientSession, method, id string) (R, error) {
	t.Helper()
	return mcp.CallCustomMethod[*taskParams, R](t.Context(), cs, method, &taskParams{TaskID: id})
}

// rpcCode is the JSON-RPC error code of err, 0 for none.
func rpcCode(err error) int64 {
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return rpcErr.Code
	}
	return 0
}

// rpcMessage is one JSON-RPC answer.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

// rawRPC posts one JSON-RPC request with id 1 to /mcp in session (none
// opens one) as it is, for what the Go SDK's client does not send (a
// tools/call with params.task), and returns the HTTP status, the session
// and the request's answer, read from the event stream the SDK answers
// with.
func (c mcpCompany) rawRPC(t *testing.T, token, session, method, params string) (int, string, rpcMessage) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, c.base+"/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msg rpcMessage
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(body, &msg) != nil {
			t.Fatalf("%s: %d %s; want a JSON-RPC answer", method, resp.StatusCode, body)
		}
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), msg
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if ok && json.Unmarshal([]byte(data), &msg) == nil && string(msg.ID) == "1" {
			return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), msg
		}
	}
	t.Fatalf("%s: %d, the stream ended without the answer", method, resp.StatusCode)
	return 0, "", msg
}

// askAsTask calls tool with text as a task in cs's session and returns the
// task its answer names.
func (c mcpCompany) askAsTask(t *testing.T, token string, cs *mcp.ClientSession, tool, text string) api.MCPTask {
	t.Helper()
	status, _, msg := c.rawRPC(t, token, cs.ID(), "tools/call", `{"name":"`+tool+`","arguments":{"text":"`+text+`"},"task":{"ttl":60000}}`)
	var created struct{ Task api.MCPTask }
	if status != http.StatusOK || msg.Error != nil || json.Unmarshal(msg.Result, &created) != nil || created.Task.TaskID == "" {
		t.Fatalf("%s as a task: %d %s %+v; want a CreateTaskResult", tool, status, msg.Result, msg.Error)
	}
	// A tasks/result waits for the ticket to end, and closing the session
	// waits for it: a test that fails midway ends it.
	t.Cleanup(func() {
		_, _, _ = c.srv.Tickets.End(context.Background(), created.Task.TaskID, crewlet.TicketCancelled, "the test ended")
	})
	return created.Task
}

// A task-augmented ask_ call answers its ticket as a task at once, and the
// task is the ticket: tasks/get reads its status, tasks/result waits for
// the reply the plain call would answer, tasks/cancel cancels it as POST
// /tickets/{id}/cancel does, tasks/list lists the caller's own. An id that
// is not the caller's task, or bad params, is a JSON-RPC error.
func TestMCPAskAsATaskIsItsTicket(t *testing.T) {
	c := newMCPCompany(t)
	token := tokens["operator"]
	status, _, init := c.rawRPC(t, token, "", "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	var declared struct {
		Capabilities struct {
			Tasks struct {
				List, Cancel *struct{}
				Requests     struct{ Tools struct{ Call *struct{} } }
			}
		}
	}
	if err := json.Unmarshal(init.Result, &declared); err != nil || status != http.StatusOK || declared.Capabilities.Tasks.List == nil ||
		declared.Capabilities.Tasks.Cancel == nil || declared.Capabilities.Tasks.Requests.Tools.Call == nil {
		t.Fatalf("initialize: %d %s; want the tasks capability with list, cancel and tools/call", status, init.Result)
	}

	cs := c.connect(t, token)
	_, _, listed := c.rawRPC(t, token, cs.ID(), "tools/list", `{}`)
	var tools struct {
		Tools []struct {
			Name      string
			Execution *struct{ TaskSupport string }
		}
	}
	if err := json.Unmarshal(listed.Result, &tools); err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %s %v", listed.Result, err)
	}
	for _, tool := range tools.Tools {
		asks := strings.HasPrefix(tool.Name, "ask_")
		if got := tool.Execution; asks && (got == nil || got.TaskSupport != "optional") || !asks && got != nil {
			t.Errorf("tool %s's execution: %+v; want taskSupport optional for an ask_ tool and none for another", tool.Name, got)
		}
	}

	task := c.askAsTask(t, token, cs, "ask_cto", "what is up")
	ticket := c.openTo(t, "cto")
	retention := c.srv.Org.Now().Maintenance.TicketRetention.Milliseconds()
	if task.TaskID != ticket.ID || task.Status != api.TaskWorking || task.TTL != retention || task.PollInterval != 2000 || task.CreatedAt == "" {
		t.Fatalf("the task: %+v; want ticket %s, working, ttl %d", task, ticket.ID, retention)
	}
	got, err := taskCall[*taskAnswer](t, cs, "tasks/get", task.TaskID)
	if err != nil || got.Status != api.TaskWorking || got.TaskID != ticket.ID {
		t.Fatalf("tasks/get: %+v %v; want working", got, err)
	}
	// While the turn serving it waits for an approval, the task needs an
	// approver's input; once decided, it works again.
	waiting := crewlet.Approval{ID: "ap-mcp", Handle: "cto", TurnID: "turn/cto/k", CallKey: "t:1:0", Ticket: ticket.ID, Tool: "ledger__write",
		Args: `{}`, ArgsHash: "h", Role: "lead", Policy: "p", Approvers: []string{"olga"}, OnTimeout: "deny", Epoch: 1, Until: time.Now().Add(time.Hour)}
	if _, _, err := c.b.st.CreateApproval(c.b.ctx, waiting); err != nil {
		t.Fatal(err)
	}
	if got, err := taskCall[*taskAnswer](t, cs, "tasks/get", task.TaskID); err != nil || got.Status != api.TaskInputRequired ||
		got.StatusMessage != "cto waits for approval ap-mcp of ledger__write by olga; an approver decides it with POST /approvals/ap-mcp/approve or /deny" {
		t.Fatalf("tasks/get while an approval waits: %+v %v; want input_required naming it", got, err)
	}
	if _, _, err := c.b.st.DecideApproval(c.b.ctx, waiting.ID, store.Decision{Status: crewlet.ApprovalApproved, By: "olga"}); err != nil {
		t.Fatal(err)
	}
	if got, err := taskCall[*taskAnswer](t, cs, "tasks/get", task.TaskID); err != nil || got.Status != api.TaskWorking {
		t.Fatalf("tasks/get once the approval was decided: %+v %v; want working", got, err)
	}
	type called struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan called, 1)
	go func() {
		res, err := taskCall[*mcp.CallToolResult](t, cs, "tasks/result", task.TaskID)
		done <- called{res, err}
	}()
	if _, settled, err := c.srv.Tickets.Settle(c.b.ctx, ticket.ID, "shipped"); err != nil || !settled {
		t.Fatalf("settle %s: %v %v", ticket.ID, settled, err)
	}
	answer := <-done
	if answer.err != nil {
		t.Fatal(answer.err)
	}
	var state api.TicketState
	related, _ := answer.res.Meta["io.modelcontextprotocol/related-task"].(map[string]any)
	if text := result(t, answer.res, &state); text != "shipped" || state.State != crewlet.TicketDone || answer.res.IsError || related["taskId"] != ticket.ID {
		t.Fatalf("tasks/result: %q %+v %v; want the reply, as the plain call answers it, related to the task", text, state, answer.res.Meta)
	}
	if got, err := taskCall[*taskAnswer](t, cs, "tasks/get", task.TaskID); err != nil || got.Status != api.TaskCompleted {
		t.Fatalf("tasks/get once done: %+v %v; want completed", got, err)
	}

	// Cancelled: the ticket is, once; its result is the plain call's.
	second := c.askAsTask(t, token, cs, "ask_role_lead", "never mind")
	cancelled, err := taskCall[*taskAnswer](t, cs, "tasks/cancel", second.TaskID)
	if err != nil || cancelled.Status != api.TaskCancelled {
		t.Fatalf("tasks/cancel: %+v %v; want cancelled", cancelled, err)
	}
	if tk, err := c.b.st.Ticket(c.b.ctx, second.TaskID); err != nil || tk.Phase != crewlet.TicketCancelled || !strings.Contains(tk.Reason, "the MCP client cancelled its task") {
		t.Fatalf("the cancelled task's ticket: %s %q (%v); want cancelled by the client", tk.Phase, tk.Reason, err)
	}
	if _, err := taskCall[*taskAnswer](t, cs, "tasks/cancel", second.TaskID); rpcCode(err) != jsonrpc.CodeInvalidParams {
		t.Errorf("tasks/cancel of a cancelled task: %v; want invalid params", err)
	}
	if res, err := taskCall[*mcp.CallToolResult](t, cs, "tasks/result", second.TaskID); err != nil || !res.IsError || !strings.Contains(result(t, res, nil), "cancelled") {
		t.Errorf("tasks/result of a cancelled task: %+v %v; want the plain call's error result", res, err)
	}
	list, err := mcp.CallCustomMethod[*listTasksParams, *taskListAnswer](c.b.ctx, cs, "tasks/list", &listTasksParams{})
	if err != nil || len(list.Tasks) != 2 || list.Tasks[0].TaskID != second.TaskID || list.Tasks[1].TaskID != task.TaskID || list.NextCursor != "" {
		t.Fatalf("tasks/list: %+v %v; want the two tasks, newest first, one page", list, err)
	}

	// Another principal's task, even one it may read by GET /tickets/{id},
	// is not its task; neither is one that does not exist.
	alice, member := c.connect(t, tokens["alice"]), c.connect(t, tokens["member"])
	for _, check := range []struct {
		what    string
		cs      *mcp.ClientSession
		method  string
		id      string
		message string
	}{
		{"another operator's tasks/get", alice, "tasks/get", task.TaskID, "no task " + task.TaskID + " of yours"},
		{"another operator's tasks/cancel", alice, "tasks/cancel", task.TaskID, "of yours"},
		{"another operator's tasks/result", alice, "tasks/result", task.TaskID, "of yours"},
		{"another seat's member's tasks/get", member, "tasks/get", task.TaskID, "member for seat bob"},
		{"tasks/get of no task", cs, "tasks/get", "t-000000000000", "no task t-000000000000 of yours"},
		{"tasks/get without a taskId", cs, "tasks/get", "", "taskId is missing"},
		{"tasks/get of a path", cs, "tasks/get", "../seats", "taskId"},
	} {
		_, err := taskCall[*taskAnswer](t, check.cs, check.method, check.id)
		if rpcCode(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), check.message) {
			t.Errorf("%s: %v; want invalid params saying %q", check.what, err, check.message)
		}
	}
	if list, err := mcp.CallCustomMethod[*listTasksParams, *taskListAnswer](c.b.ctx, alice, "tasks/list", &listTasksParams{}); err != nil || len(list.Tasks) != 0 {
		t.Errorf("another operator's tasks/list: %+v %v; want none", list, err)
	}
	if _, err := mcp.CallCustomMethod[*listTasksParams, *taskListAnswer](c.b.ctx, alice, "tasks/list", &listTasksParams{Cursor: task.TaskID}); rpcCode(err) != jsonrpc.CodeInvalidParams {
		t.Errorf("tasks/list from another's task: %v; want invalid params", err)
	}
	for _, call := range []struct{ what, params string }{
		{"list_seats as a task", `{"name":"list_seats","arguments":{},"task":{}}`},
		{"ask_cto as a task without its text", `{"name":"ask_cto","arguments":{},"task":{}}`},
	} {
		status, _, msg := c.rawRPC(t, token, cs.ID(), "tools/call", call.params)
		if status != http.StatusOK || msg.Error == nil || msg.Error.Code != jsonrpc.CodeMethodNotFound && msg.Error.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("%s: %d %s %+v; want a JSON-RPC error", call.what, status, msg.Result, msg.Error)
		}
	}
	if all, err := c.b.st.Tickets(c.b.ctx, store.TicketFilter{}); err != nil || len(all) != 2 {
		t.Errorf("tickets: %d (%v); want two, one per task", len(all), err)
	}
}

// A seat's question makes the task input_required, and reaches a client
// that takes elicitations as one, with the task's id: its accepted answer
// answers the ticket, a declined one leaves the question to be answered
// another way. A plain ask_ call puts its seat's question the same way.
func TestMCPSeatQuestionIsElicited(t *testing.T) {
	c := newMCPCompany(t)
	token := tokens["operator"]
	type elicited struct {
		message string
		task    any
	}
	questions := make(chan elicited, 1)
	replies := make(chan *mcp.ElicitResult, 1)
	cs := c.connectWith(t, token, &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		related, _ := req.Params.Meta["io.modelcontextprotocol/related-task"].(map[string]any)
		questions <- elicited{req.Params.Message, related["taskId"]}
		return <-replies, nil
	}})
	ask := func(id, question, key string) {
		t.Helper()
		if _, ok, err := c.b.st.AskTicket(c.b.ctx, id, question, key, ""); err != nil || !ok {
			t.Fatalf("ask on %s: %v %v", id, ok, err)
		}
	}
	wantQuestion := func(question string, task any) {
		t.Helper()
		select {
		case got := <-questions:
			if !strings.Contains(got.message, question) || got.task != task {
				t.Fatalf("the elicitation: %+v; want %q, related to task %v", got, question, task)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no elicitation of %q", question)
		}
	}

	task := c.askAsTask(t, token, cs, "ask_cto", "which colour")
	ask(task.TaskID, "which one?", "w:1:0")
	if got, err := taskCall[*taskAnswer](t, cs, "tasks/get", task.TaskID); err != nil || got.Status != api.TaskInputRequired || got.StatusMessage != "cto asks: which one?" {
		t.Fatalf("tasks/get of an asking ticket: %+v %v; want input_required with the question", got, err)
	}
	done := make(chan error, 1)
	var final *mcp.CallToolResult
	go func() {
		var err error
		final, err = taskCall[*mcp.CallToolResult](t, cs, "tasks/result", task.TaskID)
		done <- err
	}()
	wantQuestion("which one?", task.TaskID)
	replies <- &mcp.ElicitResult{Action: "decline"}
	// Declined, the question waits for its answer by other means: the
	// delegator's own answer is taken.
	code, body := call(t, http.MethodPost, c.base+"/tickets/"+task.TaskID+"/answer", token, `{"text":"the red one"}`)
	var answered crewlet.Ticket
	if err := json.Unmarshal([]byte(body), &answered); err != nil || code != http.StatusOK || answered.Answer != "the red one" {
		t.Fatalf("the operator's answer after a declined elicitation: %d %s; want it taken", code, body)
	}

	ask(task.TaskID, "and the size?", "w:1:1")
	wantQuestion("and the size?", task.TaskID)
	replies <- &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "large"}}
	testenv.Eventually(t, 10*time.Second, "the accepted answer on the ticket", func() error {
		tk, err := c.b.st.Ticket(c.b.ctx, task.TaskID)
		if err != nil || tk.Phase != crewlet.TicketPending || tk.Answer != "large" {
			return fmt.Errorf("%s answer %q (%v)", tk.Phase, tk.Answer, err)
		}
		return nil
	})
	if _, settled, err := c.srv.Tickets.Settle(c.b.ctx, task.TaskID, "a large red one"); err != nil || !settled {
		t.Fatalf("settle: %v %v", settled, err)
	}
	if err := <-done; err != nil || result(t, final, nil) != "a large red one" {
		t.Fatalf("tasks/result: %+v %v; want the reply", final, err)
	}

	// A plain call: the question comes on the call, with no task.
	plain := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(c.b.ctx, &mcp.CallToolParams{Name: "ask_cto", Arguments: map[string]any{"text": "which shape", "wait": "30s"}})
		if err != nil {
			t.Error(err)
		}
		plain <- res
	}()
	var open crewlet.Ticket
	testenv.Eventually(t, 10*time.Second, "the plain call's ticket", func() error {
		list, err := c.b.st.Tickets(c.b.ctx, store.TicketFilter{To: "cto", Open: true})
		if err != nil || len(list) != 1 {
			return fmt.Errorf("%d open tickets (%v)", len(list), err)
		}
		open = list[0]
		return nil
	})
	ask(open.ID, "round or square?", "w:2:0")
	wantQuestion("round or square?", nil)
	replies <- &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "round"}}
	testenv.Eventually(t, 10*time.Second, "the plain call's answer on the ticket", func() error {
		tk, err := c.b.st.Ticket(c.b.ctx, open.ID)
		if err != nil || tk.Answer != "round" {
			return fmt.Errorf("%s answer %q (%v)", tk.Phase, tk.Answer, err)
		}
		return nil
	})
	if _, settled, err := c.srv.Tickets.Settle(c.b.ctx, open.ID, "a round one"); err != nil || !settled {
		t.Fatalf("settle: %v %v", settled, err)
	}
	if res := <-plain; res == nil || result(t, res, nil) != "a round one" {
		t.Fatalf("the plain call: %+v; want the reply", res)
	}
}
