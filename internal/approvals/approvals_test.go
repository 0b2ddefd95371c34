package approvals

import (
	"encoding/json"
	"testing"

	"github.com/crewlet/crewlet/internal/config"
)

// Who may decide: a token bound to a named seat, or to a seat of a named
// role, or of a named token role or above (a member never so: it is not
// ranked with them); an admin always; nobody else.
func TestMay(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte(`company: { name: acme }
seats:
  - { handle: s01, role: clerk }
  - { handle: olga, kind: human, role: finance }
  - { handle: pia, kind: human }
profiles: { p: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: p }, finance: { charter: works as finance, profile: p } }
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		approvers []string
		who       Decider
		may       bool
	}{
		{[]string{"olga"}, Decider{Name: "t", Role: "viewer", Seat: "olga"}, true},
		{[]string{"olga"}, Decider{Name: "t", Role: "operator", Seat: "pia"}, false},
		{[]string{"olga"}, Decider{Name: "t", Role: "operator"}, false},
		{[]string{"role:finance"}, Decider{Name: "t", Role: "viewer", Seat: "olga"}, true},
		{[]string{"role:finance"}, Decider{Name: "t", Role: "viewer", Seat: "pia"}, false},
		{[]string{"role:finance"}, Decider{Name: "t", Role: "operator"}, false},
		{[]string{"operator"}, Decider{Name: "t", Role: "operator"}, true},
		{[]string{"viewer"}, Decider{Name: "t", Role: "operator"}, true},
		{[]string{"operator"}, Decider{Name: "t", Role: "viewer", Seat: "olga"}, false},
		{[]string{"olga"}, Decider{Name: "root", Role: "admin"}, true},
		{[]string{"olga"}, Decider{Name: "m", Role: "member", Seat: "olga"}, true},
		{[]string{"role:finance"}, Decider{Name: "m", Role: "member", Seat: "olga"}, true},
		{[]string{"viewer"}, Decider{Name: "m", Role: "member", Seat: "olga"}, false},
		{[]string{"pia"}, Decider{Name: "m", Role: "member", Seat: "olga"}, false},
	} {
		if got := May(org, tt.approvers, tt.who); got != tt.may {
			t.Errorf("May(%v, %+v) = %v; want %v", tt.approvers, tt.who, got, tt.may)
		}
	}
}

// The same arguments hash the same however they are spaced or ordered;
// other arguments, and another call or policy, make another approval.
func TestArgsHashAndApprovalID(t *testing.T) {
	t.Parallel()
	a := ArgsHash(json.RawMessage(`{"text": "invoice 7", "n": 1}`))
	if b := ArgsHash(json.RawMessage(`{"n":1,"text":"invoice 7"}`)); a != b {
		t.Errorf("hashes of the same arguments differ: %s %s", a, b)
	}
	if b := ArgsHash(json.RawMessage(`{"n":1,"text":"invoice 8"}`)); a == b {
		t.Error("hashes of other arguments are equal")
	}
	id := ApprovalID("s01", "turn/s01/k", "t:1:0", a, "p1")
	if !IsApprovalID(id) || id != ApprovalID("s01", "turn/s01/k", "t:1:0", a, "p1") {
		t.Errorf("approval id %q is not stable or not an approval id", id)
	}
	for _, other := range []string{
		ApprovalID("s01", "turn/s01/k", "t:1:1", a, "p1"),
		ApprovalID("s01", "turn/s01/k", "t:1:0", "other", "p1"),
		ApprovalID("s01", "turn/s01/k", "t:1:0", a, "p2"),
	} {
		if other == id {
			t.Errorf("another call, arguments or policy has the same approval id %s", id)
		}
	}
}
