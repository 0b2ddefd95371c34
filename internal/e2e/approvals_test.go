package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
	"github.com/crewlet/crewlet/internal/wire"
)

// Tokens of the approvals org: olga's is a viewer bound to her seat, the
// one person its policies name; ops is an operator they do not name.
const (
	approvalAdminToken = "e2e-approvals-admin-0123456789"
	approvalOlgaToken  = "e2e-approvals-olga-0123456789"
	approvalOpsToken   = "e2e-approvals-ops-0123456789"
)

// approvalsOrg is toolsOrg with approval policies on the ledger's write:
// "invoice" writes wait up to an hour for olga and are denied then; "quick"
// writes wait 2s and are approved then.
func approvalsOrg(t testing.TB, countFile, pidFile string) string {
	t.Helper()
	bin := toolstest.BuildT(t)
	path := filepath.Join(t.TempDir(), "org.yaml")
	err := os.WriteFile(path, []byte(fmt.Sprintf(`company: { name: apprco }
auth:
  tokens:
    - { name: ann, role: admin, token_env: CREWLET_E2E_TOKEN_ADMIN }
    - { name: olga-token, role: viewer, seat: olga, token_env: CREWLET_E2E_TOKEN_OLGA }
    - { name: ops, role: operator, token_env: CREWLET_E2E_TOKEN_OPS }
profiles:
  tooled:
    provider: scripted
    rules:
      - match: '^record (.*)'
        tools: [ { name: ledger__write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'recorded: {{index .Results 0}}'
roles:
  clerk:
    charter: keeps the ledger
    profile: tooled
    mcp:
      - { name: ledger, command: [ %q ], env: [ "TESTSERVER_COUNT_FILE=%s", "TESTSERVER_PID_FILE=%s" ] }
    sandbox: { write: [ %q, %q ] }
    approvals:
      - { tools: [ 'ledger__w*' ], when: { text: 'invoice *' }, approvers: [ olga ], timeout: 1h, on_timeout: deny }
      - { tools: [ 'ledger__write' ], when: { text: 'quick *' }, approvers: [ 'role:finance' ], timeout: 2s, on_timeout: approve }
  finance: { charter: pays, profile: tooled }
seats:
  - { handle: s01, role: clerk }
  - { handle: olga, kind: human, role: finance }
`, bin, countFile, pidFile, filepath.Dir(countFile), filepath.Dir(pidFile))), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// newApprovalsCompany starts the approvals org's API; the test starts
// the workers it needs.
func newApprovalsCompany(t testing.TB) (c *company, countFile string) {
	dir := t.TempDir()
	countFile = filepath.Join(dir, "count")
	c = newCompany(t, approvalsOrg(t, countFile, filepath.Join(dir, "pid")))
	c.setenv("CREWLET_E2E_TOKEN_ADMIN="+approvalAdminToken, "CREWLET_E2E_TOKEN_OLGA="+approvalOlgaToken, "CREWLET_E2E_TOKEN_OPS="+approvalOpsToken)
	c.token = approvalAdminToken
	c.apiServer()
	return c, countFile
}

// as makes one API call with another token.
func (c *company) as(token, method, path string, body, out any) error {
	saved := c.token
	c.token = token
	defer func() { c.token = saved }()
	return c.call(method, path, body, out)
}

// pendingApproval waits for the seat's pending approval for text and
// returns it.
func (c *company) pendingApproval(handle, text string) crewlet.Approval {
	c.t.Helper()
	var found crewlet.Approval
	testenv.Eventually(c.t, 30*time.Second, "a pending approval for "+text, func() error {
		var list []crewlet.Approval
		if err := c.call(http.MethodGet, "/approvals?seat="+handle, nil, &list); err != nil {
			return err
		}
		for _, a := range list {
			if strings.Contains(a.Args, text) {
				found = a
				return nil
			}
		}
		return fmt.Errorf("none among %d pending", len(list))
	})
	return found
}

// decide approves or denies an approval as olga.
func (c *company) decide(id, verb string, body wire.ApprovalDecision) crewlet.Approval {
	c.t.Helper()
	var a crewlet.Approval
	if err := c.as(approvalOlgaToken, http.MethodPost, "/approvals/"+id+"/"+verb, body, &a); err != nil {
		c.t.Fatalf("%s %s as olga: %v", verb, id, err)
	}
	return a
}

// An approval-gated MCP write waits; the seat's node is killed with -9
// while it waits; the seat fails over, its re-run turn adopts the same
// approval and waits again; a principal the policy does not name is
// refused; olga approves; the write runs exactly once, with its
// idempotency key, and the decision is on the turn and in the audit log.
// Then a second write is approved just as its seat's node is killed: the
// decision made during the move is not lost.
func TestApprovalSurvivesTheSeatsNodeDying(t *testing.T) {
	c, countFile := newApprovalsCompany(t)
	nodes := map[string]*proc{"n1": c.worker("n1"), "n2": c.worker("n2")}
	c.waitAttached(60 * time.Second)

	msg := c.send("s01", "record invoice 42", from("olga"))
	asked := c.pendingApproval("s01", "invoice 42")
	var detail api.SeatDetail
	testenv.Eventually(t, 30*time.Second, "the turn waiting on the approval", func() error {
		if err := c.call(http.MethodGet, "/seats/s01", nil, &detail); err != nil {
			return err
		}
		if st := detail.State; st == nil || st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Approval == nil {
			return fmt.Errorf("not waiting yet")
		}
		return nil
	})
	if w := detail.State.Turn.Progress.Approval; w.Approval != asked.ID || w.Tool != "ledger__write" || len(detail.Approvals) != 1 || detail.Approvals[0].ID != asked.ID {
		t.Fatalf("GET /seats/s01: waiting %+v, approvals %+v; want %s", w, detail.Approvals, asked.ID)
	}
	t.Logf("request: %s asks %s %s (approvers %v, until %s, epoch %d)", asked.Handle, asked.Tool, asked.Args, asked.Approvers, asked.Until.Format(time.RFC3339), asked.Epoch)
	// The turn runs in its seat's workflow: the seat's current details say
	// which turn runs and what it waits on.
	turnID := crewlet.TurnWorkflowID("s01", crewlet.WorkKey([]string{msg.EventID}))
	details := currentDetails(t, c, crewlet.SeatWorkflowID("s01"))
	t.Logf("wait: GET /seats/s01 state.turn.progress.approval = %+v; Temporal current details: %q", *detail.State.Turn.Progress.Approval, details)
	if !strings.HasPrefix(details, "turn "+turnID+": ") || !strings.Contains(details, "; waiting on approval "+asked.ID+" for ledger__write until ") {
		t.Fatalf("Temporal current details %q; want the turn and its approval wait", details)
	}
	if n := len(toolstest.Writes(t, countFile)); n != 0 {
		t.Fatalf("%d writes before the decision; want none", n)
	}

	victim := c.nodeOf("s01")
	nodes[victim].kill(t)
	t.Logf("killed %s while s01 waited on %s (epoch %d)", victim, asked.ID, asked.Epoch)
	var adopted crewlet.Approval
	testenv.Eventually(t, 90*time.Second, "the next tenure adopting the approval", func() error {
		var list []crewlet.Approval
		if err := c.call(http.MethodGet, "/approvals?seat=s01&status=all", nil, &list); err != nil {
			return err
		}
		if len(list) != 1 || list[0].ID != asked.ID || list[0].Epoch <= asked.Epoch || list[0].Status != crewlet.ApprovalPending {
			return fmt.Errorf("approvals %+v", list)
		}
		adopted = list[0]
		return nil
	})
	if got := c.nodeOf("s01"); got == victim {
		t.Fatalf("s01 still on %s", got)
	}

	status, body, err := c.rawAs(approvalOpsToken, http.MethodPost, "/approvals/"+asked.ID+"/approve", wire.ApprovalDecision{})
	if err != nil || status != http.StatusForbidden {
		t.Fatalf("ops approving: %d %s %v; want 403", status, body, err)
	}
	t.Logf("failover: s01 now on %s, approval %s adopted at epoch %d, still %s; ops (not named) approving: %d %s", c.nodeOf("s01"), adopted.ID, adopted.Epoch, adopted.Status, status, strings.TrimSpace(string(body)))
	decided := c.decide(asked.ID, "approve", wire.ApprovalDecision{Reason: "checked the invoice"})
	t.Logf("approved %s after the failover: epoch %d → %d, by %s", decided.ID, asked.Epoch, adopted.Epoch, decided.DecidedBy)
	if reply := c.waitReply(msg, 60*time.Second); reply != "recorded: written: invoice 42" {
		t.Fatalf("reply %q; want the write's result", reply)
	}
	writes := toolstest.Writes(t, countFile)
	if len(writes) != 1 {
		t.Fatalf("the write ran %d times (%v); want once", len(writes), writes)
	}
	if want := crewlet.ThreadKey(msg.EventID) + ":1:0"; writes[0].Key != want {
		t.Errorf("idempotency key %q; want %s", writes[0].Key, want)
	}
	t.Logf("result: reply %q; the server counted %d write, key %s", "recorded: written: invoice 42", len(writes), writes[0].Key)
	var view wire.TurnView
	if err := c.call(http.MethodGet, "/turns/s01/"+crewlet.WorkKey([]string{msg.EventID}), nil, &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Approvals) != 1 || view.Approvals[0].Status != crewlet.ApprovalApproved || view.Approvals[0].DecidedBy != "olga" {
		t.Fatalf("turn view approvals %+v; want the approval, approved by olga", view.Approvals)
	}
	audit, err := c.store().Audit(context.Background(), store.AuditFilter{Action: "POST /approvals/{id}/approve", Limit: 10})
	if err != nil || len(audit) != 2 {
		t.Fatalf("audit of the approvals: %+v, %v; want ops denied and olga allowed", audit, err)
	}
	if audit[0].Principal != "olga-token" || audit[0].Outcome != wire.AuditAllowed || audit[1].Principal != "ops" || audit[1].Outcome != wire.AuditDenied {
		t.Fatalf("audit rows %+v; want olga-token allowed after ops denied", audit)
	}

	// A decision given while the seat moves is not lost: the next
	// tenure's re-run finds it on the row and runs the call once.
	nodes["n3"] = c.worker("n3")
	during := c.send("s01", "record invoice 43", from("olga"))
	waiting := c.pendingApproval("s01", "invoice 43")
	victim = c.nodeOf("s01")
	nodes[victim].kill(t)
	during1 := c.decide(waiting.ID, "approve", wire.ApprovalDecision{Reason: "approved while it moved"})
	t.Logf("killed %s while s01 waited on %s and approved it at once (row at epoch %d when decided)", victim, waiting.ID, during1.Epoch)
	if reply := c.waitReply(during, 90*time.Second); reply != "recorded: written: invoice 43" {
		t.Fatalf("reply %q; want the write approved during the move done", reply)
	}
	if writes := toolstest.Writes(t, countFile); len(writes) != 2 || writes[1].Key != crewlet.ThreadKey(during.EventID)+":1:0" {
		t.Fatalf("writes %v; want the second one once, with its key", writes)
	}
}

// Decisions, on one node: a denial's reason reaches the model as the tool's
// result; a call approved under a policy that changed meanwhile asks again;
// an approval remembered for these arguments skips the next wait
// for the same arguments and asks again when they change; one remembered
// for any arguments skips the wait for others; a call nobody decides gets
// its policy's on_timeout; and olga's inbox gets one note of what waits.
func TestApprovalDecisions(t *testing.T) {
	c, countFile := newApprovalsCompany(t)
	c.worker("n1")
	c.waitAttached(60 * time.Second)

	deny := c.send("s01", "record invoice 7", from("olga"))
	denied := c.pendingApproval("s01", "invoice 7")
	if out, err := c.cli("approvals", "ls", "--token", approvalOlgaToken); err != nil || !strings.Contains(out, denied.ID) {
		t.Fatalf("crewlet approvals ls: %v\n%s", err, out)
	}
	out, err := c.cli("approvals", "deny", denied.ID, "--reason", "wrong customer", "--token", approvalOlgaToken)
	if err != nil || !strings.Contains(out, "denied by olga") {
		t.Fatalf("crewlet approvals deny: %v\n%s", err, out)
	}
	t.Logf("crewlet approvals deny %s --reason 'wrong customer': %s", denied.ID, out)
	if reply := c.waitReply(deny, 30*time.Second); reply != "recorded: denied by olga: wrong customer" {
		t.Fatalf("reply to the denied call %q; want the denial as its result", reply)
	}
	if n := len(toolstest.Writes(t, countFile)); n != 0 {
		t.Fatalf("%d writes after a denial; want none", n)
	}
	// The seat's live stream told of the wait and of the decision, once
	// each, in that order.
	var told []string
	for _, ev := range c.openStream("/seats/s01/stream", "0-0").until(30*time.Second, "the denial's approval_decided", func(ev events.Event) bool {
		return ev.Kind == events.ApprovalDecided && ev.Data.Approval == denied.ID
	}) {
		if ev.Data.Approval == denied.ID {
			told = append(told, ev.Kind+" "+ev.Data.Decision+" "+ev.Data.By+" "+ev.Data.Reason)
		}
	}
	if want := []string{"approval_waiting   ", "approval_decided denied olga wrong customer"}; !slices.Equal(told, want) {
		t.Fatalf("the stream told of approval %s: %q; want %q", denied.ID, told, want)
	}

	// The policy changes while a call waits: approved under the old one,
	// the call asks again under the new one before it runs.
	moved := c.send("s01", "record invoice 11", from("olga"))
	old := c.pendingApproval("s01", "invoice 11")
	c.applyOrg(strings.Replace(c.orgDocument(), "timeout: 1h, on_timeout: deny", "timeout: 2h, on_timeout: deny", 1))
	c.decide(old.ID, "approve", wire.ApprovalDecision{Reason: "under the old policy"})
	again := c.pendingApproval("s01", "invoice 11")
	if again.ID == old.ID || again.Policy == old.Policy {
		t.Fatalf("after the policy changed: approval %s (policy %s); want a new one, not %s (policy %s)", again.ID, again.Policy, old.ID, old.Policy)
	}
	if n := len(toolstest.Writes(t, countFile)); n != 0 {
		t.Fatalf("%d writes on an approval made under a changed policy; want none", n)
	}
	c.decide(again.ID, "approve", wire.ApprovalDecision{})
	if reply := c.waitReply(moved, 30*time.Second); reply != "recorded: written: invoice 11" {
		t.Fatalf("reply %q; want the write done once approved under the new policy", reply)
	}

	until := time.Now().Add(time.Hour)
	first := c.send("s01", "record invoice 8", from("olga"))
	eighth := c.pendingApproval("s01", "invoice 8")
	// A grant holds a week at most: a longer one is refused, and the
	// approval stays pending for a decision that keeps to it.
	forever := wire.ApprovalDecision{Remember: &wire.ApprovalRemember{Args: true, Until: time.Now().Add(approvals.MaxGrant + time.Hour)}}
	if status, body, err := c.rawAs(approvalOlgaToken, http.MethodPost, "/approvals/"+eighth.ID+"/approve", forever); err != nil || status != http.StatusBadRequest || !strings.Contains(string(body), "a grant holds at most") {
		t.Fatalf("approve and remember for 7 days and an hour: %d %s %v; want 400 naming the maximum", status, body, err)
	}
	c.decide(eighth.ID, "approve", wire.ApprovalDecision{Remember: &wire.ApprovalRemember{Args: true, Until: until}})
	c.waitReply(first, 30*time.Second)
	same := c.send("s01", "record invoice 8", from("olga"))
	if reply := c.waitReply(same, 30*time.Second); reply != "recorded: written: invoice 8" {
		t.Fatalf("the same arguments again: reply %q; want the write done without asking", reply)
	}
	changed := c.send("s01", "record invoice 9", from("olga"))
	c.decide(c.pendingApproval("s01", "invoice 9").ID, "approve", wire.ApprovalDecision{Remember: &wire.ApprovalRemember{Until: until}})
	c.waitReply(changed, 30*time.Second)
	anyArgs := c.send("s01", "record invoice 10", from("olga"))
	if reply := c.waitReply(anyArgs, 30*time.Second); reply != "recorded: written: invoice 10" {
		t.Fatalf("after approve-and-remember for any arguments: reply %q; want the write done", reply)
	}

	quick := c.send("s01", "record quick 1", from("olga"))
	if reply := c.waitReply(quick, 30*time.Second); reply != "recorded: written: quick 1" {
		t.Fatalf("on_timeout approve: reply %q; want the write done", reply)
	}
	var all []crewlet.Approval
	if err := c.call(http.MethodGet, "/approvals?seat=s01&status=all", nil, &all); err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 || !strings.Contains(all[0].Args, "quick 1") || all[0].DecidedBy != crewlet.ApprovalTimeout || all[0].Status != crewlet.ApprovalApproved {
		t.Fatalf("approvals %+v; want 6 asked (7, 11 twice, 8, 9, quick 1), quick 1 approved by timeout", all)
	}
	if got := len(toolstest.Writes(t, countFile)); got != 6 {
		t.Fatalf("%d writes; want 6 (11, 8 twice, 9, 10, quick 1)", got)
	}
	var notes []crewlet.Message
	testenv.Eventually(t, 30*time.Second, "olga's approval notes", func() error {
		if err := c.call(http.MethodGet, "/seats/olga/inbox?limit=50", nil, &notes); err != nil {
			return err
		}
		for _, n := range notes {
			if strings.Contains(n.Body, "asked for your approval") {
				return nil
			}
		}
		return fmt.Errorf("%d inbox entries, no approval note", len(notes))
	})
	for _, n := range notes {
		if strings.Contains(n.Body, "approval") {
			t.Logf("olga's note: %s", n.Body)
		}
	}
}

// currentDetails is what the Temporal UI shows of a workflow's current
// details.
func currentDetails(t *testing.T, c *company, workflowID string) string {
	t.Helper()
	v, err := c.temporal.QueryWorkflow(context.Background(), workflowID, "", "__temporal_workflow_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var meta sdkpb.WorkflowMetadata
	if err := v.Get(&meta); err != nil {
		t.Fatal(err)
	}
	return meta.GetCurrentDetails()
}

// rawAs is raw with another token.
func (c *company) rawAs(token, method, path string, body any) (int, []byte, error) {
	saved := c.token
	c.token = token
	defer func() { c.token = saved }()
	return c.raw(method, path, body)
}

// orgDocument is the org file the company started with.
func (c *company) orgDocument() string {
	c.t.Helper()
	b, err := os.ReadFile(c.config)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

// applyOrg applies doc as the next config revision and waits until every
// process runs it.
func (c *company) applyOrg(doc string) {
	c.t.Helper()
	var report wire.ConfigReport
	if err := c.call(http.MethodPost, "/config", wire.ConfigApplyRequest{Document: doc}, &report); err != nil {
		c.t.Fatalf("apply: %v", err)
	}
	testenv.Eventually(c.t, 30*time.Second, "every process on the applied revision", func() error {
		var state wire.ConfigState
		if err := c.call(http.MethodGet, "/config", nil, &state); err != nil {
			return err
		}
		if len(state.Processes) == 0 {
			return fmt.Errorf("no processes listed")
		}
		for _, p := range state.Processes {
			if p.Revision != report.Revision {
				return fmt.Errorf("a process runs revision %d, not %d", p.Revision, report.Revision)
			}
		}
		return nil
	})
}
