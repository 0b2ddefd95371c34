// Package authority is the one table of who may do what in crewlet
// (docs/operations.md, "Authentication and authority"): every action a
// person takes through the API (and the CLI, which calls it) or a seat
// through its own tools, with the right and scope a token needs for it and
// what holds a seat's tool to it. The API's routes and the seat tools each
// name their action and ask this table; docs/operations.md's table is
// rendered from it, and a test holds the two together.
package authority

import (
	"slices"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// Right is what an action needs of a token's role
// (docs/architecture.md, "Doors: the API and the Temporal frontend").
type Right int

// Rights, each including the ones before it: a viewer reads, an operator
// also steers seats and mail, an admin may do everything.
const (
	// Public takes anyone: health and readiness probes.
	Public Right = iota
	Read
	Operate
	Administer
	// Nobody is the right of an action only a seat's own tools take (ask,
	// write its diary, call an MCP tool): above every role's, so no token
	// has it and a route naming such an action would refuse everyone.
	Nobody
)

func (r Right) String() string {
	return [...]string{"public", "read", "operate", "admin", "-"}[r]
}

// Scope is what an action acts on, which decides what a member may do
// with it.
type Scope int

// Scopes. The zero value is none: a public action's, or a seat-only one's.
const (
	ScopeNone Scope = iota
	// ScopeFleet is the whole company: nodes, models, dead letters,
	// schedules, spawning, config, metrics, and steering any seat.
	ScopeFleet
	// ScopeRoster is the list of seats: names, roles, status.
	ScopeRoster
	// ScopeSeat is the seat {handle}: its detail, mail, events, turns,
	// usage, memory and live stream.
	ScopeSeat
	// ScopeSender sends mail or a ticket from a seat to another.
	ScopeSender
	// ScopeConversation is the conversation {id}.
	ScopeConversation
	// ScopeTicket is a ticket, or the list of them.
	ScopeTicket
	// ScopeApproval is an approval, or the list of them.
	ScopeApproval
)

var scopes = [...]struct{ name, member string }{
	ScopeNone:         {"-", "-"},
	ScopeFleet:        {"fleet", "nothing: nodes, models, dead letters, schedules, pools, spawn, config, metrics, and pausing, resuming or draining any seat need a viewer's, operator's or admin's right"},
	ScopeRoster:       {"roster", "list the seats (handle, role, kind, status), to know whom to write to; and connect to `/mcp`, whose every tool and resource is then held to the action of the route it calls, as that route is"},
	ScopeSeat:         {"seat", "read its own seat only: detail, inbox, events, live stream, turns, usage, memory; another seat's is 403"},
	ScopeSender:       {"sender", "send mail and open tickets from its own seat; continue only a conversation its seat is in (403 otherwise)"},
	ScopeConversation: {"conversation", "read a conversation its seat sent or received a message in, and its live stream (also one not recorded yet, which has nobody in it, unless its id has the shape of those crewlet starts itself: schedule-…, tool-…); another is 403"},
	ScopeTicket:       {"ticket", "list and read the tickets its seat opened or serves (`GET /tickets` shows only those); answer and cancel those it opened"},
	ScopeApproval:     {"approval", "list the approvals whose policy names its seat or its seat's `role:R` (`GET /approvals` shows only those) and decide them"},
}

func (s Scope) String() string { return scopes[s].name }

// Member is what a member may do in this scope, word for word as
// docs/operations.md's table of scopes says (a test holds the two).
func (s Scope) Member() string { return scopes[s].member }

// Action is one thing a principal or a seat may do. Its Rule says who may.
type Action int

// Actions.
const (
	actionUnset Action = iota
	// Probe is what anyone may: health, readiness, the API document, the
	// console's files.
	Probe
	ReadRoster
	ReadSeat
	WriteDiary
	SendMail
	OpenTicket
	Spawn
	DelegateRemote
	Ask
	AnswerTicket
	CancelTicket
	ReadTicket
	SpeakA2A
	ReadConversation
	ReadApprovals
	DecideApproval
	CallTool
	ReadFleet
	SteerFleet
	AdministerFleet
	// ConnectMCP carries an MCP session (/mcp): each tool call or resource
	// read in it is a route's own action (api/mcp.go).
	ConnectMCP
	// ReplayTurn re-runs a recorded turn of the seat with a changed setting:
	// it spends the eval budget and shows the seat's transcript, so it
	// needs the right to operate and to read the seat.
	ReplayTurn
	// ReadEvals reads eval datasets and runs: they show turns of any seat.
	ReadEvals
	// RunEvals creates and deletes datasets and starts eval runs, which
	// spend the eval budget, and runs the policy what-if, which shows any
	// seat's recorded tool calls.
	RunEvals
)

// Rule is one row of the table.
type Rule struct {
	// Name is the action in docs/operations.md's words.
	Name string
	// Right and Scope are what a token needs for the action through the
	// API; a seat-only action's right is Nobody.
	Right Right
	Scope Scope
	// Tool is the seat tool that takes the action, empty when none does,
	// and ToolMay what that tool may do in it.
	Tool, ToolMay string
	// HeldBy are the keys of the seat's role (roles.NAME. left out) that
	// hold the tool to the action, beyond those holding every tool call
	// (CallTool's).
	HeldBy []string
	// Message says a call of the tool reaches another seat, so it counts
	// toward the turn's roles.NAME.max_messages_per_turn.
	Message bool
	// seat is the role's check of a seat's tool taking the action; nil
	// when the role's may does not govern it.
	seat func(org *config.Config, r Request) error
}

// Request is a seat's tool taking an action: the seat, what it aims at (a
// seat's handle, the role spawn:ROLE names, a tool's name), and, for a
// ticket, the chain of seats that delegated it so far.
type Request struct {
	Seat, Target string
	Chain        []string
}

// everyCall are the keys that hold every tool call: the ToolCall activity
// asks CallTool's check and the turn's caps before any call.
var everyCall = []string{"may.tools", "max_tool_calls_per_turn"}

// keyMessages holds the tools that reach another seat.
const keyMessages = "max_messages_per_turn"

// table is the one authority table, in the order docs/operations.md lists
// it.
var table = [...]Rule{
	Probe:      {Name: "probe", Right: Public},
	ReadRoster: {Name: "list the seats", Right: Read, Scope: ScopeRoster},
	ReadSeat: {Name: "read a seat", Right: Read, Scope: ScopeSeat,
		Tool: "recall", ToolMay: "read its own diary and episodes"},
	WriteDiary: {Name: "write a diary", Right: Nobody,
		Tool: "diary_write", ToolMay: "write its own diary"},
	SendMail: {Name: "send mail", Right: Operate, Scope: ScopeSender,
		Tool: "send_message", ToolMay: "send, as itself, to a seat `may.message` names, never to itself",
		HeldBy: []string{"may.message"}, Message: true,
		seat: func(org *config.Config, r Request) error { return org.MayMessage(r.Seat, r.Target) }},
	OpenTicket: {Name: "open a ticket", Right: Operate, Scope: ScopeSender,
		Tool: "delegate", ToolMay: "open a ticket, as itself, to an agent seat `may.delegate` names or to `role:R` (its least busy seat `may.delegate` names and the chain does not hold); never to a seat already on the ticket's chain, nor past `tickets.max_hops`",
		HeldBy: []string{"may.delegate"}, Message: true,
		seat: func(org *config.Config, r Request) error { return org.MayDelegate(r.Seat, r.Target, r.Chain) }},
	Spawn: {Name: "spawn a seat", Right: Operate, Scope: ScopeFleet,
		Tool: "delegate", ToolMay: "open a ticket to `spawn:R`, a seat spawned from R's pool, when `may.spawn` names R",
		HeldBy: []string{"may.spawn"}, Message: true,
		seat: func(org *config.Config, r Request) error { return org.MaySpawn(r.Seat, r.Target) }},
	DelegateRemote: {Name: "delegate to a remote agent", Right: Nobody,
		Tool: "delegate", ToolMay: "open a ticket to `a2a:NAME`, a remote A2A agent of `agents`, when `may.delegate` names `a2a:NAME` itself (`*` does not)",
		HeldBy: []string{"may.delegate"}, Message: true,
		seat: func(org *config.Config, r Request) error { return org.MayDelegateRemote(r.Seat, r.Target) }},
	Ask: {Name: "ask on a ticket", Right: Nobody,
		Tool: "ask", ToolMay: "ask a question on the ticket its turn serves, and on no other"},
	AnswerTicket: {Name: "answer a ticket", Right: Operate, Scope: ScopeTicket,
		Tool: "answer", ToolMay: "answer a question on a ticket it delegated, and on no other"},
	CancelTicket: {Name: "cancel a ticket", Right: Operate, Scope: ScopeTicket},
	ReadTicket: {Name: "read tickets", Right: Read, Scope: ScopeTicket,
		Tool: "tickets", ToolMay: "list its own open tickets, both ways"},
	// The JSON-RPC endpoint takes several actions; the door lets in a
	// token that may read tickets, and each method then needs its REST
	// twin's action: SendMessage opening a ticket OpenTicket's, answering
	// one AnswerTicket's, CancelTask CancelTicket's.
	SpeakA2A:         {Name: "speak A2A (each method then as its REST twin)", Right: Read, Scope: ScopeTicket},
	ReadConversation: {Name: "read a conversation", Right: Read, Scope: ScopeConversation},
	ReadApprovals:    {Name: "read approvals", Right: Read, Scope: ScopeApproval},
	DecideApproval:   {Name: "decide an approval", Right: Read, Scope: ScopeApproval},
	CallTool: {Name: "call a tool", Right: Nobody,
		Tool: "MCP `SERVER__TOOL`", ToolMay: "call its role's MCP servers' tools; every tool call, first-party or MCP, is first this action",
		HeldBy: []string{"approvals"},
		seat:   func(org *config.Config, r Request) error { return org.MayCall(r.Seat, r.Target) }},
	ReadFleet:       {Name: "read the fleet", Right: Read, Scope: ScopeFleet},
	SteerFleet:      {Name: "steer the fleet", Right: Operate, Scope: ScopeFleet},
	AdministerFleet: {Name: "administer", Right: Administer, Scope: ScopeFleet},
	ConnectMCP:      {Name: "connect over MCP", Right: Read, Scope: ScopeRoster},
	ReplayTurn:      {Name: "replay a turn", Right: Operate, Scope: ScopeSeat},
	ReadEvals:       {Name: "read evals", Right: Read, Scope: ScopeFleet},
	RunEvals:        {Name: "run evals", Right: Operate, Scope: ScopeFleet},
}

// Actions are every action of the table, in its order.
func Actions() []Action {
	out := make([]Action, 0, len(table)-1)
	for a := Probe; int(a) < len(table); a++ {
		out = append(out, a)
	}
	return out
}

// Of is the action's rule.
func Of(a Action) Rule { return table[a] }

// Check says whether a seat's tool may take action a as r asks: nil, or
// an EFORBIDDEN error, worded for the model, saying what the seat's role
// may and who can widen it. An action the role's may does not govern is
// nil.
func Check(org *config.Config, a Action, r Request) error {
	if check := table[a].seat; check != nil {
		return check(org, r)
	}
	return nil
}

// ToolHeldBy are the keys of a seat's role that hold the action's tool to
// it, those holding every call first.
func (r Rule) ToolHeldBy() []string {
	keys := append(append([]string{}, everyCall...), r.HeldBy...)
	if r.Message {
		keys = append(keys, keyMessages)
	}
	return keys
}

// MessageTools are the tools whose calls count toward a turn's
// roles.NAME.max_messages_per_turn: those that reach another seat.
func MessageTools() []string {
	var out []string
	for _, r := range table {
		if r.Message && !slices.Contains(out, r.Tool) {
			out = append(out, r.Tool)
		}
	}
	return out
}

// Actor is who answers or cancels a ticket: a token's principal (its
// name, role and the seat it is bound to), or a seat through its tools
// (its audit name, seat:HANDLE, and the seat).
type Actor struct {
	Name, Role, Seat string
}

// TicketActor is who answers or cancels ticket t (verb says which) for a,
// through the API or a seat's answer tool alike: its delegator (the seat
// that opened it, or the principal that opened it), or an admin, whose
// override says so; anyone else is refused. Who is the actor's seat when
// it has one.
func TicketActor(a Actor, t crewlet.Ticket, verb string) (who string, override bool, err error) {
	who = a.Name
	if a.Seat != "" {
		who = a.Seat
	}
	switch {
	case a.Seat != "" && a.Seat == t.From, t.OpenedBy != "" && t.OpenedBy == a.Name:
		return who, false, nil
	case a.Role == config.RoleAdmin:
		return who, true, nil
	}
	return "", false, crewlet.Errorf(crewlet.EFORBIDDEN, "%s may not %s ticket %s: only its delegator (%s) may, or an admin", a.Name, verb, t.ID, t.From)
}
