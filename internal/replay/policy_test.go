package replay

import (
	"context"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
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
