package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// mcpCompany is authOrg's API with what tickets need (Redis, the ticket
// watch), and no seat running: a ticket stays pending until the test
// settles it.
type mcpCompany struct {
	base string
	srv  *api.Server
	b    bundle
}

func newMCPCompany(t *testing.T) mcpCompany {
	t.Helper()
	s, b := authMailServer(t)
	if err := s.Mailbox.Ensure(b.ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	watch := b.st.WatchTickets(s.Log)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go watch.Run(ctx)
	s.TicketWatch = watch
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return mcpCompany{base: srv.URL, srv: s, b: b}
}

// bearer sends a token with every request of an MCP client.
type bearer string

func (tok bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(tok))
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session with the official Go SDK's client.
func (c mcpCompany) connect(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	return c.connectWith(t, token, nil)
}

// connectWith opens an MCP session with the Go SDK's client made with
// opts, which may send the task methods.
func (c mcpCompany) connectWith(t *testing.T, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "crewlet-test", Version: "1"}, opts)
	for _, err := range []error{
		mcp.AddSendingCustomMethod[*taskParams, *taskAnswer](client, "tasks/get"),
		mcp.AddSendingCustomMethod[*taskParams, *mcp.CallToolResult](client, "tasks/result"),
		mcp.AddSendingCustomMethod[*taskParams, *taskAnswer](client, "tasks/cancel"),
		mcp.AddSendingCustomMethod[*listTasksParams, *taskListAnswer](client, "tasks/list"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cs, err := client.Connect(c.b.ctx, &mcp.StreamableClientTransport{Endpoint: c.base + "/mcp", HTTPClient: &http.Client{Transport: bearer(token)}}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// result is a tool result's text and its structured answer.
func result(t *testing.T, res *mcp.CallToolResult, out any) string {
	t.Helper()
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if out != nil && res.StructuredContent != nil {
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
	}
	return text.String()
}

// openTo waits until exactly one ticket to handle exists and returns it.
func (c mcpCompany) openTo(t *testing.T, handle string) crewlet.Ticket {
	t.Helper()
	var ticket crewlet.Ticket
	testenv.Eventually(t, 10*time.Second, "a ticket to "+handle, func() error {
		list, err := c.b.st.Tickets(c.b.ctx, store.TicketFilter{To: handle})
		if err != nil || len(list) != 1 {
			return fmt.Errorf("%d tickets (%v)", len(list), err)
		}
		ticket = list[0]
		return nil
	})
	return ticket
}

// /mcp is behind the door and the guard like any route, and each tool is
// the route it names, for the principal that calls it: a viewer is not
// offered ask_ tools, a member reads only its own seat's tickets and seat,
// a session is its opener's alone, and an ask is POST /tickets, audited as
// one. (list_seats and a seat's
// resource read Temporal: the e2e test reads them.)
func TestMCPToolsAreTheirRoutesForTheCaller(t *testing.T) {
	c := newMCPCompany(t)
	if code, body := call(t, http.MethodPost, c.base+"/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`); code != http.StatusUnauthorized {
		t.Fatalf("POST /mcp without a token: %d %s; want 401", code, body)
	}
	if code, body := call(t, http.MethodPost, c.base+"/mcp", "not-a-token", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`); code != http.StatusUnauthorized {
		t.Fatalf("POST /mcp with a wrong token: %d %s; want 401", code, body)
	}

	viewer, operator, member := c.connect(t, tokens["viewer"]), c.connect(t, tokens["operator"]), c.connect(t, tokens["member"])
	if got, want := toolNames(t, viewer), []string{"list_seats", "ticket_status"}; !slices.Equal(got, want) {
		t.Errorf("a viewer's tools: %v; want %v", got, want)
	}
	if got, want := toolNames(t, operator), []string{"ask_cto", "ask_role_lead", "list_seats", "ticket_status"}; !slices.Equal(got, want) {
		t.Errorf("an operator's tools: %v; want %v", got, want)
	}

	if code, body := call(t, http.MethodPost, c.base+"/mcp", tokens["viewer"], `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`,
		"Mcp-Session-Id", operator.ID(), "Accept", "application/json, text/event-stream", "Mcp-Protocol-Version", "2025-06-18"); code != http.StatusForbidden {
		t.Errorf("a viewer's request in the operator's session: %d %s; want 403", code, body)
	}

	res, err := operator.CallTool(c.b.ctx, &mcp.CallToolParams{Name: "ask_cto", Arguments: map[string]any{"text": "what is up", "wait": "1s"}})
	if err != nil {
		t.Fatal(err)
	}
	var asked api.TicketState
	text := result(t, res, &asked)
	ticket := c.openTo(t, "cto")
	if res.IsError || asked.State != crewlet.TicketPending || asked.Ticket != ticket.ID || !strings.Contains(text, "ticket_status") {
		t.Fatalf("ask_cto past its wait: %q %+v; want ticket %s pending, to poll with ticket_status", text, asked, ticket.ID)
	}
	if ticket.OpenedBy != "otto" || ticket.Task != "what is up" {
		t.Errorf("the ticket: opened by %q, task %q; want otto's, the text asked", ticket.OpenedBy, ticket.Task)
	}
	audit, err := c.b.st.Audit(c.b.ctx, store.AuditFilter{Principal: "otto", Action: "POST /tickets", Limit: 10})
	if err != nil || len(audit) != 1 || audit[0].Outcome != "allowed" {
		t.Errorf("otto's POST /tickets audit rows: %+v (%v); want one, allowed", audit, err)
	}

	res, err = member.CallTool(c.b.ctx, &mcp.CallToolParams{Name: "ticket_status", Arguments: map[string]any{"ticket": ticket.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if text := result(t, res, nil); !res.IsError || !strings.Contains(text, "member for seat bob") {
		t.Errorf("a member's ticket_status of another seat's ticket: %q; want refused as GET /tickets/{id} refuses it", text)
	}
	res, err = viewer.CallTool(c.b.ctx, &mcp.CallToolParams{Name: "ticket_status", Arguments: map[string]any{"ticket": ticket.ID}})
	if err != nil {
		t.Fatal(err)
	}
	var status api.TicketState
	if text := result(t, res, &status); res.IsError || status.State != crewlet.TicketPending || status.To != "cto" {
		t.Errorf("a viewer's ticket_status: %q %+v; want pending, to cto", text, status)
	}
	if _, err := viewer.CallTool(c.b.ctx, &mcp.CallToolParams{Name: "ask_cto", Arguments: map[string]any{"text": "x"}}); err == nil {
		t.Errorf("a viewer called ask_cto; want no such tool")
	}

	if _, err := member.ReadResource(c.b.ctx, &mcp.ReadResourceParams{URI: "crewlet://seats/cto"}); err == nil || !strings.Contains(err.Error(), "member for seat bob") {
		t.Errorf("a member reads another seat's resource: %v; want refused as GET /seats/cto refuses it", err)
	}
	if _, err := viewer.ReadResource(c.b.ctx, &mcp.ReadResourceParams{URI: "crewlet://seats/nobody"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a read of a seat that does not exist: %v; want resource not found", err)
	}
}

// An ask_ call waits for its ticket's reply and answers it; a call the
// client cancels cancels its ticket.
func TestMCPAskAnswersTheReplyAndACancelCancelsTheTicket(t *testing.T) {
	c := newMCPCompany(t)
	cs := c.connect(t, tokens["operator"])
	type called struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan called, 1)
	go func() {
		res, err := cs.CallTool(c.b.ctx, &mcp.CallToolParams{Name: "ask_role_lead", Arguments: map[string]any{"text": "ship it", "wait": "30s"}})
		done <- called{res, err}
	}()
	ticket := c.openTo(t, "cto")
	if _, settled, err := c.srv.Tickets.Settle(c.b.ctx, ticket.ID, "shipped"); err != nil || !settled {
		t.Fatalf("settle %s: %v %v", ticket.ID, settled, err)
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	var state api.TicketState
	if text := result(t, got.res, &state); text != "shipped" || state.State != crewlet.TicketDone || got.res.IsError {
		t.Fatalf("ask_role_lead once its ticket is done: %q %+v; want the reply", text, state)
	}

	ctx, cancel := context.WithCancel(c.b.ctx)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_cto", Arguments: map[string]any{"text": "never mind", "wait": "5m"}})
		done <- called{nil, err}
	}()
	var asked crewlet.Ticket
	testenv.Eventually(t, 10*time.Second, "the second ticket", func() error {
		list, err := c.b.st.Tickets(c.b.ctx, store.TicketFilter{To: "cto", Open: true})
		if err != nil || len(list) != 1 {
			return fmt.Errorf("%d open tickets (%v)", len(list), err)
		}
		asked = list[0]
		return nil
	})
	cancel()
	<-done
	testenv.Eventually(t, 10*time.Second, "the cancelled call's ticket cancelled", func() error {
		got, err := c.b.st.Ticket(c.b.ctx, asked.ID)
		if err != nil || got.Phase != crewlet.TicketCancelled || !strings.Contains(got.Reason, "the MCP client cancelled its call") {
			return fmt.Errorf("%s %q (%v)", got.Phase, got.Reason, err)
		}
		return nil
	})
}

// A session that ends while an ask_ call waits (the client closed it, or
// it idled out) withdraws nothing: only notifications/cancelled does. The
// call returns at its wait, its ticket still pending.
func TestMCPSessionEndingIsNotACancel(t *testing.T) {
	c := newMCPCompany(t)
	post := func(ctx context.Context, session, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tokens["operator"])
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post(c.b.ctx, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, session)
	}
	resp = post(c.b.ctx, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	streamed := make(chan struct{})
	go func() {
		resp := post(c.b.ctx, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask_cto","arguments":{"text":"take your time","wait":"2s"}}}`)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		close(streamed)
	}()
	ticket := c.openTo(t, "cto")

	req, _ := http.NewRequestWithContext(c.b.ctx, http.MethodDelete, c.base+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+tokens["operator"])
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mcp: %d; want 204", resp.StatusCode)
	}
	// The SDK's DELETE answers once the session's calls in flight have
	// returned (an ask_ call at its wait, here 2s; its answer has no
	// stream left to go to): the call has decided by now.
	<-streamed
	got, err := c.b.st.Ticket(c.b.ctx, ticket.ID)
	if err != nil || got.Phase != crewlet.TicketPending {
		t.Fatalf("the ticket of a call whose session ended: %s %q (%v); want still pending", got.Phase, got.Reason, err)
	}
}
