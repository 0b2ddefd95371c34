// Package approvals owns the gate on tool calls that a role's approval
// policies name: it asks for a decision, remembers grants, takes the
// decisions people make and says who may make them
// (docs/operations.md, "Approvals").
package approvals

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
)

// Service gates tool calls and takes decisions.
type Service struct {
	Org   config.Source
	Store *store.Store
	// Seats signals a waiting turn of a decision and notes approvers.
	Seats *seatclient.Client
	Log   *slog.Logger
	// Now is the clock approvals are timed on; time.Now when nil.
	Now func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Call is one tool call the gate is asked about, by the tenure that would
// run it.
type Call struct {
	crewlet.Tenure
	TurnID string
	// CallKey is {thread}:{round}:{call}, the call's idempotency key.
	CallKey string
	// Conversation is the one the call was made in, for the people who
	// decide to read.
	Conversation string
	// Ticket is the ticket the turn serves, if it serves one.
	Ticket string
	Tool   string
	Args   json.RawMessage
}

// Verdict is what the gate says of a call. With neither Wait nor Denied
// set the call runs.
type Verdict struct {
	// Wait is the approval the call waits on.
	Wait *crewlet.ApprovalWait
	// Denied is the tool result of a denied call: it does not run.
	Denied string
	// By names what let the call run: the approval, or the grant's
	// approver; "" when no policy gates it.
	By string
	// Approval is the approval the verdict comes from; its ID is "" when
	// no policy gates the call or a grant covers it.
	Approval crewlet.Approval
}

// Gate decides whether a call runs now. A call no policy gates runs; one a
// remembered grant covers runs; otherwise its approval (made now, or found
// from an earlier ask of the same call, arguments and policy, and adopted
// by this tenure) says whether it waits, runs or is denied.
func (s *Service) Gate(ctx context.Context, c Call) (Verdict, error) {
	org := s.Org.Now()
	policy, role, ok := org.ApprovalFor(c.Handle, c.Tool, c.Args)
	if !ok {
		return Verdict{}, nil
	}
	digest, argsHash, now := policy.Digest(role), ArgsHash(c.Args), s.now()
	by, err := s.Store.Granted(ctx, c.Handle, c.Tool, argsHash, digest, now)
	switch {
	case err != nil:
		return Verdict{}, err
	case by != "":
		return Verdict{By: "grant of " + by}, nil
	}
	a, created, err := s.Store.CreateApproval(ctx, crewlet.Approval{
		ID: ApprovalID(c.Handle, c.TurnID, c.CallKey, argsHash, digest), Handle: c.Handle, TurnID: c.TurnID,
		CallKey: c.CallKey, Conversation: c.Conversation, Ticket: c.Ticket, Tool: c.Tool, Args: string(c.Args), ArgsHash: argsHash, Role: role, Policy: digest,
		Approvers: policy.Approvers, OnTimeout: policy.TimeoutDecision(), Epoch: c.Epoch, Until: now.Add(policy.Wait()),
	})
	if err != nil {
		return Verdict{}, err
	}
	if created {
		s.Log.InfoContext(ctx, "approval_requested", "seat", c.Handle, "approval", a.ID, "tool", c.Tool, "until", a.Until)
		s.note(ctx, org, a)
	}
	if a.Epoch < c.Epoch {
		// The seat's next tenure re-runs the same call: it takes the
		// approval over, pending or decided.
		if a, err = s.Store.AdoptApproval(ctx, a.ID, c.Epoch); err != nil {
			return Verdict{}, err
		}
		s.Log.InfoContext(ctx, "approval_adopted", "seat", c.Handle, "approval", a.ID, "epoch", c.Epoch, "status", a.Status)
	}
	if a.Epoch != c.Epoch {
		return Verdict{}, crewlet.Errorf(crewlet.EFENCED, "approval %s belongs to epoch %d of %s, not %d", a.ID, a.Epoch, c.Handle, c.Epoch)
	}
	if a.Status == crewlet.ApprovalPending && !now.Before(a.Until) {
		if a, err = s.timedOut(ctx, a); err != nil {
			return Verdict{}, err
		}
	}
	switch a.Status {
	case crewlet.ApprovalPending:
		return Verdict{Wait: &crewlet.ApprovalWait{ID: a.ID, Tool: a.Tool, Until: a.Until}, Approval: a}, nil
	case crewlet.ApprovalApproved:
		return Verdict{By: a.ID, Approval: a}, nil
	case crewlet.ApprovalDenied:
		return Verdict{Denied: a.DeniedText(), Approval: a}, nil
	}
	return Verdict{}, fmt.Errorf("approval %s is %s, which no call waits on", a.ID, a.Status)
}

// Resolve decides an approval its waiting turn gave up on: its time ran out
// (the policy's on_timeout applies) or a person stopped the turn (denied).
// An approval decided meanwhile keeps its decision.
func (s *Service) Resolve(ctx context.Context, in crewlet.EndApprovalInput) error {
	a, err := s.Store.Approval(ctx, in.Approval)
	if err != nil || a.Status != crewlet.ApprovalPending {
		return err
	}
	switch {
	case in.StoppedBy != "":
		_, _, err = s.Store.DecideApproval(ctx, a.ID, store.Decision{Status: crewlet.ApprovalDenied, By: in.StoppedBy, Reason: "the turn was stopped while the call waited for approval"})
	case in.TimedOut:
		_, err = s.timedOut(ctx, a)
	}
	return err
}

// timedOut applies a pending approval's on_timeout.
func (s *Service) timedOut(ctx context.Context, a crewlet.Approval) (crewlet.Approval, error) {
	status := crewlet.ApprovalDenied
	if a.OnTimeout == config.OnTimeoutApprove {
		status = crewlet.ApprovalApproved
	}
	reason := fmt.Sprintf("no decision by %s (on_timeout: %s)", a.Until.UTC().Format(time.RFC3339), a.OnTimeout)
	a, _, err := s.Store.DecideApproval(ctx, a.ID, store.Decision{Status: status, By: crewlet.ApprovalTimeout, Reason: reason})
	if err == nil {
		s.Log.InfoContext(ctx, "approval_timed_out", "seat", a.Handle, "approval", a.ID, "status", a.Status)
	}
	return a, err
}

// Decider is who decides: a token's name and role, and the human seat it
// is bound to, if any.
type Decider struct {
	Name, Role, Seat string
}

// MaxGrant is the longest an approval may be remembered: a grant lets a
// seat call a gated tool unasked, so a person looks again at least weekly.
// The console offers up to this.
const MaxGrant = 7 * 24 * time.Hour

// Remember asks an approval to be remembered: the seat may call the tool
// (with these arguments only, when Args) without asking until Until, at
// most MaxGrant ahead.
type Remember struct {
	Args  bool      `json:"args,omitempty"`
	Until time.Time `json:"until"`
}

// Decide records a person's decision on a pending approval and tells the
// waiting turn. Only a principal the policy names may decide (EFORBIDDEN),
// and only once (ECONFLICT). A turn that cannot be told (it is moving)
// finds the decision when its next run asks for the call.
func (s *Service) Decide(ctx context.Context, id string, who Decider, approve bool, reason string, remember *Remember) (crewlet.Approval, error) {
	a, err := s.Store.Approval(ctx, id)
	if err != nil {
		return a, err
	}
	if !May(s.Org.Now(), a.Approvers, who) {
		return crewlet.Approval{}, crewlet.Errorf(crewlet.EFORBIDDEN, "%s may not decide approval %s: its policy names %s (and admins)", who.Name, id, strings.Join(a.Approvers, ", "))
	}
	d := store.Decision{Status: crewlet.ApprovalDenied, By: who.Name, Reason: reason}
	if who.Seat != "" {
		d.By = who.Seat
	}
	if approve {
		d.Status = crewlet.ApprovalApproved
	}
	if remember != nil {
		switch {
		case !approve:
			return crewlet.Approval{}, crewlet.Errorf(crewlet.EINVALID, "remember goes with approve only; a denial is never remembered")
		case !remember.Until.After(s.now()):
			return crewlet.Approval{}, crewlet.Errorf(crewlet.EINVALID, "remember.until %s is not in the future; say until when the grant holds", remember.Until.Format(time.RFC3339))
		case remember.Until.After(s.now().Add(MaxGrant)):
			return crewlet.Approval{}, crewlet.Errorf(crewlet.EINVALID, "remember.until %s is more than %s ahead; a grant holds at most that long, so approve again when it lapses", remember.Until.Format(time.RFC3339), MaxGrant)
		}
		until := remember.Until.UTC()
		d.RememberUntil, d.RememberArgs = &until, remember.Args
	}
	a, decided, err := s.Store.DecideApproval(ctx, id, d)
	if err != nil {
		return a, err
	}
	if !decided {
		return a, crewlet.Errorf(crewlet.ECONFLICT, "approval %s is %s already (by %s); a decision stands once made", id, a.Status, a.DecidedBy)
	}
	s.Log.InfoContext(ctx, "approval_decided", "seat", a.Handle, "approval", a.ID, "status", a.Status, "by", a.DecidedBy)
	if err := s.Seats.ApprovalDecided(ctx, a.TurnID, a.ID); err != nil {
		// The decision is on the row: the turn's next run finds it.
		s.Log.InfoContext(ctx, "approval_signal_lost", "approval", a.ID, "turn", a.TurnID, "gone", seatclient.Gone(err), "error", err)
	}
	return a, nil
}

// tokenRoles ranks the company-wide token roles: a role includes the ones
// before it, as the API's rights do. A member is not among them: a policy
// names it by its seat or role:R.
var tokenRoles = []string{config.RoleViewer, config.RoleOperator, config.RoleAdmin}

// May reports whether who may decide an approval whose policy names
// approvers: a token bound to a named seat, or to a seat of a named
// role:R, or whose role is a named token role or above it. An admin token
// always may: an admin could rewrite the policy anyway, and the audit log
// records who decided.
func May(org *config.Config, approvers []string, who Decider) bool {
	rank := slices.Index(tokenRoles, who.Role)
	if who.Role == config.RoleAdmin {
		return true
	}
	seat, bound := org.Seat(who.Seat)
	for _, a := range approvers {
		if role, ok := strings.CutPrefix(a, config.ApprovalRolePrefix); ok {
			if bound && seat.Role == role {
				return true
			}
			continue
		}
		if i := slices.Index(tokenRoles, a); i >= 0 {
			if rank >= i {
				return true
			}
			continue
		}
		if who.Seat != "" && a == who.Seat {
			return true
		}
	}
	return false
}

// note tells each person the approvers name, directly or by role, that the
// approval waits for them: through their ticket notes, so what comes
// together makes one inbox note. An approver that is only a token role has
// no inbox. A note that cannot be sent is logged: the approval stands and
// GET /approvals lists it.
func (s *Service) note(ctx context.Context, org *config.Config, a crewlet.Approval) {
	for _, person := range org.ApproverSeats(a.Approvers) {
		if err := s.Seats.NotePerson(ctx, person, a.ID); err != nil {
			s.Log.WarnContext(ctx, "approval_note_unsent", "approval", a.ID, "person", person, "error", err)
		}
	}
}

// NoteLine is one approval in a person's note, as it stands.
func NoteLine(a crewlet.Approval) string {
	if a.Status == crewlet.ApprovalPending {
		return fmt.Sprintf("%s: %s asks to call %s with %s, until %s (`crewlet approvals approve %s` or `crewlet approvals deny %s --reason TEXT`)",
			a.ID, a.Handle, a.Tool, a.Args, a.Until.UTC().Format(time.RFC3339), a.ID, a.ID)
	}
	return fmt.Sprintf("%s: %s's call of %s was %s by %s", a.ID, a.Handle, a.Tool, a.Status, a.DecidedBy)
}

// IsApprovalID reports whether a note's id names an approval, not a ticket.
func IsApprovalID(id string) bool { return strings.HasPrefix(id, approvalPrefix) }

const approvalPrefix = "ap-"

// ApprovalID is the id of the approval of one call under one set of
// arguments and one policy: asking again for the same finds the same row.
func ApprovalID(handle, turnID, callKey, argsHash, policy string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{handle, turnID, callKey, argsHash, policy}, "\x00")))
	return approvalPrefix + hex.EncodeToString(sum[:6])
}

// ArgsHash is the hash of a call's arguments, their JSON with object keys
// sorted and no space, so the same arguments hash the same however the
// model spaced them.
func ArgsHash(args json.RawMessage) string {
	doc := []byte(args)
	var v any
	if json.Unmarshal(args, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			doc = b
		}
	}
	doc = bytes.TrimSpace(doc)
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:12])
}
