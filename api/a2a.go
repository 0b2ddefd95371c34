package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/wire"
)

// A2A (docs/operations.md, "Talk to crewlet from other agents"): the
// agent cards and JSON-RPC endpoints of the company, of each agent seat
// and of each role. A task is a ticket, opened, answered, read and
// cancelled by the same services and rules as /tickets. A card names
// seats and roles, so reading one takes the right to list the seats, as
// GET /seats does.

// A2A's paths: the company's endpoint, and the prefixes of a seat's and a
// role's.
const (
	a2aPath      = "/a2a"
	a2aSeatsPath = "/a2a/seats/"
	a2aRolesPath = "/a2a/roles/"
)

// a2aBase is the scheme and host the request reached the API by, which
// the door checked: the URLs a card gives are the ones its reader used.
func a2aBase(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

func (s *Server) companyCard(w http.ResponseWriter, r *http.Request) {
	base := a2aBase(r)
	writeJSON(w, http.StatusOK, a2a.CompanyCard(s.Org.Now(), base+a2aPath,
		func(handle string) string { return base + a2aSeatsPath + handle + a2a.CardPath },
		func(role string) string { return base + a2aRolesPath + role + a2a.CardPath }))
}

func (s *Server) seatCard(w http.ResponseWriter, r *http.Request) {
	if seat, ok := s.agentSeat(w, r); ok {
		writeJSON(w, http.StatusOK, a2a.SeatCard(s.Org.Now(), seat, a2aBase(r)+a2aSeatsPath+seat.Handle))
	}
}

func (s *Server) roleCard(w http.ResponseWriter, r *http.Request) {
	if role, ok := s.orgRole(w, r); ok {
		writeJSON(w, http.StatusOK, a2a.RoleCard(s.Org.Now(), role, a2aBase(r)+a2aRolesPath+role))
	}
}

func (s *Server) companyA2A(w http.ResponseWriter, r *http.Request) { s.serveA2A(w, r, "") }

func (s *Server) seatA2A(w http.ResponseWriter, r *http.Request) {
	if seat, ok := s.agentSeat(w, r); ok {
		s.serveA2A(w, r, seat.Handle)
	}
}

func (s *Server) roleA2A(w http.ResponseWriter, r *http.Request) {
	if role, ok := s.orgRole(w, r); ok {
		s.serveA2A(w, r, crewlet.RolePrefix+role)
	}
}

// agentSeat is the path's seat when it is an agent's: a person's seat
// takes no tasks.
func (s *Server) agentSeat(w http.ResponseWriter, r *http.Request) (config.Seat, bool) {
	seat, ok := s.orgSeat(w, r)
	if ok && seat.Kind == string(crewlet.SeatHuman) {
		writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "%s is a person's seat; A2A reaches agent seats and roles only (GET %s lists them)", seat.Handle, a2a.CardPath))
		return seat, false
	}
	return seat, ok
}

// orgRole is the path's {role}, when the org has it.
func (s *Server) orgRole(w http.ResponseWriter, r *http.Request) (string, bool) {
	role, ok := pathID(w, r, "role")
	if !ok {
		return "", false
	}
	if _, ok := s.Org.Now().Roles[role]; !ok {
		writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "no role %q; GET %s lists the roles", role, a2a.CardPath))
		return "", false
	}
	return role, true
}

// rpcCall is one JSON-RPC request being answered.
type rpcCall struct {
	s   *Server
	w   http.ResponseWriter
	r   *http.Request
	req a2a.Request
}

// id is the request's id, null when it had none to answer with.
func (c *rpcCall) id() json.RawMessage {
	if len(c.req.ID) == 0 {
		return json.RawMessage("null")
	}
	return c.req.ID
}

func (c *rpcCall) result(v any) {
	writeJSON(c.w, http.StatusOK, a2a.Response{JSONRPC: "2.0", ID: c.id(), Result: v})
}

// fail answers err: a protocol error with 200, a refusal (401, 403, 429,
// 503) and an internal error (500, its text only in the log) with their
// HTTP status, each as a JSON-RPC error the audit row says.
func (c *rpcCall) fail(err error) {
	status := http.StatusOK
	var e *a2a.Error
	if !errors.As(err, &e) {
		var protocol bool
		e, protocol = a2a.ErrorOf(err, c.req.Method)
		if code := crewlet.ErrorCode(err); !protocol {
			if status = statusOf[code]; status == 0 {
				status = http.StatusInternalServerError
			}
			if code == crewlet.EINTERNAL || code == crewlet.EUNAVAILABLE {
				c.s.Log.ErrorContext(c.r.Context(), "api_error", "method", c.r.Method, "path", c.r.URL.Path, "a2a_method", c.req.Method, "error", err)
			}
		}
	}
	outcome := wire.AuditFailed
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		outcome = wire.AuditDenied
	}
	noteOutcome(c.w, outcome, "A2A "+crewlet.OneLine(c.req.Method, 64)+": "+e.Message)
	writeJSON(c.w, status, a2a.Response{JSONRPC: "2.0", ID: c.id(), Error: e})
}

// may refuses the request's principal when the action's rule would refuse
// it on a route of this path: each method of the endpoint is held to the
// action its REST twin takes.
func (c *rpcCall) may(a authority.Action) error {
	rt := route{method: http.MethodPost, pattern: c.r.URL.Path, action: a}
	if p := principalOf(c.r); !rt.allows(p, c.r) {
		return rt.forbidden(p)
	}
	return nil
}

// params decodes the request's params into v; fields A2A has and crewlet
// does not use are let be.
func (c *rpcCall) params(v any) error {
	if len(c.req.Params) == 0 || string(c.req.Params) == "null" {
		return a2a.Errorf(a2a.CodeInvalidParams, "%s needs params", c.req.Method)
	}
	if err := json.Unmarshal(c.req.Params, v); err != nil {
		return a2a.Errorf(a2a.CodeInvalidParams, "params are not %s's: %v", c.req.Method, err)
	}
	return nil
}

// serveA2A answers one JSON-RPC request to the endpoint of to: a seat,
// role:R, or "" for the company's, where a message names its seat or role
// in the request's metadata "to".
func (s *Server) serveA2A(w http.ResponseWriter, r *http.Request, to string) {
	c := &rpcCall{s: s, w: w, r: r}
	body, err := readBody(r)
	switch {
	case err != nil:
		c.fail(a2a.Errorf(a2a.CodeInvalidRequest, "%s", crewlet.ErrorMessage(err)))
		return
	case len(body) == 0:
		c.fail(a2a.Errorf(a2a.CodeInvalidRequest, "the body is empty; send a JSON-RPC 2.0 request"))
		return
	case body[0] == '[':
		c.fail(a2a.Errorf(a2a.CodeInvalidRequest, "batch requests are not served; send one request per call"))
		return
	}
	if err := json.Unmarshal(body, &c.req); err != nil {
		c.req = a2a.Request{}
		c.fail(a2a.Errorf(a2a.CodeParseError, "the body is not a JSON-RPC request: %v", err))
		return
	}
	if e := c.req.Check(); e != nil {
		if e.Code == a2a.CodeInvalidRequest {
			c.req.ID = nil
		}
		c.fail(e)
		return
	}
	if e := a2a.CheckVersion(r.Header.Get(a2a.VersionHeader)); e != nil {
		c.fail(e)
		return
	}
	if p := principalOf(r); a2a.Mutates(c.req.Method) && !s.allowMutation(p.Name) {
		c.fail(s.pastMutations(p.Name))
		return
	}
	switch c.req.Method {
	case a2a.MethodSendMessage, a2a.MethodSendStreamingMessage:
		err = s.a2aSend(c, to)
	case a2a.MethodGetTask:
		err = s.a2aGet(c)
	case a2a.MethodCancelTask:
		err = s.a2aCancel(c)
	case a2a.MethodSubscribeToTask:
		err = s.a2aSubscribe(c)
	case a2a.MethodCreatePushConfig:
		err = s.a2aCreatePushConfig(c)
	case a2a.MethodGetPushConfig:
		err = s.a2aGetPushConfig(c)
	case a2a.MethodListPushConfigs:
		err = s.a2aListPushConfigs(c)
	case a2a.MethodDeletePushConfig:
		err = s.a2aDeletePushConfig(c)
	}
	if err != nil {
		c.fail(err)
	}
}

// a2aSend opens a ticket for the message, or answers the question of the
// input-required task it names, then answers the task: at once
// (returnImmediately), once it ended or asks (bounded by maxTicketWait),
// or as a stream.
func (s *Server) a2aSend(c *rpcCall, to string) error {
	var params a2a.SendMessageRequest
	if err := c.params(&params); err != nil {
		return err
	}
	if params.Message == nil {
		return a2a.Errorf(a2a.CodeInvalidParams, "params.message is missing: send {message: {messageId, role: %q, parts: [{text: ...}]}}", a2a.RoleUser)
	}
	text, e := a2a.Text(*params.Message)
	if e != nil {
		return e
	}
	stream := c.req.Method == a2a.MethodSendStreamingMessage
	// The message's webhook is checked before its task is opened or
	// answered: a refused one changes nothing.
	var webhook *store.PushConfig
	if pc := params.Configuration.PushConfig; pc != nil {
		if pc.ID == "" {
			// A message sent again sets its config again, not a second one.
			pc.ID = params.Message.MessageID
		}
		checked, err := s.checkPushConfig(c, params.Message.TaskID, *pc)
		if err != nil {
			return err
		}
		webhook = &checked
	}
	var ticket crewlet.Ticket
	var after string
	var err error
	if params.Message.TaskID != "" {
		ticket, err = s.a2aReply(c, params.Message.TaskID, text)
	} else {
		ticket, after, err = s.a2aOpen(c, to, params, text, stream)
	}
	if err != nil {
		return err
	}
	if webhook != nil {
		if _, err := s.putPushConfig(c, ticket, *webhook, ticket.Phase); err != nil {
			return err
		}
	}
	noteAudit(c.w, "A2A "+c.req.Method+": ticket "+ticket.ID)
	if stream {
		return s.a2aStream(c, ticket, after)
	}
	if !params.Configuration.ReturnImmediately && s.TicketWatch != nil {
		ctx, cancel := context.WithTimeout(c.r.Context(), maxTicketWait)
		defer cancel()
		if ticket, err = s.TicketWatch.AwaitUntil(ctx, ticket, func(t crewlet.Ticket) bool {
			_, final, err := s.a2aTask(ctx, t)
			return final || err != nil
		}); err != nil {
			return err
		}
	}
	task, _, err := s.a2aTask(c.r.Context(), ticket)
	if err != nil {
		return err
	}
	c.result(a2a.SendMessageResponse{Task: &task})
	return nil
}

// a2aTask is ticket t's task, and whether a stream or a wait of it ends
// there: it ended, or it needs input, the answer to the seat's question
// or an approver's decision on the call the turn serving it waits to make.
func (s *Server) a2aTask(ctx context.Context, t crewlet.Ticket) (a2a.Task, bool, error) {
	task := a2a.TaskOf(t)
	if a2a.Final(t) {
		return task, true, nil
	}
	a, err := s.waitingApproval(ctx, t)
	if a != nil {
		a2a.AwaitingApproval(&task, t, *a)
	}
	return task, a != nil, err
}

// waitingApproval is the pending approval the turn serving open ticket t
// waits on, if one does.
func (s *Server) waitingApproval(ctx context.Context, t crewlet.Ticket) (*crewlet.Approval, error) {
	if t.Phase != crewlet.TicketPending {
		return nil, nil
	}
	list, err := s.Store.Approvals(ctx, store.ApprovalFilter{Ticket: t.ID, Status: crewlet.ApprovalPending, Limit: 1})
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return &list[0], nil
}

// a2aOpen opens the ticket a message asks for, as POST /tickets does,
// keyed on the principal and the message's id so that a message sent
// again opens nothing more. A stream's live events start at after: the
// conversation's start when the ticket starts one, its tail before the
// ticket was opened otherwise.
func (s *Server) a2aOpen(c *rpcCall, to string, params a2a.SendMessageRequest, text string, stream bool) (crewlet.Ticket, string, error) {
	if err := c.may(authority.OpenTicket); err != nil {
		return crewlet.Ticket{}, "", err
	}
	if to == "" {
		to, _ = params.Metadata["to"].(string)
		if to == "" {
			return crewlet.Ticket{}, "", a2a.Errorf(a2a.CodeInvalidParams, "the company's endpoint needs the seat or role:R to ask in the request's metadata \"to\" (GET %s lists them as skills), or use that seat's own card", a2a.CardPath)
		}
	}
	r, p, msg := c.r, principalOf(c.r), params.Message
	if err := s.spawnRefusal(r, p, to); err != nil {
		return crewlet.Ticket{}, "", err
	}
	from, err := s.sender(r, "")
	if err != nil {
		return crewlet.Ticket{}, "", err
	}
	if err := s.conversationRefusal(r.Context(), p, msg.ContextID); err != nil {
		return crewlet.Ticket{}, "", err
	}
	var key string
	if msg.MessageID != "" {
		if err := crewlet.CheckText("messageId", msg.MessageID, crewlet.MaxNameBytes); err != nil {
			return crewlet.Ticket{}, "", err
		}
		key = "a2a/" + p.Name + "/" + msg.MessageID
	}
	var after string
	switch {
	case !stream:
	case msg.ContextID == "":
		after = "0-0"
	case s.Events != nil:
		after, _ = s.Events.Tail(r.Context(), s.Events.ConversationStream(msg.ContextID))
	}
	ticket, err := s.Tickets.Open(r.Context(), tickets.OpenRequest{
		Key: key, From: from, To: to, Task: text, Conversation: msg.ContextID, OpenedBy: p.Name,
	})
	return ticket, after, err
}

// a2aTicket is the task id's ticket, when the principal may read it.
func (s *Server) a2aTicket(c *rpcCall, id string) (crewlet.Ticket, error) {
	if err := crewlet.CheckID("task id", id); err != nil {
		return crewlet.Ticket{}, err
	}
	ticket, err := s.Store.Ticket(c.r.Context(), id)
	if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
		return ticket, a2a.Errorf(a2a.CodeTaskNotFound, "no task %s", id)
	}
	if err == nil {
		err = ticketRefusal(principalOf(c.r), ticket)
	}
	return ticket, err
}

// a2aReply is the client's message on the input-required task id: the
// answer to the seat's question, as POST /tickets/{id}/answer takes it,
// or an approver's decision on the approval the task waits for, as POST
// /approvals/{id}/approve or /deny takes it.
func (s *Server) a2aReply(c *rpcCall, id, text string) (crewlet.Ticket, error) {
	ticket, err := s.a2aTicket(c, id)
	if err != nil {
		return ticket, err
	}
	waiting, err := s.waitingApproval(c.r.Context(), ticket)
	switch {
	case err != nil:
		return ticket, err
	case waiting != nil:
		return ticket, s.a2aDecide(c, *waiting, text)
	case ticket.Phase != crewlet.TicketAsking:
		return ticket, a2a.Errorf(a2a.CodeUnsupportedOperation, "task %s is %s, not %s: it takes a message only while it asks a question or waits for an approval; for more work send a message without taskId (the same contextId keeps the conversation)",
			ticket.ID, a2a.StateOf(ticket.Phase), a2a.StateInputRequired)
	}
	if err := c.may(authority.AnswerTicket); err != nil {
		return ticket, err
	}
	by, err := ticketActorOf(c.w, principalOf(c.r), ticket, "answer")
	if err != nil {
		return ticket, err
	}
	return s.Tickets.Answer(c.r.Context(), id, text, by)
}

// a2aDecide decides approval a as the client's message says, when the
// client is one its policy names.
func (s *Server) a2aDecide(c *rpcCall, a crewlet.Approval, text string) error {
	if err := c.may(authority.DecideApproval); err != nil {
		return err
	}
	approve, reason, e := a2a.ApprovalDecision(a, text)
	if e != nil {
		return e
	}
	if err := crewlet.CheckText("reason", reason, crewlet.MaxReasonBytes); err != nil {
		return err
	}
	p := principalOf(c.r)
	_, err := s.Approvals.Decide(c.r.Context(), a.ID, approvals.Decider{Name: p.Name, Role: p.Role, Seat: p.Seat}, approve, reason, nil)
	return err
}

// namedTask is the ticket of the task that GetTask, CancelTask or
// SubscribeToTask names, when the principal may take action and read it.
func (s *Server) namedTask(c *rpcCall, action authority.Action) (crewlet.Ticket, error) {
	if err := c.may(action); err != nil {
		return crewlet.Ticket{}, err
	}
	var params a2a.TaskRequest
	if err := c.params(&params); err != nil {
		return crewlet.Ticket{}, err
	}
	return s.a2aTicket(c, params.ID)
}

func (s *Server) a2aGet(c *rpcCall) error {
	ticket, err := s.namedTask(c, authority.ReadTicket)
	if err != nil {
		return err
	}
	task, _, err := s.a2aTask(c.r.Context(), ticket)
	if err != nil {
		return err
	}
	c.result(task)
	return nil
}

// a2aCancel cancels the task's ticket, as POST /tickets/{id}/cancel does.
func (s *Server) a2aCancel(c *rpcCall) error {
	ticket, err := s.namedTask(c, authority.CancelTicket)
	if err != nil {
		return err
	}
	if _, err := ticketActorOf(c.w, principalOf(c.r), ticket, "cancel"); err != nil {
		return err
	}
	by, err := actingAs(c.r, "", crewlet.ExternalSender)
	if err != nil {
		return err
	}
	ticket, ended, err := s.Tickets.End(c.r.Context(), ticket.ID, crewlet.TicketCancelled, "cancelled by "+by)
	switch {
	case err != nil:
		return err
	case !ended:
		return crewlet.Errorf(crewlet.ECONFLICT, "task %s is %s already; only a working or input-required task can be cancelled", ticket.ID, a2a.StateOf(ticket.Phase))
	}
	noteAudit(c.w, "A2A "+c.req.Method+": ticket "+ticket.ID)
	c.result(a2a.TaskOf(ticket))
	return nil
}

func (s *Server) a2aSubscribe(c *rpcCall) error {
	ticket, err := s.namedTask(c, authority.ReadTicket)
	if err != nil {
		return err
	}
	return s.a2aStream(c, ticket, "")
}

// a2aStream streams a task: the task as it stands, then its serving
// seat's live events in its conversation (from after; the conversation's
// tail when empty) as working updates and each change of its ticket as
// its artifact and status, until it ended or asks for input, or the
// client goes. A client that lost the stream subscribes again and is
// given the task as it stands then.
func (s *Server) a2aStream(c *rpcCall, ticket crewlet.Ticket, after string) error {
	if s.TicketWatch == nil {
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "this process does not follow tickets, so it streams no task; call %s or %s", a2a.MethodSendMessage, a2a.MethodGetTask)
	}
	w, r, ctx := c.w, c.r, c.r.Context()
	release, ok := s.holdStream(w, r)
	if !ok {
		return nil
	}
	defer release()
	woken, stop := s.TicketWatch.Subscribe(ticket.ID)
	defer stop()
	// Read after subscribing: a change in between is in this read, and
	// one after it wakes the stream.
	ticket, err := s.Store.Ticket(ctx, ticket.ID)
	if err != nil {
		return err
	}
	live := s.liveEvents(ctx, ticket.Conversation, after)
	sse, ok := s.startSSE(w, r, "a2a:"+ticket.ID)
	if !ok {
		return nil
	}
	emit := func(ev a2a.StreamResponse) bool {
		data, err := json.Marshal(a2a.Response{JSONRPC: "2.0", ID: c.id(), Result: ev})
		return err == nil && sse.send("data: %s\n\n", data)
	}
	task, final, err := s.a2aTask(ctx, ticket)
	if err != nil {
		return err
	}
	if !emit(a2a.StreamResponse{Task: &task}) || final {
		return nil
	}
	transcript := MayReadTranscript(principalOf(r), ticket.To)
	keepalive := time.NewTicker(sse.heartbeat)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepalive.C:
			if !sse.send(": keepalive\n\n") {
				return nil
			}
		case evs, open := <-live:
			if !open {
				live = nil
				continue
			}
			for _, ev := range evs {
				if up, ok := a2a.LiveUpdate(ticket, ev, transcript); ok && !emit(up) {
					return nil
				}
			}
		case <-woken:
			// A wake is a change of the ticket's phase, or of an approval
			// the turn serving it asked.
			now, err := s.Store.Ticket(ctx, ticket.ID)
			var waiting *crewlet.Approval
			if err == nil {
				waiting, err = s.waitingApproval(ctx, now)
			}
			if err != nil {
				if ctx.Err() == nil {
					s.Log.WarnContext(ctx, "a2a_stream_unreadable", "ticket", ticket.ID, "error", err)
				}
				return nil // the client subscribes again
			}
			if waiting != nil {
				emit(a2a.StreamResponse{StatusUpdate: &a2a.TaskStatusUpdateEvent{TaskID: now.ID, ContextID: now.Conversation,
					Status: a2a.ApprovalStatus(now, *waiting), Metadata: map[string]any{"approval": waiting.ID}}})
				return nil
			}
			if now.Phase == ticket.Phase && now.UpdatedAt.Equal(ticket.UpdatedAt) {
				continue
			}
			ticket = now
			for _, up := range a2a.Updates(ticket) {
				if !emit(up) {
					return nil
				}
			}
			if a2a.Final(ticket) {
				return nil
			}
		}
	}
}

// liveEvents sends the conversation's live events after after (its tail
// when empty) until ctx ends; nil when this process reads none, or Redis
// does not answer: the stream goes on with the ticket's changes alone.
func (s *Server) liveEvents(ctx context.Context, conversation, after string) <-chan []events.Event {
	if s.Events == nil {
		return nil
	}
	key := s.Events.ConversationStream(conversation)
	if after == "" {
		tail, err := s.Events.Tail(ctx, key)
		if err != nil {
			s.Log.WarnContext(ctx, "stream_unreadable", "stream", key, "error", err)
			return nil
		}
		after = tail
	}
	out := make(chan []events.Event)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			evs, err := s.Events.Read(ctx, key, after, config.DefaultStream.Heartbeat)
			if err != nil {
				if ctx.Err() == nil {
					s.Log.WarnContext(ctx, "stream_unreadable", "stream", key, "error", err)
				}
				return
			}
			if len(evs) == 0 {
				continue
			}
			after = evs[len(evs)-1].ID
			select {
			case out <- evs:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// a2aRoutes are the A2A routes of the route table.
func (s *Server) a2aRoutes() []route {
	get, post := http.MethodGet, http.MethodPost
	rpc := "an A2A 1.0 JSON-RPC request (SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask, and Create, Get, List and Delete TaskPushNotificationConfig(s)); each method needs what its /tickets twin needs, a push config method what GetTask needs. A stream answers text/event-stream"
	return []route{
		{method: get, pattern: a2a.CardPath, action: authority.ReadRoster, handler: s.companyCard,
			summary: "the company's A2A agent card: a skill per agent seat and role:R, each with a card of its own", answer: a2a.AgentCard{}},
		{method: post, pattern: a2aPath, action: authority.SpeakA2A, handler: s.companyA2A, rpc: true,
			summary: rpc + "; a message names its seat or role:R in the request's metadata \"to\"", body: a2a.Request{}, answer: a2a.Response{}},
		{method: get, pattern: a2aSeatsPath + "{handle}" + a2a.CardPath, action: authority.ReadRoster, handler: s.seatCard,
			summary: "an agent seat's A2A agent card: its role's charter as its skill", answer: a2a.AgentCard{}},
		{method: post, pattern: a2aSeatsPath + "{handle}", action: authority.SpeakA2A, handler: s.seatA2A, rpc: true,
			summary: rpc + "; a message opens a ticket to the seat", body: a2a.Request{}, answer: a2a.Response{}},
		{method: get, pattern: a2aRolesPath + "{role}" + a2a.CardPath, action: authority.ReadRoster, handler: s.roleCard,
			summary: "role:R's A2A agent card", answer: a2a.AgentCard{}},
		{method: post, pattern: a2aRolesPath + "{role}", action: authority.SpeakA2A, handler: s.roleA2A, rpc: true,
			summary: rpc + "; a message opens a ticket to the role's least busy seat", body: a2a.Request{}, answer: a2a.Response{}},
	}
}
