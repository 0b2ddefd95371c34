package crewlet

import (
	"fmt"
	"strings"
	"time"
)

// TicketPhase is where a delegation stands
// (docs/architecture.md, "Delegation: tickets").
type TicketPhase string

// A ticket is pending until the turn serving it settles it (done), it fails
// with its reason, a person cancels it, or it outlives tickets.expire_after
// (expired). asking is pending with a question waiting on the delegator; it
// returns to pending when the question is answered or lapses, the one move
// back a phase may make.
const (
	TicketPending   TicketPhase = "pending"
	TicketAsking    TicketPhase = "asking"
	TicketDone      TicketPhase = "done"
	TicketFailed    TicketPhase = "failed"
	TicketCancelled TicketPhase = "cancelled"
	TicketExpired   TicketPhase = "expired"
)

// TicketPhases lists every phase, in the order a ticket can go through them.
var TicketPhases = []TicketPhase{TicketPending, TicketAsking, TicketDone, TicketFailed, TicketCancelled, TicketExpired}

// Open reports whether the ticket can still be settled.
func (p TicketPhase) Open() bool { return p == TicketPending || p == TicketAsking }

// Valid reports whether p is a phase.
func (p TicketPhase) Valid() bool {
	for _, q := range TicketPhases {
		if p == q {
			return true
		}
	}
	return false
}

// Message types of delegation. A ticket request and a ticket notice both
// start a turn; a plain reply never does.
const (
	// MessageTicket asks the recipient to do the ticket's task; the final
	// answer of the turn serving it settles the ticket.
	MessageTicket = "ticket"
	// MessageTicketNotice tells a delegator a ticket it opened settled or
	// failed.
	MessageTicketNotice = "ticket_reply"
	// MessageTicketQuestion tells a delegator the seat serving its ticket
	// asks a question; it answers with the answer tool (or POST
	// /tickets/{id}/answer).
	MessageTicketQuestion = "ticket_question"
)

// TicketSender is the sender of a ticket notice. It is no seat, so the
// answer of the turn a notice starts is recorded in the conversation, not
// mailed: the seat acts on the notice with its tools.
const TicketSender = "tickets"

// RolePrefix marks a ticket target that names a role ("role:engineer"): the
// ticket goes to the seat of that role with the fewest open tickets.
const RolePrefix = "role:"

// Ticket is one delegation.
type Ticket struct {
	ID string `json:"id"`
	// From is the seat or person that opened it; FromSeat says whether it
	// is an agent seat (told by a turn) or a person (told in an inbox).
	From     string `json:"from"`
	FromSeat bool   `json:"from_seat"`
	// To is the seat that serves it; RoutedFrom the role it was routed by.
	To         string `json:"to"`
	RoutedFrom string `json:"routed_from,omitempty"`
	// Hops counts the delegations that led to it, itself included; Chain
	// names their delegators in order, its own last (1 and [From] for a
	// ticket opened by a person, or by a turn that serves no ticket).
	Hops  int      `json:"hops"`
	Chain []string `json:"chain"`
	// Parent is the ticket the delegating turn served when it opened this
	// one; empty for a person's ticket or a turn that served none. Its cost
	// rolls up into Parent's.
	Parent       string      `json:"parent,omitempty"`
	Task         string      `json:"task"`
	Conversation string      `json:"conversation"`
	Phase        TicketPhase `json:"phase"`
	Question     string      `json:"question,omitempty"`
	AskedAt      *time.Time  `json:"asked_at,omitempty"`
	Answer       string      `json:"answer,omitempty"`
	Reply        string      `json:"reply,omitempty"`
	Reason       string      `json:"reason,omitempty"`
	// OpenedBy is the API principal that opened it (empty when a seat
	// delegated it); AnsweredBy who answered its question: the delegator,
	// or an admin answering for it.
	OpenedBy   string `json:"opened_by,omitempty"`
	AnsweredBy string `json:"answered_by,omitempty"`
	// RequestEvent is the event id of the request in the target's mailbox.
	RequestEvent string `json:"request_event"`
	// RemoteTask and RemoteContext are the remote agent's task and context
	// serving a ticket to a2a:NAME, once its task was sent.
	RemoteTask    string `json:"remote_task,omitempty"`
	RemoteContext string `json:"remote_context,omitempty"`
	// Waiter is the delegator's turn waiting for the ticket to settle or
	// ask; AskWaiter the serving turn waiting for an answer; AskKey the
	// call that asked.
	Waiter    string     `json:"waiter,omitempty"`
	AskWaiter string     `json:"ask_waiter,omitempty"`
	AskKey    string     `json:"-"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	SettledAt *time.Time `json:"settled_at,omitempty"`
}

// TicketLink is one ticket of a delegation chain, as GET /tickets/{id}
// shows it: its place under the ticket asked about (depth 0), what the
// thread serving it cost (Own), and that with every ticket under it
// (Total). Remote marks a ticket to a remote A2A agent, whose model calls
// are not crewlet's to count: its own cost is 0.
type TicketLink struct {
	Ticket string      `json:"ticket"`
	Parent string      `json:"parent,omitempty"`
	To     string      `json:"to"`
	Depth  int         `json:"depth"`
	Phase  TicketPhase `json:"phase"`
	Remote bool        `json:"remote,omitempty"`
	Own    Cost        `json:"own"`
	Total  Cost        `json:"total"`
}

// TicketRequestEventID is the event id of a ticket's request: one per ticket,
// so publishing it again adds nothing.
func TicketRequestEventID(ticketID string) string { return "ticket-" + ticketID }

// TicketNoticeEventID is the event id of the notice telling the delegator a
// ticket ended: one per ticket, since it ends once.
func TicketNoticeEventID(ticketID string) string { return "ticket-notice-" + ticketID }

// TicketRequestText is how a ticket's request reads to the seat serving it.
func TicketRequestText(t Ticket) string {
	return fmt.Sprintf("Task from %s (ticket %s, conversation %s):\n\n%s\n\n"+
		"Your final answer in this turn is the ticket's reply, sent to %s: make it the result.",
		t.From, t.ID, t.Conversation, t.Task, t.From)
}

// TicketNoticeText is how a delegator hears that its ticket ended.
func TicketNoticeText(t Ticket) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Ticket %s to %s is %s", t.ID, t.To, t.Phase)
	switch t.Phase {
	case TicketDone:
		fmt.Fprintf(&b, ". Reply:\n\n%s", t.Reply)
	default:
		if t.Reason != "" {
			fmt.Fprintf(&b, ": %s", t.Reason)
		}
	}
	fmt.Fprintf(&b, "\n\nThe task was: %s", t.Task)
	return b.String()
}

// TicketQuestionText is how a delegator hears the question on its ticket.
func TicketQuestionText(t Ticket) string {
	return fmt.Sprintf("Ticket %s to %s: %s asks:\n\n%s\n\nAnswer with answer(ticket: %q, text: ...); %s waits for it.\n\nThe task was: %s",
		t.ID, t.To, t.To, t.Question, t.ID, t.To, t.Task)
}

// PersonNotesWorkflowID is the id of a person's notes workflow.
func PersonNotesWorkflowID(person string) string { return "notes/" + person }

// TicketNoteInput writes one note to a person about the tickets that
// changed.
type TicketNoteInput struct {
	Person  string   `json:"person"`
	Tickets []string `json:"tickets"`
}
