package store_test

import (
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
)

func approvalRow(id, argsHash, policy string, epoch int64) crewlet.Approval {
	return crewlet.Approval{
		ID: id, Handle: "s01", TurnID: "turn/s01/k", CallKey: "t:1:0", Conversation: "c-1", Tool: "ledger__write", Args: `{"text":"x"}`,
		ArgsHash: argsHash, Role: "clerk", Policy: policy, Approvers: []string{"olga"}, OnTimeout: "deny",
		Epoch: epoch, Until: time.Now().Add(time.Hour),
	}
}

// Asking again for the same approval finds the row; a new one for the same
// call supersedes the pending one; a new tenure adopts a row by raising its
// epoch, never lowering it; the first decision stands.
func TestApprovalRowLifecycle(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	a, created, err := st.CreateApproval(ctx, approvalRow("ap-1", "h1", "p1", 1))
	if err != nil || !created || a.Status != crewlet.ApprovalPending || a.Epoch != 1 || a.Conversation != "c-1" {
		t.Fatalf("CreateApproval = %+v, created %v, %v; want a new pending row at epoch 1 in conversation c-1", a, created, err)
	}
	again, created, err := st.CreateApproval(ctx, approvalRow("ap-1", "h1", "p1", 2))
	if err != nil || created || again.Epoch != 1 {
		t.Fatalf("CreateApproval again = epoch %d, created %v, %v; want the row as it stands", again.Epoch, created, err)
	}
	if a, err = st.AdoptApproval(ctx, "ap-1", 3); err != nil || a.Epoch != 3 {
		t.Fatalf("AdoptApproval(3) = epoch %d, %v; want 3", a.Epoch, err)
	}
	if a, err = st.AdoptApproval(ctx, "ap-1", 2); err != nil || a.Epoch != 3 {
		t.Fatalf("AdoptApproval(2) after 3 = epoch %d, %v; want 3 kept", a.Epoch, err)
	}
	if _, created, err := st.CreateApproval(ctx, approvalRow("ap-2", "h2", "p1", 3)); err != nil || !created {
		t.Fatalf("CreateApproval for other arguments: created %v, %v", created, err)
	}
	if old, err := st.Approval(ctx, "ap-1"); err != nil || old.Status != crewlet.ApprovalSuperseded {
		t.Fatalf("the first ask after a second one: %s, %v; want superseded", old.Status, err)
	}
	d, decided, err := st.DecideApproval(ctx, "ap-2", store.Decision{Status: crewlet.ApprovalDenied, By: "olga", Reason: "no"})
	if err != nil || !decided || d.Status != crewlet.ApprovalDenied || d.DeniedText() != "denied by olga: no" || d.DecidedAt == nil {
		t.Fatalf("DecideApproval = %+v, decided %v, %v", d, decided, err)
	}
	d, decided, err = st.DecideApproval(ctx, "ap-2", store.Decision{Status: crewlet.ApprovalApproved, By: "pia"})
	if err != nil || decided || d.Status != crewlet.ApprovalDenied || d.DecidedBy != "olga" {
		t.Fatalf("second DecideApproval = %s by %s, decided %v, %v; want the first decision kept", d.Status, d.DecidedBy, decided, err)
	}
	if _, _, err := st.DecideApproval(ctx, "ap-none", store.Decision{Status: crewlet.ApprovalDenied}); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("DecideApproval of no approval: %v; want ENOTFOUND", err)
	}
	pending, err := st.Approvals(ctx, store.ApprovalFilter{Handle: "s01", Status: crewlet.ApprovalPending})
	if err != nil || len(pending) != 0 {
		t.Fatalf("pending approvals %+v, %v; want none", pending, err)
	}
}

// An approve-and-remember grants the seat the tool under the policy until
// its time: for any arguments, or for the approved ones only.
func TestApprovalGrants(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	now := time.Now()
	until := now.Add(time.Hour)
	for _, row := range []crewlet.Approval{approvalRow("ap-args", "h1", "p1", 1), approvalRow("ap-any", "h2", "p2", 1)} {
		row.CallKey = row.ID
		if _, _, err := st.CreateApproval(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.DecideApproval(ctx, "ap-args", store.Decision{Status: crewlet.ApprovalApproved, By: "olga", RememberUntil: &until, RememberArgs: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.DecideApproval(ctx, "ap-any", store.Decision{Status: crewlet.ApprovalApproved, By: "pia", RememberUntil: &until}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args, policy string
		at           time.Time
		want         string
	}{
		{"h1", "p1", now, "olga"},
		{"h9", "p1", now, ""},
		{"h9", "p2", now, "pia"},
		{"h1", "p3", now, ""},
		{"h1", "p1", until.Add(time.Second), ""},
	} {
		by, err := st.Granted(ctx, "s01", "ledger__write", tt.args, tt.policy, tt.at)
		if err != nil || by != tt.want {
			t.Errorf("Granted(args %s, policy %s, at %s) = %q, %v; want %q", tt.args, tt.policy, tt.at.Format(time.RFC3339), by, err, tt.want)
		}
	}
}
