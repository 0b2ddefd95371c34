package crewlet

import (
	"fmt"
	"time"
)

// The states of an approval (docs/operations.md, "Approvals").
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	// ApprovalSuperseded is a pending approval the same call no longer
	// waits on: its arguments or its policy changed, and it asked again.
	ApprovalSuperseded = "superseded"
)

// ApprovalTimeout is who decided an approval whose time ran out.
const ApprovalTimeout = "timeout"

// Approval is one gated tool call's request for a decision. It is bound to
// the call (seat, turn, {thread}:{round}:{call}), the hash of its
// arguments, the digest of the policy that gated it, and the epoch of the
// tenure that may run it.
type Approval struct {
	ID      string `json:"id"`
	Handle  string `json:"handle"`
	TurnID  string `json:"turn_id"`
	CallKey string `json:"call_key"`
	// Conversation is the one the call was made in ('' for an approval
	// recorded before it was kept).
	Conversation string `json:"conversation,omitempty"`
	// Ticket is the ticket the asking turn serves, if it serves one: its
	// A2A task waits for this decision.
	Ticket string `json:"ticket,omitempty"`
	Tool   string `json:"tool"`
	// Args are the call's arguments as the model sent them.
	Args     string `json:"args"`
	ArgsHash string `json:"args_hash"`
	Role     string `json:"role"`
	Policy   string `json:"policy"`
	// Approvers are who may decide, as the policy named them.
	Approvers []string `json:"approvers"`
	OnTimeout string   `json:"on_timeout"`
	Epoch     int64    `json:"epoch"`
	Status    string   `json:"status"`
	DecidedBy string   `json:"decided_by,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	// RememberUntil, set on an approve-and-remember, is when the grant it
	// made ends; RememberArgs says it covers these arguments only.
	RememberUntil *time.Time `json:"remember_until,omitempty"`
	RememberArgs  bool       `json:"remember_args,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	Until         time.Time  `json:"until"`
	DecidedAt     *time.Time `json:"decided_at,omitempty"`
}

// DeniedText is the tool result the model receives for a denied call.
func (a Approval) DeniedText() string {
	if a.Reason == "" {
		return fmt.Sprintf("denied by %s", a.DecidedBy)
	}
	return fmt.Sprintf("denied by %s: %s", a.DecidedBy, a.Reason)
}

// ApprovalWait asks the turn to wait durably (a timer and a signal,
// nothing held open) for the decision on an approval, then to make the
// call again.
type ApprovalWait struct {
	ID    string    `json:"id"`
	Tool  string    `json:"tool"`
	Until time.Time `json:"until"`
}

// ApprovalWaiting is a turn's wait on an approval, as its state query
// tells it.
type ApprovalWaiting struct {
	Approval string    `json:"approval"`
	Tool     string    `json:"tool"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
}

// ApprovalSignal names the approval that was decided.
type ApprovalSignal struct {
	Approval string `json:"approval"`
}

// Validate checks an approval payload: it must name the approval.
func (r ApprovalSignal) Validate() error {
	if r.Approval == "" {
		return Errorf(EINVALID, "approval: empty")
	}
	return checkSignalID("approval", r.Approval, MaxIDBytes)
}

// EndApprovalInput decides an approval nobody decided: its time ran
// out (TimedOut: the policy's on_timeout applies) or a person stopped the
// turn while it waited (StoppedBy: denied).
type EndApprovalInput struct {
	Tenure
	WorkKey   string `json:"work_key"`
	Approval  string `json:"approval"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	StoppedBy string `json:"stopped_by,omitempty"`
}
