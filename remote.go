package crewlet

import "strings"

// remoteTicketPrefix begins the workflow id of a ticket to a remote agent.
const remoteTicketPrefix = "remote-ticket/"

// RemoteTicketWorkflowID is the id of the RemoteTicket workflow serving a
// ticket to a remote A2A agent: one per ticket, so opening it again
// starts nothing more.
func RemoteTicketWorkflowID(ticketID string) string { return remoteTicketPrefix + ticketID }

// IsRemoteTicketWorkflowID reports whether id is a RemoteTicket
// workflow's: a ticket's ask waiter that is no turn.
func IsRemoteTicketWorkflowID(id string) bool { return strings.HasPrefix(id, remoteTicketPrefix) }

// RemoteTicketInput starts RemoteTicket, or continues it as new with what
// it learnt so far.
type RemoteTicketInput struct {
	Ticket string `json:"ticket"`
	// Task and Context are the remote task once the ticket's task was
	// sent; empty before.
	Task    string `json:"task,omitempty"`
	Context string `json:"context,omitempty"`
	// Sent counts the messages sent on the remote task (the task, then
	// each answer); Asked the remote's questions put to the delegator.
	Sent  int `json:"sent,omitempty"`
	Asked int `json:"asked,omitempty"`
	// Answered is the last question answered (RemoteState.Question): a
	// remote still showing it has not taken the answer yet.
	Answered string `json:"answered,omitempty"`
}

// RemoteSendInput sends message Seq on the ticket's remote task: the
// ticket's task (Seq 0, a new task), or the delegator's answer on Task.
// Each message's id is made from the ticket and Seq, so a send retried is
// the same message to the remote.
type RemoteSendInput struct {
	Ticket  string `json:"ticket"`
	Seq     int    `json:"seq"`
	Task    string `json:"task,omitempty"`
	Context string `json:"context,omitempty"`
	Answer  string `json:"answer,omitempty"`
}

// RemoteAwaitInput waits, bounded, for the ticket's remote task to end or
// ask: over the remote's stream when Stream and its card offers one, else
// by one GetTask.
type RemoteAwaitInput struct {
	Ticket string `json:"ticket"`
	Task   string `json:"task"`
	Stream bool   `json:"stream,omitempty"`
	// Answered is the question last answered: the task showing it still
	// has not moved.
	Answered string `json:"answered,omitempty"`
}

// RemoteState is where a ticket's remote task stands.
type RemoteState struct {
	Task    string `json:"task"`
	Context string `json:"context,omitempty"`
	// State is the remote's A2A task state.
	State string `json:"state"`
	// Text is what the remote said: its artifacts' text once completed,
	// its status message otherwise (the question, why it failed).
	Text string `json:"text,omitempty"`
	// Since is when the remote says the task took its state; with Text it
	// tells a question the remote asks again from one already answered.
	Since string `json:"since,omitempty"`
	// TicketEnded says the ticket ended on crewlet's side (cancelled,
	// expired): the remote task is cancelled and nothing more is sent.
	TicketEnded bool `json:"ticket_ended,omitempty"`
}

// RemoteAskInput puts the remote's question to the ticket's delegator,
// as call Key, with the RemoteTicket workflow as the one waiting for the
// answer; asking again with the same key asks nothing more.
type RemoteAskInput struct {
	Ticket   string `json:"ticket"`
	Key      string `json:"key"`
	Question string `json:"question"`
}

// RemoteAnswer is how the delegator's side of a question stands: still
// asking, answered (Answer), or the ticket ended.
type RemoteAnswer struct {
	Answered    bool   `json:"answered,omitempty"`
	Answer      string `json:"answer,omitempty"`
	TicketEnded bool   `json:"ticket_ended,omitempty"`
}

// RemoteEndInput ends a ticket as its remote task ended: settled with
// Text when the remote completed it, else failed with Reason.
type RemoteEndInput struct {
	Ticket    string `json:"ticket"`
	Completed bool   `json:"completed,omitempty"`
	Text      string `json:"text,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// RemoteCancelInput cancels the remote task of a ticket that ended on
// crewlet's side.
type RemoteCancelInput struct {
	Ticket string `json:"ticket"`
	Task   string `json:"task"`
}

// Question names the question a remote task in an input-required state
// asks: its text at its time.
func (s RemoteState) Question() string { return s.Text + "\n" + s.Since }

// Asks reports whether the remote task asks a question not yet answered:
// it waits for input, and not on the question answered.
func (s RemoteState) Asks(answered string) bool {
	return (s.State == RemoteInputRequired || s.State == RemoteAuthRequired) && s.Question() != answered
}

// The A2A task states in which a remote task waits for its client.
const (
	RemoteInputRequired = "TASK_STATE_INPUT_REQUIRED"
	RemoteAuthRequired  = "TASK_STATE_AUTH_REQUIRED"
)
