package crewlet

import (
	"strings"
	"testing"
)

// A nudge reaches a seat's nudge_turn update from any process that can
// signal it: its validator is the whole check before the seat acts on it.
func TestTurnNudgeValidate(t *testing.T) {
	const turn = "turn/cto/0123456789abcdef"
	for _, tc := range []struct {
		name  string
		nudge TurnNudge
		want  string // "" when valid, else a part of the error
	}{
		{"a ticket", TurnNudge{Turn: turn, Ticket: "t-1"}, ""},
		{"an approval", TurnNudge{Turn: turn, Approval: "a-1"}, ""},
		{"a profile freed", TurnNudge{Turn: turn, ProfileFree: true}, ""},
		{"no turn", TurnNudge{Ticket: "t-1"}, "not a turn id"},
		{"no work key", TurnNudge{Turn: "turn/cto", Ticket: "t-1"}, "not a turn id"},
		{"a handle that is no name", TurnNudge{Turn: "turn/C T O/k", Ticket: "t-1"}, "not a turn id"},
		{"a work key with a slash", TurnNudge{Turn: "turn/cto/a/b", Ticket: "t-1"}, "not a turn id"},
		{"a turn id that is not UTF-8", TurnNudge{Turn: "turn/cto/\xff", Ticket: "t-1"}, "not a turn id"},
		{"a turn id past the bound", TurnNudge{Turn: "turn/cto/" + strings.Repeat("k", maxTurnIDBytes), Ticket: "t-1"}, "more than 256"},
		{"nothing changed", TurnNudge{Turn: turn}, "names 0"},
		{"two things changed", TurnNudge{Turn: turn, Ticket: "t-1", ProfileFree: true}, "names 2"},
		{"all three", TurnNudge{Turn: turn, Ticket: "t-1", Approval: "a-1", ProfileFree: true}, "names 3"},
		{"a ticket id past the bound", TurnNudge{Turn: turn, Ticket: strings.Repeat("t", MaxIDBytes+1)}, "ticket"},
		{"an approval id with a control byte", TurnNudge{Turn: turn, Approval: "a-\x00"}, "approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.nudge.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate(%+v) = %v; want it valid", tc.nudge, err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate(%+v) = nil; want an error about %q", tc.nudge, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Validate(%+v) = %v; want it to say %q", tc.nudge, err, tc.want)
			case err != nil && ErrorCode(err) != EINVALID:
				t.Fatalf("Validate(%+v) = %v (%s); want EINVALID", tc.nudge, err, ErrorCode(err))
			}
		})
	}
}
