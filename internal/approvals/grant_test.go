package approvals

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
)

// Attack: an approver (or a stolen approver token) remembers a gated call
// for years, and the seat calls it unasked long after anyone looked. A
// grant holds MaxGrant at most; a longer one is refused and the approval
// stays pending.
func TestARememberedGrantCannotOutlastAWeek(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	org, err := config.Parse([]byte(`company: { name: acme }
seats:
  - { handle: s01, role: clerk }
  - { handle: olga, kind: human, role: finance }
profiles: { p: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: p }, finance: { charter: works as finance, profile: p } }
`))
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	a, _, err := st.CreateApproval(ctx, crewlet.Approval{ID: "ap-1", Handle: "s01", TurnID: "turn-1", CallKey: "k:0:0", Tool: "ledger__write",
		Args: `{}`, ArgsHash: "h", Role: "clerk", Policy: "p", Approvers: []string{"olga"}, OnTimeout: "deny", Until: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{Org: config.NewLive(config.Revision{Number: 1, Org: org}, nil), Store: st}
	olga := Decider{Name: "olga-token", Role: config.RoleViewer, Seat: "olga"}
	_, err = s.Decide(ctx, a.ID, olga, true, "", &Remember{Until: time.Now().Add(MaxGrant + time.Hour)})
	if crewlet.ErrorCode(err) != crewlet.EINVALID || !strings.Contains(err.Error(), "a grant holds at most") {
		t.Fatalf("remember for a week and an hour: %v; want refused naming the maximum", err)
	}
	if got, err := st.Approval(ctx, a.ID); err != nil || got.Status != crewlet.ApprovalPending {
		t.Fatalf("approval after the refusal: %+v, %v; want still pending", got, err)
	}
}
