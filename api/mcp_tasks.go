package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/crewlet/crewlet"
)

// MCP tasks (the tasks utility of MCP revision 2025-11-25): an ask_ call
// that carries params.task answers a CreateTaskResult at once, and the task
// is its ticket: taskId is the ticket's id, and tasks/get, tasks/result,
// tasks/cancel and tasks/list read and cancel the ticket through the REST
// routes with the caller's token, as the tools do. Nothing of a task is
// kept in the session: any process reads it from Postgres. A principal's
// tasks are the tickets it opened; another's id is unknown to it.
//
// The Go SDK (v1.8.0) has no tasks, so this file adds what it lacks, each
// where the SDK leaves a way in:
//   - tasks/get, tasks/result, tasks/cancel, tasks/list are custom methods
//     (mcp.AddReceivingCustomMethod); the SDK refuses a method it has no
//     handler for before any middleware sees it.
//   - A custom method's handler is not given the request's header, which
//     holds the caller's token; mcpTasks, a receiving middleware, puts it
//     in the context for them.
//   - tools/call's params decode into a struct without "task", so the SDK
//     drops it: markTaskCall reads it off the HTTP body first and says so
//     in a header of the request, which middleware does see.
//   - The initialize result's capabilities and a tool's "execution" have no
//     field in the SDK's types: mcpTasks adds them to the JSON it answers.
const (
	// mcpTaskHeader marks a tools/call that asks to run as a task. Only
	// markTaskCall sets it; a client's own is removed.
	mcpTaskHeader = "Crewlet-Mcp-Task-Call"
	// mcpTaskPoll is the pollInterval a task suggests: a ticket's turn
	// takes seconds at the least.
	mcpTaskPoll = 2 * time.Second
	// mcpTaskPage is how many tasks tasks/list answers at a time.
	mcpTaskPage = 50
	// mcpResultWait bounds a tasks/result on an open ticket. Ending a
	// session waits for its calls in flight (the SDK does not cancel them),
	// so no call may wait for ever; this is the longest wait an ask_ call
	// may name.
	mcpResultWait = maxTicketWait
	// codeRequestTimeout answers a tasks/result past mcpResultWait: the
	// code the MCP TypeScript SDK gives a request that timed out.
	codeRequestTimeout = -32001
	// relatedTaskMeta is the _meta key naming the task a message belongs to.
	relatedTaskMeta = "io.modelcontextprotocol/related-task"

	methodTasksGet    = "tasks/get"
	methodTasksResult = "tasks/result"
	methodTasksCancel = "tasks/cancel"
	methodTasksList   = "tasks/list"
)

// MCPTask is an MCP task: a ticket as tasks/get answers it.
type MCPTask struct {
	TaskID string `json:"taskId"`
	// Status is working (pending), input_required (asking), completed
	// (done), failed (failed or expired) or cancelled.
	Status string `json:"status"`
	// StatusMessage is the question while input_required, the reason
	// once failed or cancelled.
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is maintenance.ticket_retention in milliseconds: a ticket is
	// deleted that long after it settled, so never sooner after it opened.
	TTL          int64 `json:"ttl"`
	PollInterval int64 `json:"pollInterval"`
}

// MCP task statuses.
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// taskOf is ticket t as an MCP task.
func (s *Server) taskOf(ctx context.Context, t crewlet.Ticket) MCPTask {
	task := MCPTask{TaskID: t.ID, CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), LastUpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano),
		TTL: s.Org.Now().Maintenance.TicketRetention.Milliseconds(), PollInterval: mcpTaskPoll.Milliseconds()}
	switch t.Phase {
	case crewlet.TicketPending:
		task.Status = TaskWorking
		// A turn waiting for an approval needs an approver's input; the
		// task says whose and how (the approval is decided at /approvals,
		// not through this client).
		waiting, err := s.waitingApproval(ctx, t)
		if err != nil {
			s.Log.WarnContext(ctx, "mcp_task_approval_unreadable", "ticket", t.ID, "error", err)
		}
		if waiting != nil {
			task.Status, task.StatusMessage = TaskInputRequired, fmt.Sprintf("%s waits for approval %s of %s by %s; an approver decides it with POST /approvals/%s/approve or /deny",
				t.To, waiting.ID, waiting.Tool, strings.Join(waiting.Approvers, ", "), waiting.ID)
		}
	case crewlet.TicketAsking:
		task.Status, task.StatusMessage = TaskInputRequired, fmt.Sprintf("%s asks: %s", t.To, t.Question)
	case crewlet.TicketDone:
		task.Status = TaskCompleted
	case crewlet.TicketCancelled:
		task.Status, task.StatusMessage = TaskCancelled, t.Reason
	default:
		task.Status, task.StatusMessage = TaskFailed, fmt.Sprintf("%s: %s", t.Phase, t.Reason)
	}
	return task
}

// taskParams are the params of tasks/get, tasks/result and tasks/cancel.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// listTasksParams are the params of tasks/list.
type listTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

// taskResult answers tasks/get and tasks/cancel: the task's fields.
type taskResult struct {
	mcp.ResultBase
	MCPTask
}

// createTaskResult answers a tools/call that asked to run as a task.
type createTaskResult struct {
	mcp.ResultBase
	Task MCPTask `json:"task"`
}

// taskList answers tasks/list.
type taskList struct {
	mcp.ResultBase
	Tasks      []MCPTask `json:"tasks"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

// markTaskCall marks r with mcpTaskHeader when its body is a tools/call
// with params.task, and takes off any mcpTaskHeader the client sent. The
// body is read up to the SDK's own bound and handed on whole.
func markTaskCall(r *http.Request) {
	r.Header.Del(mcpTaskHeader)
	if r.Method != http.MethodPost || r.Body == nil {
		return
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil {
		return
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Task json.RawMessage `json:"task"`
		} `json:"params"`
	}
	if json.Unmarshal(head, &msg) == nil && msg.Method == "tools/call" && len(msg.Params.Task) > 0 && string(msg.Params.Task) != "null" {
		r.Header.Set(mcpTaskHeader, "1")
	}
}

// extraKey holds a request's *mcp.RequestExtra in the context of its
// custom method's handler.
type extraKey struct{}

// taskCallKey holds, in the context of an ask_ tool called as a task, the
// *crewlet.Ticket the tool opens.
type taskCallKey struct{}

// mcpTasks is the receiving middleware of a session's server: it states
// the tasks capability and the ask_ tools' task support, makes a tools/call
// marked by markTaskCall a task, and hands each request's extra to the
// task methods.
func (s *Server) mcpTasks(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ctx = context.WithValue(ctx, extraKey{}, req.GetExtra())
		var edit func(map[string]any)
		switch method {
		case "initialize":
			edit = func(res map[string]any) {
				caps, _ := res["capabilities"].(map[string]any)
				if caps == nil {
					caps = map[string]any{}
					res["capabilities"] = caps
				}
				caps["tasks"] = map[string]any{"list": struct{}{}, "cancel": struct{}{}, "requests": map[string]any{"tools": map[string]any{"call": struct{}{}}}}
			}
		case "tools/list":
			edit = func(res map[string]any) {
				tools, _ := res["tools"].([]any)
				for _, tool := range tools {
					if tool, ok := tool.(map[string]any); ok {
						if name, _ := tool["name"].(string); strings.HasPrefix(name, askPrefix) {
							tool["execution"] = map[string]any{"taskSupport": "optional"}
						}
					}
				}
			}
		case "tools/call":
			if extra := req.GetExtra(); extra != nil && extra.Header.Get(mcpTaskHeader) != "" {
				return s.createTask(ctx, next, method, req)
			}
		}
		res, err := next(ctx, method, req)
		if err != nil || edit == nil {
			return res, err
		}
		return withFields(res, edit)
	}
}

// createTask runs a tools/call of an ask_ tool as a task: the tool opens
// its ticket and returns at once, and the call answers the ticket's task.
// A call the tool refused opened no ticket and answers its error; another
// tool does not run as a task (its execution.taskSupport is absent).
func (s *Server) createTask(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	// The SDK decodes a tools/call's params, never missing, into this.
	params := req.GetParams().(*mcp.CallToolParamsRaw)
	if !strings.HasPrefix(params.Name, askPrefix) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("tool %q does not run as a task: only the ask_ tools do; call it without params.task", params.Name)}
	}
	var opened crewlet.Ticket
	res, err := next(context.WithValue(ctx, taskCallKey{}, &opened), method, req)
	if err != nil {
		return nil, err
	}
	if opened.ID == "" {
		msg := "the call opened no ticket"
		if called, ok := res.(*mcp.CallToolResult); ok {
			msg = resultText(called)
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
	}
	return &createTaskResult{Task: s.taskOf(ctx, opened), ResultBase: mcp.ResultBase{Meta: mcp.Meta{
		"io.modelcontextprotocol/model-immediate-response": fmt.Sprintf("ticket %s to %s is open; its reply comes as the task's result", opened.ID, opened.To),
	}}}, nil
}

// resultText is the text of a tool result.
func resultText(res *mcp.CallToolResult) string {
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return text.String()
}

// jsonResult is a result the SDK's types cannot say, as its JSON.
type jsonResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

func (r *jsonResult) MarshalJSON() ([]byte, error) { return r.raw, nil }

// withFields is res with edit applied to its JSON object, for the fields
// the SDK's result types lack.
func withFields(res mcp.Result, edit func(map[string]any)) (mcp.Result, error) {
	data, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	edit(fields)
	if data, err = json.Marshal(fields); err != nil {
		return nil, err
	}
	return &jsonResult{raw: data}, nil
}

// addTaskMethods adds tasks/get, tasks/result, tasks/cancel and tasks/list
// to srv, the server of a session that owner opened.
func (s *Server) addTaskMethods(srv *mcp.Server, router http.Handler, owner string) {
	must := func(err error) {
		if err != nil {
			panic(fmt.Sprintf("MCP task methods: %v", err))
		}
	}
	must(mcp.AddReceivingCustomMethod(srv, methodTasksGet, func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*taskResult, error) {
		ticket, err := s.ownTicket(ctx, router, owner, p)
		if err != nil {
			return nil, err
		}
		return &taskResult{MCPTask: s.taskOf(ctx, ticket)}, nil
	}))
	must(mcp.AddReceivingCustomMethod(srv, methodTasksResult, func(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*mcp.CallToolResult, error) {
		ticket, err := s.ownTicket(ctx, router, owner, p)
		if err != nil {
			return nil, err
		}
		related := mcp.Meta{relatedTaskMeta: map[string]any{"taskId": ticket.ID}}
		if ticket, err = s.followTicket(ctx, ss, router, extraOf(ctx), ticket, time.Now().Add(mcpResultWait), related); err != nil {
			return nil, rpcErrorOf(s.mcpError(ctx, err))
		}
		if ticket.Phase.Open() {
			return nil, &jsonrpc.Error{Code: codeRequestTimeout, Message: fmt.Sprintf("task %s is still %s after %s; call tasks/result again for its result, or poll tasks/get",
				ticket.ID, s.taskOf(ctx, ticket).Status, mcpResultWait)}
		}
		// As the ask_ tool answers it, where the SDK adds the structured
		// content a typed tool returns.
		res, state, _ := ticketResult(ticket)
		res.StructuredContent, res.Meta = state, related
		return res, nil
	}))
	must(mcp.AddReceivingCustomMethod(srv, methodTasksCancel, func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*taskResult, error) {
		ticket, err := s.ownTicket(ctx, router, owner, p)
		if err != nil {
			return nil, err
		}
		if !ticket.Phase.Open() {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s is %s already; only a working or input_required task can be cancelled", ticket.ID, s.taskOf(ctx, ticket).Status)}
		}
		if err := s.callRoute(ctx, router, extraOf(ctx), http.MethodPost, "/tickets/"+ticket.ID+"/cancel",
			CancelTicketRequest{Reason: "the MCP client cancelled its task"}, &ticket); err != nil {
			return nil, rpcErrorOf(err)
		}
		return &taskResult{MCPTask: s.taskOf(ctx, ticket)}, nil
	}))
	must(mcp.AddReceivingCustomMethod(srv, methodTasksList, func(ctx context.Context, _ *mcp.ServerSession, p *listTasksParams) (*taskList, error) {
		q := url.Values{"opened_by": {owner}, "limit": {strconv.Itoa(mcpTaskPage)}}
		if p != nil && p.Cursor != "" {
			// A cursor is the last task of the page before: one of the
			// caller's own.
			if _, err := s.ownTicket(ctx, router, owner, &taskParams{TaskID: p.Cursor}); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("cursor %q is not one tasks/list answered; send the nextCursor it answered, or none for the first page", p.Cursor)}
			}
			q.Set("before", p.Cursor)
		}
		var tickets []crewlet.Ticket
		if err := s.callRoute(ctx, router, extraOf(ctx), http.MethodGet, "/tickets?"+q.Encode(), nil, &tickets); err != nil {
			return nil, rpcErrorOf(err)
		}
		out := &taskList{Tasks: []MCPTask{}}
		for _, t := range tickets {
			out.Tasks = append(out.Tasks, s.taskOf(ctx, t))
		}
		if len(tickets) == mcpTaskPage {
			out.NextCursor = tickets[len(tickets)-1].ID
		}
		return out, nil
	}))
}

// extraOf is the request's extra that mcpTasks put in ctx.
func extraOf(ctx context.Context) *mcp.RequestExtra {
	extra, _ := ctx.Value(extraKey{}).(*mcp.RequestExtra)
	return extra
}

// ownTicket is the ticket of the task p names, read by GET /tickets/{id}
// with the caller's token, when owner opened it: another's ticket, one the
// route refuses and one that does not exist are all a task it does not have.
func (s *Server) ownTicket(ctx context.Context, router http.Handler, owner string, p *taskParams) (crewlet.Ticket, error) {
	if p == nil || p.TaskID == "" {
		return crewlet.Ticket{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.taskId is missing: send the taskId a task-augmented tools/call answered"}
	}
	if err := crewlet.CheckID("taskId", p.TaskID); err != nil {
		return crewlet.Ticket{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: crewlet.ErrorMessage(err)}
	}
	notYours := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no task %s of yours: your tasks are the tickets you opened (tasks/list lists them)", p.TaskID)}
	var ticket crewlet.Ticket
	if err := s.callRoute(ctx, router, extraOf(ctx), http.MethodGet, "/tickets/"+p.TaskID, nil, &ticket); err != nil {
		var refused *routeRefusal
		if errors.As(err, &refused) && refused.status == http.StatusNotFound {
			return ticket, notYours
		}
		return ticket, rpcErrorOf(err)
	}
	if ticket.OpenedBy != owner {
		return crewlet.Ticket{}, notYours
	}
	return ticket, nil
}

// rpcErrorOf is err as a JSON-RPC error: a route's refusal of the caller's
// request is invalid params, with its message; anything else is internal,
// its text already kept to what the caller may know (mcpError).
func rpcErrorOf(err error) *jsonrpc.Error {
	var refused *routeRefusal
	if errors.As(err, &refused) && refused.status < http.StatusInternalServerError {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// answerSchema is what an elicitation of a seat's question asks for.
var answerSchema = &jsonschema.Schema{
	Type:       "object",
	Properties: map[string]*jsonschema.Schema{"answer": {Type: "string", Description: "your answer to the seat's question"}},
	Required:   []string{"answer"},
}

// followTicket waits for ticket to end, or for ctx to end or the deadline
// (when not zero) to pass, and returns it as it stands then. Each question
// its seat asks meanwhile is put to the client as an elicitation where the
// client takes them (it declared the elicitation capability): an accepted
// answer answers the ticket as POST /tickets/{id}/answer does with the
// caller's token; a declined or cancelled one leaves the question for an
// answer by other means, and is not put again in this wait. The deadline
// bounds waiting on the seat, not on the person answering.
func (s *Server) followTicket(ctx context.Context, ss *mcp.ServerSession, router http.Handler, extra *mcp.RequestExtra, ticket crewlet.Ticket, deadline time.Time, meta mcp.Meta) (crewlet.Ticket, error) {
	if s.TicketWatch == nil {
		return ticket, errNoTicketWatch
	}
	params := ss.InitializeParams()
	elicits := params != nil && params.Capabilities != nil && params.Capabilities.Elicitation != nil
	// put is the question last put to the client, by when it was asked.
	put := ""
	question := func(t crewlet.Ticket) string {
		if t.Phase != crewlet.TicketAsking {
			return ""
		}
		return fmt.Sprint(t.AskedAt, t.Question)
	}
	for {
		wait, cancel := ctx, context.CancelFunc(func() {})
		if !deadline.IsZero() {
			wait, cancel = context.WithDeadline(ctx, deadline)
		}
		var err error
		ticket, err = s.TicketWatch.AwaitUntil(wait, ticket, func(t crewlet.Ticket) bool {
			return !t.Phase.Open() || elicits && question(t) != "" && question(t) != put
		})
		waited := wait.Err() != nil
		cancel()
		if err != nil || !ticket.Phase.Open() || waited {
			return ticket, err
		}
		put = question(ticket)
		res, err := ss.Elicit(ctx, &mcp.ElicitParams{Meta: meta, Mode: "form", RequestedSchema: answerSchema,
			Message: fmt.Sprintf("%s asks (ticket %s): %s", ticket.To, ticket.ID, ticket.Question)})
		if err != nil {
			s.Log.WarnContext(ctx, "mcp_elicit_failed", "ticket", ticket.ID, "error", err)
			continue
		}
		answer, _ := res.Content["answer"].(string)
		if res.Action != "accept" || answer == "" {
			continue
		}
		if err := s.callRoute(ctx, router, extra, http.MethodPost, "/tickets/"+ticket.ID+"/answer", AnswerTicketRequest{Text: answer}, &ticket); err != nil {
			s.Log.WarnContext(ctx, "mcp_answer_refused", "ticket", ticket.ID, "error", err)
		}
	}
}
