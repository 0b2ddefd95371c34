package replay

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/wire"
)

// What a candidate org's rules do to a recorded tool call.
const (
	Allowed = "allowed"
	// Gated: an approval policy of the seat's role names the call, so it
	// would wait for a decision.
	Gated = "gated"
	// Refused: the role's may would refuse it.
	Refused = "refused"
)

// PolicyRequest is the body of POST /evals/policy: a candidate org file's
// text and the recorded turns to hold to it, a dataset's or listed ones.
type PolicyRequest struct {
	Org     string   `json:"org"`
	Dataset string   `json:"dataset,omitempty"`
	Turns   []string `json:"turns,omitempty"`
}

// PolicyReport says, for each recorded tool call of the turns, what the
// candidate org would do to it beside what happened when it ran.
type PolicyReport struct {
	Dataset string       `json:"dataset,omitempty"`
	Turns   []PolicyTurn `json:"turns"`
	Totals  PolicyTotals `json:"totals"`
}

// PolicyTurn is one recorded turn's tool calls.
type PolicyTurn struct {
	Turn  string       `json:"turn"`
	Seat  string       `json:"seat"`
	Calls []PolicyCall `json:"calls"`
}

// PolicyCall is one recorded tool call under the candidate org.
type PolicyCall struct {
	// Key is the call's idempotency key ({work_key}:{round}:{call}).
	Key  string          `json:"key"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
	// Now is Allowed, Gated or Refused under the candidate org.
	Now string `json:"now"`
	// Policy is the approval policy that would gate it, when Gated.
	Policy *GatePolicy `json:"policy,omitempty"`
	// Reason is why it would be refused, in authority's words.
	Reason string `json:"reason,omitempty"`
	// WasGated says an approval policy gated it when it ran; Decision is
	// what was decided on it.
	WasGated bool   `json:"was_gated"`
	Decision string `json:"decision,omitempty"`
	// WasRefused says its recorded result is a refusal.
	WasRefused bool `json:"was_refused"`
	// Result is its recorded result, clipped at 4 KiB.
	Result string `json:"result"`
}

// GatePolicy is the approval policy that would gate a call.
type GatePolicy struct {
	Role      string            `json:"role"`
	Tools     []string          `json:"tools"`
	When      map[string]string `json:"when,omitempty"`
	Approvers []string          `json:"approvers"`
	Timeout   string            `json:"timeout"`
	OnTimeout string            `json:"on_timeout"`
}

// PolicyTotals count the calls and how the candidate org changes them.
type PolicyTotals struct {
	Calls           int `json:"calls"`
	Gated           int `json:"gated"`
	Refused         int `json:"refused"`
	NewlyGated      int `json:"newly_gated"`
	NewlyRefused    int `json:"newly_refused"`
	NoLongerGated   int `json:"no_longer_gated"`
	NoLongerRefused int `json:"no_longer_refused"`
}

// policyResultKeep is how much of a recorded result a report keeps.
const policyResultKeep = 4 << 10

// WhatIfPolicy holds the recorded tool calls of req's turns to the
// candidate org req.Org: which an approval policy would now gate, which
// its may would refuse. It calls no model and writes nothing.
func WhatIfPolicy(ctx context.Context, st *store.Store, req PolicyRequest) (PolicyReport, error) {
	if strings.TrimSpace(req.Org) == "" {
		return PolicyReport{}, crewlet.Errorf(crewlet.EINVALID, "org is empty: send the candidate org file's text")
	}
	org, err := config.Parse([]byte(req.Org))
	if err != nil {
		return PolicyReport{}, crewlet.Errorf(crewlet.EINVALID, "the candidate org is not valid (`crewlet config check FILE` says the same): %v", err)
	}
	turns := req.Turns
	switch {
	case req.Dataset != "" && len(turns) > 0:
		return PolicyReport{}, crewlet.Errorf(crewlet.EINVALID, "give a dataset or a list of turns, not both")
	case req.Dataset != "":
		d, err := st.Dataset(ctx, req.Dataset)
		if err != nil {
			return PolicyReport{}, err
		}
		turns = d.Turns
	case len(turns) == 0:
		return PolicyReport{}, crewlet.Errorf(crewlet.EINVALID, "say which recorded turns: a dataset (`crewlet eval dataset list` lists them) or turn ids")
	case len(turns) > wire.MaxDatasetTurns:
		return PolicyReport{}, crewlet.Errorf(crewlet.EINVALID, "%d turns; at most %d at once, or make a dataset of them", len(turns), wire.MaxDatasetTurns)
	}
	report := PolicyReport{Dataset: req.Dataset, Turns: []PolicyTurn{}}
	for _, id := range turns {
		t, err := policyTurn(ctx, st, org, id)
		if err != nil {
			return PolicyReport{}, err
		}
		for _, c := range t.Calls {
			report.Totals.add(c)
		}
		report.Turns = append(report.Turns, t)
	}
	return report, nil
}

func (t *PolicyTotals) add(c PolicyCall) {
	t.Calls++
	gated, refused := c.Now == Gated, c.Now == Refused
	switch {
	case gated && !c.WasGated:
		t.NewlyGated++
	case !gated && c.WasGated:
		t.NoLongerGated++
	}
	switch {
	case refused && !c.WasRefused:
		t.NewlyRefused++
	case !refused && c.WasRefused:
		t.NoLongerRefused++
	}
	if gated {
		t.Gated++
	}
	if refused {
		t.Refused++
	}
}

// policyTurn reads a finished turn's recorded tool calls as a replay does
// and holds each to org.
func policyTurn(ctx context.Context, st *store.Store, org *config.Config, id string) (PolicyTurn, error) {
	handle, workKey, ok := crewlet.ParseTurnID(id)
	if !ok {
		return PolicyTurn{}, crewlet.Errorf(crewlet.EINVALID, "turn id %q is not turn/{handle}/{work_key}; `crewlet seats turns HANDLE` lists them", id)
	}
	turn, err := st.Turn(ctx, handle, workKey)
	if err != nil {
		return PolicyTurn{}, err
	}
	if turn.FinishedAt == nil {
		return PolicyTurn{}, crewlet.Errorf(crewlet.ECONFLICT, "turn %s is still running; hold it to the candidate org once it finished", turn.TurnID)
	}
	gated, err := st.Approvals(ctx, store.ApprovalFilter{Handle: handle, TurnID: turn.TurnID, Limit: wire.MaxApprovals})
	if err != nil {
		return PolicyTurn{}, err
	}
	r := &run{turn: turn, decisions: map[string]string{}}
	for _, a := range gated {
		r.decisions[a.CallKey] = decision(a)
	}
	out := PolicyTurn{Turn: turn.TurnID, Seat: handle, Calls: []PolicyCall{}}
	for _, i := range turn.Threads {
		key := crewlet.ThreadKey(turn.Mail[i].EventID)
		msgs, err := st.TurnMessages(ctx, handle, key, 0)
		if err != nil {
			return PolicyTurn{}, err
		}
		rounds, _ := r.recorded(key, msgs, nil)
		for _, rd := range rounds {
			for _, c := range rd.Calls {
				pc := PolicyCall{Key: c.Recorded, Name: c.Name, Args: c.Args, WasGated: c.Approval != "", Decision: c.Approval,
					WasRefused: c.IsError && strings.Contains(c.Result, " refused: "), Result: crewlet.ClipText(c.Result, policyResultKeep)}
				hold(org, handle, &pc)
				out.Calls = append(out.Calls, pc)
			}
		}
	}
	return out, nil
}

// hold says what org would do to the call, in the order a turn asks: the
// role's may.tools, then its approval policies, then, for send_message and
// delegate, whom the role may reach.
func hold(org *config.Config, handle string, c *PolicyCall) {
	if err := authority.Check(org, authority.CallTool, authority.Request{Seat: handle, Target: c.Name}); err != nil {
		c.Now, c.Reason = Refused, c.Name+" refused: "+crewlet.ErrorMessage(err)
		return
	}
	if p, role, ok := org.ApprovalFor(handle, c.Name, c.Args); ok {
		c.Now = Gated
		c.Policy = &GatePolicy{Role: role, Tools: p.Tools, When: p.When, Approvers: p.Approvers, Timeout: p.Wait().String(), OnTimeout: p.TimeoutDecision()}
		return
	}
	if err := reach(org, handle, c.Name, c.Args); err != nil {
		c.Now, c.Reason = Refused, c.Name+" refused: "+crewlet.ErrorMessage(err)
		return
	}
	c.Now = Allowed
}

// reach checks whom a send_message or delegate call aims at against the
// role's may.message, may.delegate and may.spawn; any other call reaches
// no one.
func reach(org *config.Config, handle, name string, args json.RawMessage) error {
	if name != firstparty.SendMessage && name != firstparty.Delegate {
		return nil
	}
	var a struct {
		To string `json:"to"`
	}
	if json.Unmarshal(args, &a) != nil || a.To == "" {
		// The call was refused for its arguments when it ran, whatever
		// the org.
		return nil
	}
	if name == firstparty.SendMessage {
		return authority.Check(org, authority.SendMail, authority.Request{Seat: handle, Target: a.To})
	}
	if role, ok := strings.CutPrefix(a.To, "spawn:"); ok {
		return authority.Check(org, authority.Spawn, authority.Request{Seat: handle, Target: role})
	}
	if strings.HasPrefix(a.To, "a2a:") {
		return authority.Check(org, authority.DelegateRemote, authority.Request{Seat: handle, Target: a.To})
	}
	if role, ok := strings.CutPrefix(a.To, "role:"); ok {
		// role:R goes to one of R's agent seats the role may delegate to.
		var last error
		for _, s := range org.AgentSeats() {
			if s.Role != role {
				continue
			}
			if last = authority.Check(org, authority.OpenTicket, authority.Request{Seat: handle, Target: s.Handle}); last == nil {
				return nil
			}
		}
		if last == nil {
			return crewlet.Errorf(crewlet.EFORBIDDEN, "no agent seat has role %s; delegate to a seat or a role that has one", role)
		}
		return last
	}
	return authority.Check(org, authority.OpenTicket, authority.Request{Seat: handle, Target: a.To, Chain: []string{handle}})
}
