package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/authority"
)

// The MCP server (docs/operations.md, "Talk to crewlet from other agents"):
// /mcp speaks MCP's streamable HTTP through the official Go SDK, behind the
// door and the guard like every route. Each tool call and resource read is
// a REST route served in-process with the caller's own Authorization
// header, so what it may do, its mutation budget and its audit row are that
// route's, and there is no second path to a ticket or a read:
//
//	ask_<handle>, ask_role_<role>  POST /tickets, then POST /tickets/{id}/cancel when the client cancels the call
//	ticket_status                  GET /tickets/{id}
//	list_seats                     GET /seats
//	crewlet://seats/{handle}       GET /seats/{handle}
//	crewlet://conversations/{id}   GET /conversations/{id}
//
// An ask_ call can also run as an MCP task, which is its ticket, and a
// seat's question reaches a client as an elicitation (mcp_tasks.go).

const (
	mcpPath = "/mcp"
	// mcpSessionHeader names the session a request is in; a POST without
	// it opens one.
	mcpSessionHeader = "Mcp-Session-Id"
	// mcpAskWait is how long an ask_ call waits for the reply when it names
	// no wait: under the minute the MCP TypeScript SDK waits for a request
	// by default before it cancels the call, and cancelling an ask_ call
	// cancels its ticket. Past it the call answers the ticket to poll.
	mcpAskWait = "45s"
	// mcpSessionIdle is how long a session nobody calls on is kept.
	mcpSessionIdle = 30 * time.Minute
	// maxToolName is the longest tool name the model providers take
	// (OpenAI's and Anthropic's ^[a-zA-Z0-9_-]{1,64}$).
	maxToolName = 64
	// mcpCancelWithin bounds cancelling the ticket of a cancelled call,
	// which runs after the call's own context has ended.
	mcpCancelWithin = 10 * time.Second

	askPrefix       = "ask_"
	askRolePrefix   = "ask_role_"
	seatURIPrefix   = "crewlet://seats/"
	conversationURI = "crewlet://conversations/"
)

// toolName is the MCP tool name of asking name (a handle or a role) with
// prefix: prefix+name, which fits the providers' charset as every handle
// and role does. A name that would pass maxToolName, and a seat whose
// handle begins "role_" (its plain name would read as a role's tool), get
// the plain name cut to fit and "_" and the first 8 hex digits of the
// name's SHA-256 instead; list_seats says which tool asks each seat.
func toolName(prefix, name string) string {
	plain := prefix + name
	if len(plain) <= maxToolName && (prefix == askRolePrefix || !strings.HasPrefix(plain, askRolePrefix)) {
		return plain
	}
	sum := sha256.Sum256([]byte(name))
	return plain[:min(len(plain), maxToolName-9)] + "_" + hex.EncodeToString(sum[:4])
}

// newMCPHandler is the handler of /mcp over router, the API's own routes.
// A session gets a server of its own, made for the org as it stands and
// for the principal that opened it, and is bound to that principal: a
// request in it with another token is refused.
func (s *Server) newMCPHandler(router http.Handler) http.Handler {
	sessions := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return s.mcpServer(r, router)
	}, &mcp.StreamableHTTPOptions{
		Logger:         s.Log,
		SessionTimeout: mcpSessionIdle,
		// The door refuses a foreign Host, by api.hosts, which the SDK's
		// own check does not know.
		DisableLocalhostProtection: true,
	})
	bound := auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: principalOf(r).Name}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(sessions)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		markTaskCall(r)
		if principalOf(r).Anonymous {
			// An org without tokens: everyone is the one anonymous caller.
			sessions.ServeHTTP(w, r)
			return
		}
		bound.ServeHTTP(w, r)
	})
}

// serveMCP serves /mcp. Opening a session is /mcp's one write of its own
// (it holds a server in this process until it idles out), so it spends one
// of the principal's mutations.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	if p := principalOf(r); r.Method == http.MethodPost && r.Header.Get(mcpSessionHeader) == "" && !s.allowMutation(p.Name) {
		writeError(w, crewlet.Errorf(crewlet.ERATELIMITED, "%s opened MCP sessions and sent mutations past %d in a minute (api.mutations_per_minute); keep one session (header %s) or slow down",
			p.Name, s.Org.Now().API.MutationsPerMinute, mcpSessionHeader))
		return
	}
	s.mcp.ServeHTTP(w, r)
}

// AskInput is the input of an ask_ tool.
type AskInput struct {
	Text         string `json:"text" jsonschema:"what to ask: the ticket's task"`
	Conversation string `json:"conversation,omitempty" jsonschema:"the conversation to continue; a new one when empty"`
	Wait         string `json:"wait,omitempty" jsonschema:"how long to wait for the reply, such as 45s (the default) or 5m (at most 10m); past it the call answers the ticket's id and state, to poll with ticket_status"`
}

// TicketStatusInput is the input of ticket_status.
type TicketStatusInput struct {
	Ticket string `json:"ticket" jsonschema:"the ticket's id, as an ask_ call answered it"`
}

// TicketState is what an ask_ call or ticket_status answers: the ticket,
// and its reply once it is done.
type TicketState struct {
	Ticket       string              `json:"ticket"`
	To           string              `json:"to"`
	State        crewlet.TicketPhase `json:"state"`
	Conversation string              `json:"conversation"`
	Reply        string              `json:"reply,omitempty"`
	// Question is what the serving seat asks while the state is asking.
	Question string `json:"question,omitempty"`
	// Reason is why it failed, was cancelled or expired.
	Reason string `json:"reason,omitempty"`
}

// MCPSeats is what list_seats answers.
type MCPSeats struct {
	Seats []MCPSeat `json:"seats"`
}

// MCPSeat is one seat in list_seats: GET /seats's summary, and the tool
// that asks it.
type MCPSeat struct {
	Handle string `json:"handle"`
	Role   string `json:"role,omitempty"`
	Kind   string `json:"kind"`
	Status string `json:"status"`
	// Tool is the ask_ tool of an agent seat; empty for a person's.
	Tool string `json:"tool,omitempty"`
}

// mcpServer is the server of one session opened by r: a tool per agent
// seat and per role with agent seats when its principal may open tickets,
// list_seats, ticket_status and the resources. The tools are the org's when
// the session opened; a seat added since needs a new session.
func (s *Server) mcpServer(r *http.Request, router http.Handler) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "crewlet", Title: s.Org.Now().Company.Name, Version: "1"}, &mcp.ServerOptions{Logger: s.Log})
	srv.AddReceivingMiddleware(s.mcpTasks)
	s.addTaskMethods(srv, router, principalOf(r).Name)
	org := s.Org.Now()
	if (route{action: authority.OpenTicket}).allows(principalOf(r), r) {
		var roles []string
		for _, seat := range org.AgentSeats() {
			mcp.AddTool(srv, &mcp.Tool{Name: toolName(askPrefix, seat.Handle), Title: "ask " + seat.Handle,
				Description: fmt.Sprintf("Ask seat %s (role %s) and wait for its reply: opens a ticket to it, as POST /tickets does.", seat.Handle, seat.Role)},
				s.askTool(router, seat.Handle))
			if seat.Role != "" && !slices.Contains(roles, seat.Role) {
				roles = append(roles, seat.Role)
			}
		}
		slices.Sort(roles)
		for _, role := range roles {
			mcp.AddTool(srv, &mcp.Tool{Name: toolName(askRolePrefix, role), Title: "ask role " + role,
				Description: fmt.Sprintf("Ask the least busy seat of role %s and wait for its reply: opens a ticket to role:%s, as POST /tickets does.", role, role)},
				s.askTool(router, crewlet.RolePrefix+role))
		}
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "list_seats", Description: "The company's seats: handle, role, kind, status, and the ask_ tool of each agent seat (GET /seats).",
		OutputSchema: seatsSchema},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, MCPSeats, error) {
			var seats []SeatSummary
			if err := s.callRoute(ctx, router, req.Extra, http.MethodGet, "/seats", nil, &seats); err != nil {
				return nil, MCPSeats{}, err
			}
			out := MCPSeats{Seats: []MCPSeat{}}
			for _, seat := range seats {
				m := MCPSeat{Handle: seat.Handle, Role: seat.Role, Kind: seat.Kind, Status: seat.Status}
				if seat.Kind == string(crewlet.SeatAgent) {
					m.Tool = toolName(askPrefix, seat.Handle)
				}
				out.Seats = append(out.Seats, m)
			}
			return nil, out, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "ticket_status", Description: "A ticket's state, and its reply once it is done (GET /tickets/{id})."},
		func(ctx context.Context, req *mcp.CallToolRequest, in TicketStatusInput) (*mcp.CallToolResult, TicketState, error) {
			if err := crewlet.CheckID("ticket", in.Ticket); err != nil {
				return nil, TicketState{}, errors.New(crewlet.ErrorMessage(err))
			}
			var ticket crewlet.Ticket
			if err := s.callRoute(ctx, router, req.Extra, http.MethodGet, "/tickets/"+in.Ticket, nil, &ticket); err != nil {
				return nil, TicketState{}, err
			}
			return ticketResult(ticket)
		})
	for _, seat := range org.Seats {
		srv.AddResource(&mcp.Resource{URI: seatURIPrefix + seat.Handle, Name: seat.Handle, MIMEType: "application/json",
			Description: "seat " + seat.Handle + ": its config, tenure, live state and open tickets (GET /seats/{handle})"}, s.readResource(router))
	}
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: seatURIPrefix + "{handle}", Name: "seat", MIMEType: "application/json",
		Description: "a seat: its config, tenure, live state and open tickets (GET /seats/{handle})"}, s.readResource(router))
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: conversationURI + "{id}", Name: "conversation", MIMEType: "application/json",
		Description: "a conversation's first page of messages, oldest first, and its summaries (GET /conversations/{id}; next says where GET /conversations/{id}?after= goes on)"}, s.readResource(router))
	return srv
}

// seatsSchema is list_seats' output schema. Inferred, a slice is "null or
// array", which a client mapping schemas onto one type each (Gemini's
// function declarations) refuses; the list is never null.
var seatsSchema = func() *jsonschema.Schema {
	s, err := jsonschema.For[MCPSeats](nil)
	if err != nil {
		panic(fmt.Sprintf("list_seats' output schema: %v", err))
	}
	s.Properties["seats"].Types, s.Properties["seats"].Type = nil, "array"
	return s
}()

// askTool asks to (a seat, or role:R): it opens the ticket by POST
// /tickets and follows it to its end, up to the call's wait, putting the
// seat's questions to a client that takes elicitations (followTicket).
// Called as a task (mcpTasks), it returns once the ticket is open. A call
// the client cancels (notifications/cancelled) cancels its ticket by POST
// /tickets/{id}/cancel; a call whose connection dropped leaves the ticket
// be, to read with ticket_status.
func (s *Server) askTool(router http.Handler, to string) mcp.ToolHandlerFor[AskInput, TicketState] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in AskInput) (*mcp.CallToolResult, TicketState, error) {
		wait, err := ticketWait(cmp.Or(in.Wait, mcpAskWait))
		if err != nil {
			return nil, TicketState{}, errors.New(crewlet.ErrorMessage(err))
		}
		var ticket crewlet.Ticket
		// Opened whole whatever the call's context does meanwhile: a
		// cancel that comes now finds the ticket below.
		if err := s.callRoute(context.WithoutCancel(ctx), router, req.Extra, http.MethodPost, "/tickets",
			OpenTicketRequest{To: to, Task: in.Text, Conversation: in.Conversation}, &ticket); err != nil {
			return nil, TicketState{}, err
		}
		if task, ok := ctx.Value(taskCallKey{}).(*crewlet.Ticket); ok {
			*task = ticket
			return ticketResult(ticket)
		}
		if ticket, err = s.followTicket(ctx, req.Session, router, req.Extra, ticket, time.Now().Add(wait), nil); err != nil {
			return nil, TicketState{}, s.mcpError(ctx, err)
		}
		// The SDK cancels a call's context with no cause of its own for a
		// notifications/cancelled naming it, and with the read or write
		// error when the connection fails: only the first withdraws the ask.
		if ticket.Phase.Open() && context.Cause(ctx) == context.Canceled {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mcpCancelWithin)
			defer cancel()
			err := s.callRoute(cctx, router, req.Extra, http.MethodPost, "/tickets/"+ticket.ID+"/cancel",
				CancelTicketRequest{Reason: "the MCP client cancelled its call"}, &ticket)
			if err != nil {
				s.Log.WarnContext(cctx, "mcp_cancel_failed", "ticket", ticket.ID, "error", err)
			}
		}
		return ticketResult(ticket)
	}
}

// ticketResult is a tool's answer of ticket t: its reply when done, how to
// go on while it is open, and an error result when it failed, was
// cancelled or expired.
func ticketResult(t crewlet.Ticket) (*mcp.CallToolResult, TicketState, error) {
	state := TicketState{Ticket: t.ID, To: t.To, State: t.Phase, Conversation: t.Conversation, Reply: t.Reply, Question: t.Question, Reason: t.Reason}
	res := &mcp.CallToolResult{}
	var text string
	switch t.Phase {
	case crewlet.TicketDone:
		text = t.Reply
	case crewlet.TicketPending:
		text = fmt.Sprintf("ticket %s to %s is still pending; call ticket_status with {\"ticket\": %q} for its reply", t.ID, t.To, t.ID)
	case crewlet.TicketAsking:
		text = fmt.Sprintf("ticket %s: %s asks: %s\nanswer it with POST /tickets/%s/answer, then call ticket_status with {\"ticket\": %q} for the reply", t.ID, t.To, t.Question, t.ID, t.ID)
	default:
		res.IsError = true
		text = fmt.Sprintf("ticket %s to %s is %s: %s", t.ID, t.To, t.Phase, t.Reason)
	}
	res.Content = []mcp.Content{&mcp.TextContent{Text: text}}
	return res, state, nil
}

// readResource reads a seat or a conversation by its route.
func (s *Server) readResource(router http.Handler) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		var path string
		if handle, ok := strings.CutPrefix(uri, seatURIPrefix); ok && crewlet.ValidName(handle) {
			path = "/seats/" + handle
		} else if id, ok := strings.CutPrefix(uri, conversationURI); ok && crewlet.CheckID("conversation", id) == nil {
			path = "/conversations/" + url.PathEscape(id)
		} else {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		var body json.RawMessage
		if err := s.callRoute(ctx, router, req.Extra, http.MethodGet, path, nil, &body); err != nil {
			var refused *routeRefusal
			if errors.As(err, &refused) && refused.status == http.StatusNotFound {
				return nil, mcp.ResourceNotFoundError(uri)
			}
			return nil, rpcErrorOf(err)
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(body)}}}, nil
	}
}

// routeRefusal is a route's error answer to an in-process call: its
// status, and its body's error and detail, which carry no internal text.
type routeRefusal struct {
	status int
	body   errorBody
}

func (e *routeRefusal) Error() string {
	return fmt.Sprintf("%s (HTTP %d): %s", e.body.Error, e.status, e.body.Detail)
}

// callRoute serves method path (with body as JSON) through the API's own
// routes for an MCP call, with the call's Authorization header, and
// decodes a 2xx answer into out; any other is a *routeRefusal. The route
// authenticates, authorizes, budgets and audits the call as its own.
func (s *Server) callRoute(ctx context.Context, router http.Handler, extra *mcp.RequestExtra, method, path string, body, out any) error {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	// The call's context holds the values of the request that opened the
	// session, its chi routing among them, which would make the router
	// take this request for a mounted one's.
	ctx = context.WithValue(ctx, chi.RouteCtxKey, (*chi.Context)(nil))
	r, err := http.NewRequestWithContext(ctx, method, path, bytes.NewReader(data))
	if err != nil {
		return s.mcpError(ctx, err)
	}
	// The call came through the door already; this names the API as the
	// door takes its own loopback name.
	r.Host = "localhost"
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if extra != nil {
		if token := extra.Header.Get("Authorization"); token != "" {
			r.Header.Set("Authorization", token)
		}
	}
	w := &answer{header: http.Header{}}
	router.ServeHTTP(w, r)
	if w.status < 200 || w.status > 299 {
		refused := &routeRefusal{status: w.status}
		_ = json.Unmarshal(w.body.Bytes(), &refused.body)
		return refused
	}
	if err := json.Unmarshal(w.body.Bytes(), out); err != nil {
		return s.mcpError(ctx, fmt.Errorf("decode %s %s: %w", method, path, err))
	}
	return nil
}

// mcpError is err as a tool or read may answer it: its message when it is
// the caller's to know, a pointer to the log (where its text goes) when not.
func (s *Server) mcpError(ctx context.Context, err error) error {
	if code := crewlet.ErrorCode(err); code == crewlet.EINTERNAL || code == crewlet.EUNAVAILABLE {
		s.Log.ErrorContext(ctx, "mcp_error", "error", err)
	}
	return errors.New(crewlet.ErrorMessage(err))
}

// answer keeps a route's answer to an in-process call.
type answer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *answer) Header() http.Header { return w.header }

func (w *answer) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *answer) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}
