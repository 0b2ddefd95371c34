package crewlet

import "time"

// Message types carried in a mailbox entry.
const (
	// MessageChat asks the seat for an answer.
	MessageChat = "chat"
	// MessageReply answers a message the seat sent. A reply is recorded in the
	// transcript but never answered with another reply, so two agent seats
	// cannot ping-pong forever.
	MessageReply = "reply"
)

// AcceptedWork reports whether mail of type msgType carries work crewlet
// already accepted (a seat's reply, a ticket's notice or question): such
// mail is never refused by the mailbox quotas, because refusing it would
// drop an answer someone is owed. New work (chat, a ticket's request) is
// refused when its sender or recipient is over quota.
func AcceptedWork(msgType string) bool {
	switch msgType {
	case MessageReply, MessageTicketNotice, MessageTicketQuestion:
		return true
	}
	return false
}

// ExternalSender is the sender recorded for mail that does not come from a seat
// (a person using the API or CLI without naming their seat).
const ExternalSender = "operator"

// Message is one mailbox entry: a trigger for a turn.
type Message struct {
	EventID      string `json:"event_id"`
	StreamID     string `json:"stream_id,omitempty"`
	Type         string `json:"type"`
	From         string `json:"from"`
	To           string `json:"to"`
	Conversation string `json:"conversation"`
	InReplyTo    string `json:"in_reply_to,omitempty"`
	// ChatID is the message's identity on the chat system it came from, when
	// one carried it; the completion ledger records it beside the event id, so
	// the same chat message delivered twice is answered once.
	ChatID string `json:"chat_id,omitempty"`
	// Ticket is the delegation a ticket request or notice is about.
	Ticket string    `json:"ticket,omitempty"`
	Body   string    `json:"body"`
	SentAt time.Time `json:"sent_at"`
	// Trace is the W3C traceparent of the span that published the entry,
	// when tracing is on: the turn that answers it joins that trace.
	Trace string `json:"trace,omitempty"`
	// Deliveries is how many times the mailbox handed this entry out,
	// including the current one; set on read.
	Deliveries int64 `json:"deliveries,omitempty"`
}

// MailRef points at a mailbox entry without carrying its body, so workflow
// history stays small.
type MailRef struct {
	StreamID string `json:"stream_id"`
	EventID  string `json:"event_id"`
	// Trace is the entry's Message.Trace.
	Trace string `json:"trace,omitempty"`
}

// Backlog is what waits in one seat's mailbox: entries not yet acked (unread,
// or read by a turn that has not finished) and when the oldest was published;
// zero Oldest when none waits.
type Backlog struct {
	Waiting int64
	Oldest  time.Time
}

// LedgerKeys are the identities the completion ledger records a trigger
// under: its event id, and its chat id when it has one. A trigger is finished
// if either is recorded.
func LedgerKeys(m Message) []string {
	keys := []string{m.EventID}
	if m.ChatID != "" {
		keys = append(keys, "chat:"+m.ChatID)
	}
	return keys
}
