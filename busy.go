package crewlet

import "fmt"

// What a seat does with a new trigger that arrives while a turn of it runs:
// its role's on_busy (docs/architecture.md, "Busy policy").
const (
	// OnBusyEnqueue keeps the trigger for the next turn (the default).
	OnBusyEnqueue = "enqueue"
	// OnBusyReject answers it at once that the seat is busy; it is
	// recorded as handled and not run.
	OnBusyReject = "reject"
	// OnBusyInterrupt stops the running turn at its next round boundary
	// when the trigger is in a conversation the turn is answering; the next
	// turn carries on from the interrupted exchange with the new trigger.
	OnBusyInterrupt = "interrupt"
)

// OnBusyPolicies are the valid values of a role's on_busy.
var OnBusyPolicies = []string{OnBusyEnqueue, OnBusyReject, OnBusyInterrupt}

// MaxInterrupts is how many times in a row one batch of triggers may be
// interrupted: the turn after that runs to its end, and mail that arrives
// meanwhile waits for the next turn, so a sender who keeps writing cannot
// keep a seat from ever answering.
const MaxInterrupts = 3

// BusyText is the answer a seat whose role rejects mail while busy sends to
// a trigger that arrived during a turn.
func BusyText(handle, turnID string) string {
	return fmt.Sprintf("%s is busy with another turn (%s) and did not take this message; send it again once that turn has finished.", handle, turnID)
}

// BusyMailInput hands a seat's busy policy the mail read while a turn ran.
type BusyMailInput struct {
	Tenure
	// TurnID and WorkKey name the running turn.
	TurnID  string    `json:"turn_id"`
	WorkKey string    `json:"work_key"`
	Mail    []MailRef `json:"mail"`
	// MayInterrupt is false once the running batch was interrupted
	// MaxInterrupts times: the policy then keeps what it would interrupt.
	MayInterrupt bool `json:"may_interrupt"`
}

// BusyMailOutput splits the mail read while a turn ran: Done was answered
// busy and recorded in the completion ledger (or had been already) and may
// be acked; Interrupt asks the running turn to stop; Keep waits for the next
// turn. Policy is the role's on_busy as it was read.
type BusyMailOutput struct {
	Policy    string    `json:"policy"`
	Done      []MailRef `json:"done,omitempty"`
	Interrupt []MailRef `json:"interrupt,omitempty"`
	Keep      []MailRef `json:"keep,omitempty"`
}

// InterruptTurnRequest asks a running turn to stop at its next round
// boundary because new mail arrived in a conversation it answers; the
// payload of SignalInterruptTurn.
type InterruptTurnRequest struct {
	Mail []MailRef `json:"mail"`
}

// InterruptTurnInput records a turn's interruption: the new mail joins the
// thread it interrupted, so the next turn reads the exchange so far and the
// new mail together.
type InterruptTurnInput struct {
	Tenure
	TurnID  string `json:"turn_id"`
	WorkKey string `json:"work_key"`
	// Thread is the thread the turn was in when it stopped; Rounds the
	// model calls it made.
	Thread int       `json:"thread"`
	Rounds int       `json:"rounds"`
	Mail   []MailRef `json:"mail"`
}

// maxInterruptMail bounds the refs of one interrupt_turn signal: at most
// one mailbox read's worth, which mailbox.read_batch bounds far below it.
const maxInterruptMail = 256

// Validate checks an interrupt_turn payload: one to maxInterruptMail mail
// refs, each naming its entry by ids of the door's charset.
func (r InterruptTurnRequest) Validate() error {
	if len(r.Mail) == 0 {
		return Errorf(EINVALID, "mail: empty")
	}
	if len(r.Mail) > maxInterruptMail {
		return Errorf(EINVALID, "mail: %d refs, more than %d", len(r.Mail), maxInterruptMail)
	}
	for _, m := range r.Mail {
		if m.StreamID == "" || m.EventID == "" {
			return Errorf(EINVALID, "mail: a ref without its stream or event id")
		}
		if err := firstErr(checkSignalID("mail.stream_id", m.StreamID, MaxIDBytes), checkSignalID("mail.event_id", m.EventID, MaxIDBytes)); err != nil {
			return err
		}
	}
	return nil
}
