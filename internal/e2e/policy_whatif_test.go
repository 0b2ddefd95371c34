package e2e

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/replay"
)

// The policy what-if flags the recorded call a new approval rule would
// gate: a turn that wrote the ledger ungated, held to a candidate org whose
// clerk must ask an operator first, shows the write newly gated, through the
// API and `crewlet replay --policy`; nothing of the world changes, and a
// viewer may not ask.
func TestPolicyWhatIfFlagsTheRecordedCallANewApprovalRuleWouldGate(t *testing.T) {
	c, countFile, pidFile := newReplayCompany(t)
	_, turn := c.recordedTurn("record invoice 7")
	before := c.world()

	recorded, err := os.ReadFile(replayOrg(t, countFile, pidFile))
	if err != nil {
		t.Fatal(err)
	}
	candidate := strings.Replace(string(recorded), "    profile: tooled\n    mcp:",
		"    profile: tooled\n    approvals: [ { tools: [ 'ledger__write' ], approvers: [ operator ], timeout: 1h } ]\n    mcp:", 1)
	if candidate == string(recorded) {
		t.Fatal("the candidate org has no approval rule: the replay org's clerk role changed shape")
	}

	var r replay.PolicyReport
	if err := c.call(http.MethodPost, "/evals/policy", replay.PolicyRequest{Org: candidate, Turns: []string{turn.TurnID}}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Totals.Calls != 2 || r.Totals.NewlyGated != 1 || r.Totals.Gated != 1 {
		t.Fatalf("totals %+v; want 2 calls, the write newly gated", r.Totals)
	}
	for _, call := range r.Turns[0].Calls {
		want := replay.Allowed
		if call.Name == "ledger__write" {
			want = replay.Gated
		}
		if call.Now != want || call.WasGated {
			t.Errorf("%s: now %s (was gated %v); want %s, ungated when it ran", call.Name, call.Now, call.WasGated, want)
		}
	}

	out, err := c.cli("replay", "--policy", writeFile(t, "candidate.yaml", candidate), turn.TurnID, "--token", replayOperatorToken)
	if err != nil || !strings.Contains(out, "gated: roles.clerk approvals ledger__write, approvers operator, timeout 1h0m0s") ||
		!strings.Contains(out, "tool calls: 2; gated 1 (1 newly), refused 0 (0 newly)") {
		t.Fatalf("crewlet replay --policy: %v\n%s", err, out)
	}
	if status, body, _ := c.rawAs(replayViewerToken, http.MethodPost, "/evals/policy", replay.PolicyRequest{Org: candidate, Turns: []string{turn.TurnID}}); status != http.StatusForbidden {
		t.Fatalf("a viewer's what-if: %d %s; want 403", status, body)
	}
	if status, body, _ := c.rawAs(replayOperatorToken, http.MethodPost, "/evals/policy", replay.PolicyRequest{Org: "company: [", Turns: []string{turn.TurnID}}); status != http.StatusBadRequest {
		t.Fatalf("a bad candidate org: %d %s; want 400", status, body)
	}
	after := c.world()
	for k, n := range before {
		if after[k] != n {
			t.Errorf("%s: %d after the what-if, %d before; want it unchanged", k, after[k], n)
		}
	}
}
