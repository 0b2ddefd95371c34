package replay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// candidate is org with an approval rule on ledger__write, or with a
// may.tools that drops it.
func candidate(role string) string {
	return strings.Replace(org, "roles:\n  clerk: { charter: keeps the ledger, profile: tooled, max_rounds: 4 }",
		"roles:\n  clerk: { charter: keeps the ledger, profile: tooled, max_rounds: 4"+role+" }\n  finance: { charter: pays, profile: tooled }", 1) +
		"  - { handle: olga, kind: human, role: finance }\n"
}

// A recorded call that ran ungated is flagged gated by a candidate org
// with a new approval rule naming it, and refused by one whose may.tools
// drops it; neither calls a model nor writes.
func TestPolicyWhatIfFlagsTheRecordedCallANewRuleWouldGate(t *testing.T) {
	b := setup(t, org)
	turn := b.record(t, "record invoice 7")
	ctx := context.Background()
	if _, err := b.store.CreateDataset(ctx, wire.Dataset{Name: "ledger", CreatedBy: "tester", Turns: []string{turn.TurnID}}); err != nil {
		t.Fatal(err)
	}
	before := b.counts(t)

	gating := candidate(", approvals: [ { tools: [ 'ledger__*' ], approvers: [ olga ], timeout: 2h } ]")
	r, err := WhatIfPolicy(ctx, b.store, PolicyRequest{Org: gating, Dataset: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Turns) != 1 || len(r.Turns[0].Calls) != 1 {
		t.Fatalf("report %+v; want the one recorded call", r)
	}
	c := r.Turns[0].Calls[0]
	if c.Now != Gated || c.Policy == nil || c.Policy.Approvers[0] != "olga" || c.Policy.Timeout != "2h0m0s" || c.WasGated || c.Name != "ledger__write" ||
		c.Key != crewlet.ThreadKey(turn.Mail[0].EventID)+":1:0" || c.Result != "written: invoice 7" {
		t.Fatalf("call %+v (policy %+v); want ledger__write newly gated by olga's 2h policy", c, c.Policy)
	}
	if r.Totals != (PolicyTotals{Calls: 1, Gated: 1, NewlyGated: 1}) {
		t.Errorf("totals %+v; want one call newly gated", r.Totals)
	}

	refusing := candidate(", may: { tools: [ recall ] }")
	r, err = WhatIfPolicy(ctx, b.store, PolicyRequest{Org: refusing, Turns: []string{turn.TurnID}})
	if err != nil {
		t.Fatal(err)
	}
	c = r.Turns[0].Calls[0]
	if c.Now != Refused || !strings.Contains(c.Reason, "ledger__write refused: ") || !strings.Contains(c.Reason, "may.tools") || c.WasRefused {
		t.Fatalf("call %+v; want refused for may.tools", c)
	}
	if r.Totals != (PolicyTotals{Calls: 1, Refused: 1, NewlyRefused: 1}) {
		t.Errorf("totals %+v; want one call newly refused", r.Totals)
	}

	r, err = WhatIfPolicy(ctx, b.store, PolicyRequest{Org: org, Turns: []string{turn.TurnID}})
	if err != nil || r.Turns[0].Calls[0].Now != Allowed || r.Totals != (PolicyTotals{Calls: 1}) {
		t.Fatalf("the recorded org: %+v, %v; want the call allowed, nothing changed", r, err)
	}
	after := b.counts(t)
	for table, n := range before {
		if after[table] != n {
			t.Errorf("%s has %d rows after the what-if, %d before", table, after[table], n)
		}
	}
}

// A bad candidate org names its problem; an unknown dataset is not found.
func TestPolicyWhatIfRefusesABadOrgAndAnUnknownDataset(t *testing.T) {
	b := setup(t, org)
	ctx := context.Background()
	_, err := WhatIfPolicy(ctx, b.store, PolicyRequest{Org: candidate(", approvals: [ { tools: [ 'ledger__*' ], approvers: [ nobody ] } ]"), Dataset: "ledger"})
	if crewlet.ErrorCode(err) != crewlet.EINVALID || !strings.Contains(crewlet.ErrorMessage(err), "roles.clerk.approvals[0].approvers") {
		t.Fatalf("bad org: %v; want EINVALID naming roles.clerk.approvals[0].approvers", err)
	}
	_, err = WhatIfPolicy(ctx, b.store, PolicyRequest{Org: org, Dataset: "nosuch"})
	if crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("unknown dataset: %v; want ENOTFOUND", err)
	}
	_, err = WhatIfPolicy(ctx, b.store, PolicyRequest{Org: org})
	if crewlet.ErrorCode(err) != crewlet.EINVALID {
		t.Fatalf("no turns: %v; want EINVALID", err)
	}
}

// A call gated when it ran shows its recorded decision, and the org without
// the rule counts it no longer gated; one with the rule, gated as before.
func TestPolicyWhatIfCountsACallNoLongerGated(t *testing.T) {
	b := setup(t, org)
	ctx := context.Background()
	turn := b.record(t, "record invoice 7")
	args := json.RawMessage(`{"text":"invoice 7"}`)
	a, _, err := b.store.CreateApproval(ctx, crewlet.Approval{ID: "ap-1", Handle: "s01", TurnID: turn.TurnID, CallKey: crewlet.ThreadKey(turn.Mail[0].EventID) + ":1:0",
		Tool: "ledger__write", Args: string(args), ArgsHash: approvals.ArgsHash(args), Role: "clerk", Policy: "p",
		Approvers: []string{"olga"}, OnTimeout: "deny", Until: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.DecideApproval(ctx, a.ID, store.Decision{Status: crewlet.ApprovalApproved, By: "olga", Reason: "checked"}); err != nil {
		t.Fatal(err)
	}
	r, err := WhatIfPolicy(ctx, b.store, PolicyRequest{Org: org, Turns: []string{turn.TurnID}})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Turns[0].Calls[0]; c.Now != Allowed || !c.WasGated || c.Decision != "approved by olga: checked" || r.Totals != (PolicyTotals{Calls: 1, NoLongerGated: 1}) {
		t.Fatalf("call %+v, totals %+v; want it allowed now, gated and approved when it ran, no longer gated", c, r.Totals)
	}
	r, err = WhatIfPolicy(ctx, b.store, PolicyRequest{Org: candidate(", approvals: [ { tools: [ 'ledger__*' ], approvers: [ olga ] } ]"), Turns: []string{turn.TurnID}})
	if err != nil || r.Totals != (PolicyTotals{Calls: 1, Gated: 1}) {
		t.Fatalf("totals %+v, %v; want the call gated as it was", r.Totals, err)
	}
}

// send_message and delegate are held to whom the role may reach, after
// may.tools and the approval policies, as a turn holds them.
func TestPolicyWhatIfHoldsMessagesAndDelegationsToTheirTarget(t *testing.T) {
	c, err := config.Parse([]byte(candidate(", may: { message: [ olga ], delegate: [ s02 ], spawn: [] }") + "  - { handle: s02, role: clerk }\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, args, want string
	}{
		{"send_message", `{"to":"olga","text":"hi"}`, Allowed},
		{"send_message", `{"to":"s02","text":"hi"}`, Refused},
		{"delegate", `{"to":"s02","task":"t"}`, Allowed},
		{"delegate", `{"to":"role:clerk","task":"t"}`, Allowed},
		{"delegate", `{"to":"spawn:clerk","task":"t"}`, Refused},
		{"delegate", `{"to":"role:ghost","task":"t"}`, Refused},
		{"delegate", `{"to":"a2a:review","task":"t"}`, Refused},
		{"ledger__write", `{"to":"nobody"}`, Allowed},
	} {
		pc := PolicyCall{Name: tc.name, Args: json.RawMessage(tc.args)}
		hold(c, "s01", &pc)
		if pc.Now != tc.want || (tc.want == Refused) != strings.HasPrefix(pc.Reason, tc.name+" refused: ") {
			t.Errorf("%s %s: %s (%q); want %s", tc.name, tc.args, pc.Now, pc.Reason, tc.want)
		}
	}
}
