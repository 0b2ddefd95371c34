// Package a2a is the Agent2Agent protocol (A2A 1.0, JSON-RPC binding) as
// crewlet speaks it
// (docs/operations.md, "Talk to crewlet from other agents"):
// the wire types, and the pure rules that show a ticket as an A2A task,
// its changes and its serving turn's live events as stream updates, and a
// crewlet error as a JSON-RPC error. An A2A task is a ticket: its id is the
// ticket's, its context the ticket's conversation.
package a2a

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/events"
)

// ProtocolVersion is the A2A version served; BindingJSONRPC the one
// protocol binding (the REST and gRPC bindings are not served).
const (
	ProtocolVersion = "1.0"
	BindingJSONRPC  = "JSONRPC"
	// VersionHeader is the header a client names the version it speaks in.
	VersionHeader = "A2A-Version"
)

// The JSON-RPC methods of A2A 1.0 served here.
const (
	MethodSendMessage          = "SendMessage"
	MethodSendStreamingMessage = "SendStreamingMessage"
	MethodGetTask              = "GetTask"
	MethodCancelTask           = "CancelTask"
	MethodSubscribeToTask      = "SubscribeToTask"

	MethodCreatePushConfig = "CreateTaskPushNotificationConfig"
	MethodGetPushConfig    = "GetTaskPushNotificationConfig"
	MethodListPushConfigs  = "ListTaskPushNotificationConfigs"
	MethodDeletePushConfig = "DeleteTaskPushNotificationConfig"
)

// methods are the methods served, in the order errors list them.
var methods = []string{
	MethodSendMessage, MethodSendStreamingMessage, MethodGetTask, MethodCancelTask, MethodSubscribeToTask,
	MethodCreatePushConfig, MethodGetPushConfig, MethodListPushConfigs, MethodDeletePushConfig,
}

// Mutates reports whether method changes something (a task opened,
// answered or cancelled, a webhook set or deleted), so that it spends the
// caller's mutation budget as its /tickets twin does; reads and unknown
// methods spend none.
func Mutates(method string) bool {
	switch method {
	case MethodSendMessage, MethodSendStreamingMessage, MethodCancelTask, MethodCreatePushConfig, MethodDeletePushConfig:
		return true
	}
	return false
}

// unsupported are the methods of A2A 1.0 not served, each with the error
// that says so; legacy the A2A 0.3 names of the methods served, answered
// with the name to use.
var (
	unsupported = map[string]int{
		"ListTasks":            CodeUnsupportedOperation,
		"GetExtendedAgentCard": CodeExtendedCardNotConfigured,
	}
	legacy = map[string]string{
		"message/send":                        MethodSendMessage,
		"message/stream":                      MethodSendStreamingMessage,
		"tasks/get":                           MethodGetTask,
		"tasks/cancel":                        MethodCancelTask,
		"tasks/resubscribe":                   MethodSubscribeToTask,
		"tasks/pushNotificationConfig/set":    MethodCreatePushConfig,
		"tasks/pushNotificationConfig/get":    MethodGetPushConfig,
		"tasks/pushNotificationConfig/list":   MethodListPushConfigs,
		"tasks/pushNotificationConfig/delete": MethodDeletePushConfig,
		// the gRPC binding's name of the JSON-RPC method's
		"ListTaskPushNotificationConfig": MethodListPushConfigs,
	}
)

// JSON-RPC and A2A error codes.
const (
	CodeParseError                = -32700
	CodeInvalidRequest            = -32600
	CodeMethodNotFound            = -32601
	CodeInvalidParams             = -32602
	CodeInternal                  = -32603
	CodeTaskNotFound              = -32001
	CodeTaskNotCancelable         = -32002
	CodeUnsupportedOperation      = -32004
	CodeContentTypeNotSupported   = -32005
	CodeExtendedCardNotConfigured = -32007
	CodeVersionNotSupported       = -32009
	// CodeRefused is crewlet's, in JSON-RPC's range for the server's own
	// errors: the token may not, or not now (rate, quota, availability);
	// the HTTP status says which.
	CodeRefused = -32000
)

// Request is a JSON-RPC request.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// Response is a JSON-RPC response: a result or an error.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Error is a JSON-RPC error.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// Errorf is a protocol error of code.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Check checks a request's envelope and its method: nil when it is one
// served, else the error to answer.
func (r Request) Check() *Error {
	switch {
	case r.JSONRPC != "2.0":
		return Errorf(CodeInvalidRequest, "jsonrpc must be \"2.0\", got %q", crewlet.OneLine(r.JSONRPC, 16))
	case len(r.ID) == 0 || string(r.ID) == "null":
		return Errorf(CodeInvalidRequest, "the request has no id; every A2A method answers, so send an id")
	case r.ID[0] != '"' && (r.ID[0] < '0' || r.ID[0] > '9') && r.ID[0] != '-':
		return Errorf(CodeInvalidRequest, "id must be a string or a number")
	}
	if slices.Contains(methods, r.Method) {
		return nil
	}
	served := strings.Join(methods, ", ")
	if code, ok := unsupported[r.Method]; ok {
		return Errorf(code, "%s is not served: crewlet's A2A serves %s", r.Method, served)
	}
	if now, ok := legacy[r.Method]; ok {
		return Errorf(CodeVersionNotSupported, "%s is not an A2A %s JSON-RPC method: call %s", r.Method, ProtocolVersion, now)
	}
	return Errorf(CodeMethodNotFound, "no method %q; A2A %s methods served: %s", crewlet.OneLine(r.Method, 64), ProtocolVersion, served)
}

// CheckVersion refuses a client that names a version other than 1.x in
// the A2A-Version header; one that names none is taken as 1.0's.
func CheckVersion(header string) *Error {
	if header == "" || header == ProtocolVersion || strings.HasPrefix(header, "1.") {
		return nil
	}
	return Errorf(CodeVersionNotSupported, "%s %q is not served; this server speaks A2A %s", VersionHeader, crewlet.OneLine(header, 16), ProtocolVersion)
}

// Roles of a message.
const (
	RoleUser  = "ROLE_USER"
	RoleAgent = "ROLE_AGENT"
)

// Message is one message of a task.
type Message struct {
	MessageID string `json:"messageId"`
	ContextID string `json:"contextId,omitempty"`
	TaskID    string `json:"taskId,omitempty"`
	Role      string `json:"role"`
	Parts     []Part `json:"parts"`
}

// Part is a message's or an artifact's part. A2A's may be text, raw
// bytes, a URL or data; crewlet takes and gives text, so a part without
// text is one it refuses.
type Part struct {
	Text *string `json:"text,omitempty"`
}

// TextPart is a part of text.
func TextPart(text string) Part { return Part{Text: &text} }

// Text is a message's text: its text parts, one paragraph each. A part of
// anything else is refused: a ticket's task is text.
func Text(m Message) (string, *Error) {
	var texts []string
	for i, p := range m.Parts {
		if p.Text == nil {
			return "", Errorf(CodeContentTypeNotSupported, "message part %d is not text; crewlet's seats take text parts only", i)
		}
		texts = append(texts, *p.Text)
	}
	if len(texts) == 0 {
		return "", Errorf(CodeInvalidParams, "the message has no parts; send the task as a text part")
	}
	return strings.Join(texts, "\n\n"), nil
}

// SendMessageRequest is the params of SendMessage and SendStreamingMessage.
type SendMessageRequest struct {
	Message       *Message                 `json:"message"`
	Configuration SendMessageConfiguration `json:"configuration"`
	Metadata      map[string]any           `json:"metadata"`
}

// SendMessageConfiguration is how a client wants SendMessage answered.
type SendMessageConfiguration struct {
	// ReturnImmediately answers with the task as it stands; otherwise
	// SendMessage waits (bounded) until it ends or asks for input.
	ReturnImmediately bool `json:"returnImmediately"`
	// PushConfig, when set, is a webhook for the message's task, as
	// CreateTaskPushNotificationConfig would set.
	PushConfig *PushConfig `json:"taskPushNotificationConfig"`
}

// PushConfig is a task's webhook (A2A's TaskPushNotificationConfig): the
// params and result of CreateTaskPushNotificationConfig.
type PushConfig struct {
	// ID names it among its task's; the server picks one when empty.
	ID     string `json:"id,omitempty"`
	TaskID string `json:"taskId"`
	URL    string `json:"url"`
	// Token is sent with each notification; the server picks one when
	// empty, and shows it only in the answer to the call that set it.
	Token          string          `json:"token,omitempty"`
	Authentication *Authentication `json:"authentication,omitempty"`
}

// Authentication is how a notification authenticates to its webhook: an
// Authorization header of Scheme and Credentials (the credentials are
// never shown back).
type Authentication struct {
	Scheme      string `json:"scheme"`
	Credentials string `json:"credentials,omitempty"`
}

// PushConfigRequest is the params of GetTaskPushNotificationConfig and
// DeleteTaskPushNotificationConfig.
type PushConfigRequest struct {
	TaskID string `json:"taskId"`
	ID     string `json:"id"`
}

// ListPushConfigsRequest is the params of ListTaskPushNotificationConfigs.
// A task has few configs, so one page holds them all: pageSize and
// pageToken are taken and let be.
type ListPushConfigsRequest struct {
	TaskID string `json:"taskId"`
}

// ListPushConfigsResponse is ListTaskPushNotificationConfigs's result.
type ListPushConfigsResponse struct {
	Configs []PushConfig `json:"configs"`
}

// TaskRequest is the params of GetTask, CancelTask and SubscribeToTask.
type TaskRequest struct {
	ID string `json:"id"`
}

// SendMessageResponse is SendMessage's result: crewlet answers with the
// task; a remote agent may answer with a message instead.
type SendMessageResponse struct {
	Task    *Task    `json:"task,omitempty"`
	Message *Message `json:"message,omitempty"`
}

// Task states.
const (
	StateWorking       = "TASK_STATE_WORKING"
	StateCompleted     = "TASK_STATE_COMPLETED"
	StateFailed        = "TASK_STATE_FAILED"
	StateCanceled      = "TASK_STATE_CANCELED"
	StateInputRequired = "TASK_STATE_INPUT_REQUIRED"
)

// Task is a ticket as A2A shows it.
type Task struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    TaskStatus     `json:"status"`
	Artifacts []Artifact     `json:"artifacts,omitempty"`
	History   []Message      `json:"history,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// TaskStatus is where a task stands, with the agent's message about it.
type TaskStatus struct {
	State     string   `json:"state"`
	Message   *Message `json:"message,omitempty"`
	Timestamp string   `json:"timestamp,omitempty"`
}

// Artifact is what a task produced: the ticket's reply.
type Artifact struct {
	ArtifactID string `json:"artifactId"`
	Name       string `json:"name,omitempty"`
	Parts      []Part `json:"parts"`
}

// StreamResponse is one event of a stream: the task, or an update of it.
type StreamResponse struct {
	Task           *Task                    `json:"task,omitempty"`
	StatusUpdate   *TaskStatusUpdateEvent   `json:"statusUpdate,omitempty"`
	ArtifactUpdate *TaskArtifactUpdateEvent `json:"artifactUpdate,omitempty"`
}

// TaskStatusUpdateEvent says a task's status changed.
type TaskStatusUpdateEvent struct {
	TaskID    string         `json:"taskId"`
	ContextID string         `json:"contextId"`
	Status    TaskStatus     `json:"status"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// TaskArtifactUpdateEvent brings a task's artifact.
type TaskArtifactUpdateEvent struct {
	TaskID    string   `json:"taskId"`
	ContextID string   `json:"contextId"`
	Artifact  Artifact `json:"artifact"`
	LastChunk bool     `json:"lastChunk"`
}

// StateOf is the A2A state of a ticket's phase: a pending ticket is
// working (its request is in the seat's mailbox or its turn runs), an
// asking one needs the client's input, and each end is its own state
// (expired is failed: it ran out of time).
func StateOf(phase crewlet.TicketPhase) string {
	switch phase {
	case crewlet.TicketAsking:
		return StateInputRequired
	case crewlet.TicketDone:
		return StateCompleted
	case crewlet.TicketFailed, crewlet.TicketExpired:
		return StateFailed
	case crewlet.TicketCancelled:
		return StateCanceled
	}
	return StateWorking
}

// Final reports whether a stream of the ticket ends at this state: when
// it ended, or when it waits for the client's input (the client answers
// with SendMessage naming the task, and subscribes again).
func Final(t crewlet.Ticket) bool {
	return !t.Phase.Open() || t.Phase == crewlet.TicketAsking
}

// ReplyArtifactID names the artifact of a ticket's reply.
const ReplyArtifactID = "reply"

// agentMessage is the seat's message on ticket t.
func agentMessage(t crewlet.Ticket, id, text string) *Message {
	return &Message{MessageID: t.ID + "-" + id, ContextID: t.Conversation, TaskID: t.ID, Role: RoleAgent, Parts: []Part{TextPart(text)}}
}

// StatusOf is a ticket's status: its state and what the seat said of it
// (the question, the reply, or why it ended).
func StatusOf(t crewlet.Ticket) TaskStatus {
	st := TaskStatus{State: StateOf(t.Phase), Timestamp: t.UpdatedAt.UTC().Format(time.RFC3339Nano)}
	switch {
	case t.Phase == crewlet.TicketAsking:
		st.Message = agentMessage(t, "question", t.Question)
	case t.Phase == crewlet.TicketDone:
		st.Message = agentMessage(t, "reply", t.Reply)
	case !t.Phase.Open() && t.Reason != "":
		st.Message = agentMessage(t, string(t.Phase), t.Reason)
	}
	return st
}

// The words an approver's message on a task waiting for approval starts
// with: approve it, or deny it saying why (the model is told why).
const (
	ApproveWord = "approve"
	DenyWord    = "deny"
)

// ApprovalStatus is the status of open ticket t while the turn serving it
// waits for approval a: input is required, an approver's decision, which
// one of those a's policy names gives with a message on the task
// (ApprovalDecision reads it) or as /approvals does.
func ApprovalStatus(t crewlet.Ticket, a crewlet.Approval) TaskStatus {
	text := fmt.Sprintf("%s waits for approval %s of %s by %s. An approver answers with a message on this task: %q, or %q; or with POST /approvals/%s/approve or /deny.",
		t.To, a.ID, a.Tool, strings.Join(a.Approvers, ", "), ApproveWord, DenyWord+": REASON", a.ID)
	return TaskStatus{State: StateInputRequired, Message: agentMessage(t, "approval-"+a.ID, text), Timestamp: a.CreatedAt.UTC().Format(time.RFC3339Nano)}
}

// AwaitingApproval makes task, ticket t's, the task waiting for approval
// a: input-required, naming the approval in its metadata.
func AwaitingApproval(task *Task, t crewlet.Ticket, a crewlet.Approval) {
	task.Status = ApprovalStatus(t, a)
	task.Metadata["approval"] = a.ID
}

// ApprovalDecision reads an approver's message on a task waiting for
// approval a: its first word, "approve" or "deny", then what it says after
// (a ':' between them is left out) as the reason, which a denial needs.
func ApprovalDecision(a crewlet.Approval, text string) (approve bool, reason string, e *Error) {
	text = strings.TrimSpace(text)
	end := strings.IndexFunc(text, func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		end = len(text)
	}
	word := strings.ToLower(text[:end])
	reason = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(text[end:]), ":.!"))
	switch {
	case word == ApproveWord:
		return true, reason, nil
	case word == DenyWord && reason != "":
		return false, reason, nil
	case word == DenyWord:
		return false, "", Errorf(CodeInvalidParams, "a denial of approval %s needs a reason, which the model is told: send %q", a.ID, DenyWord+": REASON")
	}
	return false, "", Errorf(CodeInvalidParams, "the task waits for approval %s of %s: send %q or %q", a.ID, a.Tool, ApproveWord, DenyWord+": REASON")
}

// TaskOf is ticket t as an A2A task: its task and answer the user's
// history, its reply the artifact.
func TaskOf(t crewlet.Ticket) Task {
	task := Task{ID: t.ID, ContextID: t.Conversation, Status: StatusOf(t),
		History:  []Message{{MessageID: t.ID + "-task", ContextID: t.Conversation, TaskID: t.ID, Role: RoleUser, Parts: []Part{TextPart(t.Task)}}},
		Metadata: map[string]any{"seat": t.To, "phase": string(t.Phase)}}
	if t.Answer != "" {
		task.History = append(task.History, Message{MessageID: t.ID + "-answer", ContextID: t.Conversation, TaskID: t.ID, Role: RoleUser, Parts: []Part{TextPart(t.Answer)}})
	}
	if t.Phase == crewlet.TicketDone {
		task.Artifacts = []Artifact{replyArtifact(t)}
	}
	return task
}

func replyArtifact(t crewlet.Ticket) Artifact {
	return Artifact{ArtifactID: ReplyArtifactID, Name: "reply", Parts: []Part{TextPart(t.Reply)}}
}

// Updates are the stream events of a ticket's change to t: its reply as
// the artifact when it settled, then its status.
func Updates(t crewlet.Ticket) []StreamResponse {
	var out []StreamResponse
	if t.Phase == crewlet.TicketDone {
		out = append(out, StreamResponse{ArtifactUpdate: &TaskArtifactUpdateEvent{TaskID: t.ID, ContextID: t.Conversation, Artifact: replyArtifact(t), LastChunk: true}})
	}
	return append(out, StreamResponse{StatusUpdate: &TaskStatusUpdateEvent{TaskID: t.ID, ContextID: t.Conversation, Status: StatusOf(t)}})
}

// LiveUpdate is a live event of the ticket's conversation as a working
// status update, when it is one of the seat serving the ticket and says
// what the turn does; words (a tool's arguments) are in it only when
// transcript says the client may read them. The event's id and kind are
// in the update's metadata.
func LiveUpdate(t crewlet.Ticket, ev events.Event, transcript bool) (StreamResponse, bool) {
	if ev.Seat != t.To {
		return StreamResponse{}, false
	}
	var text string
	switch ev.Kind {
	case events.TurnStarted:
		text = t.To + " started a turn"
	case events.ToolStarted:
		text = t.To + " calls " + ev.Data.Tool
		if transcript && len(ev.Data.Args) > 0 {
			text += " " + crewlet.OneLine(string(ev.Data.Args), 512)
		}
	case events.ToolFinished:
		text = ev.Data.Tool + " " + ev.Data.Outcome
	case events.TicketOpened:
		text = t.To + " delegated to " + ev.Data.To
	default:
		return StreamResponse{}, false
	}
	msg := agentMessage(t, "event-"+ev.ID, text)
	return StreamResponse{StatusUpdate: &TaskStatusUpdateEvent{TaskID: t.ID, ContextID: t.Conversation,
		Status:   TaskStatus{State: StateWorking, Message: msg, Timestamp: ev.Time.UTC().Format(time.RFC3339Nano)},
		Metadata: map[string]any{"event": ev.Kind, "event_id": ev.ID}}}, true
}

// ErrorOf is a crewlet error as a JSON-RPC error, and whether it is the
// protocol's (answered with HTTP 200) rather than a refusal the HTTP
// status carries (401, 403, 429, 503, 500). method decides what a
// conflict is: a task that cannot be cancelled, or one that takes no
// message now.
func ErrorOf(err error, method string) (*Error, bool) {
	msg := crewlet.ErrorMessage(err)
	switch crewlet.ErrorCode(err) {
	case crewlet.EINVALID, crewlet.ETOOLARGE:
		return &Error{Code: CodeInvalidParams, Message: msg}, true
	case crewlet.ENOTFOUND:
		if method == MethodSendMessage || method == MethodSendStreamingMessage {
			// What a message names that is not there: its seat, its role.
			return &Error{Code: CodeInvalidParams, Message: msg}, true
		}
		return &Error{Code: CodeTaskNotFound, Message: msg}, true
	case crewlet.ECONFLICT:
		if method == MethodCancelTask {
			return &Error{Code: CodeTaskNotCancelable, Message: msg}, true
		}
		return &Error{Code: CodeUnsupportedOperation, Message: msg}, true
	case crewlet.EUNSUPPORTED:
		return &Error{Code: CodeContentTypeNotSupported, Message: msg}, true
	case crewlet.EINTERNAL, "":
		return &Error{Code: CodeInternal, Message: msg}, false
	}
	return &Error{Code: CodeRefused, Message: msg}, false
}
