package config

import (
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
)

const mayOrg = `company: { name: acme }
profiles: { p: { provider: scripted } }
roles:
  ceo:
    charter: works as ceo
    profile: p
    may: { message: [ cto, 'role:engineer' ], delegate: [ 'role:engineer' ], spawn: [ engineer ], tools: [ send_message, 'github__*' ] }
  engineer:
    charter: works as engineer
    profile: p
    may: { message: [ human ], delegate: [], tools: [] }
    max_tool_calls_per_turn: 3
    max_messages_per_turn: 1
  free: { charter: works as free, profile: p }
  cto: { charter: works as cto, profile: p, may: { message: [ '*' ], spawn: [ '*' ] } }
seats:
  - { handle: boss, role: ceo }
  - { handle: cto, role: cto }
  - { handle: eng-1, role: engineer }
  - { handle: eng-2, role: engineer }
  - { handle: any, role: free }
  - { handle: alice, kind: human }
  - { handle: bob, kind: human, role: engineer }
`

// Every may problem is named with its key, the value and what is accepted:
// an unknown seat or role, a role: naming no role, a spawn of an unknown
// role, a bad tool glob, caps and tickets.max_hops out of range, and a seat
// named like the word for any human seat.
func TestMayProblems(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`company: { name: acme }
profiles: { p: { provider: scripted } }
tickets: { max_hops: 33 }
roles:
  ceo:
    charter: works as ceo
    profile: p
    may: { message: [ nobdy, 'role:ghost', '*', human, alice, human ], delegate: [ 'role:', eng ], spawn: [ enginer, '*' ], tools: [ 'github__[', '' ] }
    max_tool_calls_per_turn: -1
    max_messages_per_turn: 1001
  engineer: { charter: works as engineer, profile: p, may: { sing: [ x ] } }
seats:
  - { handle: nobody, role: ceo }
  - { handle: eng-1, role: engineer }
  - { handle: human, kind: human }
  - { handle: alice, kind: human }
`))
	if err == nil {
		t.Fatal("Parse accepted bad may lists")
	}
	for _, want := range []string{
		`tickets.max_hops: 33 is out of range; must be between 1 and 32`,
		`roles.ceo.may.message[0]: unknown seat "nobdy"; name a seat (alice, eng-1, human, nobody), role:R, human or *; did you mean "nobody"?`,
		`roles.ceo.may.message[1]: unknown role "ghost" in "role:ghost"; known roles: ceo, engineer`,
		`roles.ceo.may.message[3]: "human" is both a seat and the word for any human seat; rename the seat`,
		`roles.ceo.may.delegate[0]: unknown role "" in "role:"`,
		`roles.ceo.may.delegate[1]: unknown seat "eng"`,
		`roles.ceo.may.spawn[0]: unknown role "enginer"; name a role (ceo, engineer) or *; did you mean "engineer"?`,
		`roles.ceo.may.tools[0]: bad glob "github__["`,
		`roles.ceo.may.tools[1]: bad glob ""`,
		`roles.ceo.max_tool_calls_per_turn: -1 is out of range; must be between 0 (none) and 10000`,
		`roles.ceo.max_messages_per_turn: 1001 is out of range; must be between 0 (none) and 1000`,
		`roles.engineer.may.sing: unknown key`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems lack %q:\n%v", want, err)
		}
	}
	for _, good := range []string{"may.message[2]", "may.message[4]", "may.spawn[1]"} {
		if strings.Contains(err.Error(), good) {
			t.Errorf("a good entry %s was refused:\n%v", good, err)
		}
	}
}

// A role that leaves may out gets the stated defaults: message and
// delegate anyone in the org, spawn nothing, call every tool, 64 calls and
// 16 messages a turn, 4 hops; a list written empty grants nothing.
func TestMayDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(mayOrg))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tickets.MaxHops != 4 {
		t.Errorf("tickets.max_hops = %d; want 4", c.Tickets.MaxHops)
	}
	free := c.Roles["free"]
	if got := free.may(); strings.Join(got.Message, ",") != "*" || strings.Join(got.Delegate, ",") != "*" || len(got.Spawn) != 0 || strings.Join(got.Tools, ",") != "*" {
		t.Errorf("default may = %+v; want message [*], delegate [*], spawn [], tools [*]", got)
	}
	if free.MaxToolCallsPerTurn != 64 || free.MaxMessagesPerTurn != 16 {
		t.Errorf("default caps = %d calls, %d messages; want 64, 16", free.MaxToolCallsPerTurn, free.MaxMessagesPerTurn)
	}
	eng := c.Roles["engineer"].may()
	if eng.Delegate == nil || len(eng.Delegate) != 0 || eng.Tools == nil || len(eng.Tools) != 0 {
		t.Errorf("engineer may = %+v; want delegate and tools written empty to grant nothing", eng)
	}
	if got := strings.Join(c.Roles["cto"].may().Delegate, ","); got != "*" {
		t.Errorf("cto may.delegate = %q; want the default * when only message and spawn are written", got)
	}
}

// The may decision, table by table: whom a seat may message and delegate
// to (by handle, role:R, human, *), into which pools it may spawn, which
// tools it may call, the per-turn caps, the hop limit and the chain. People
// and the operator are not seats' tools: no may applies to them.
func TestMayDecision(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(mayOrg))
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, what string, err error, refusal string) {
		t.Helper()
		switch {
		case refusal == "" && err != nil:
			t.Errorf("%s: refused (%v); want allowed", what, err)
		case refusal != "" && err == nil:
			t.Errorf("%s: allowed; want refused saying %q", what, refusal)
		case refusal != "" && (crewlet.ErrorCode(err) != crewlet.EFORBIDDEN || !strings.Contains(crewlet.ErrorMessage(err), refusal)):
			t.Errorf("%s: %v; want forbidden saying %q", what, err, refusal)
		}
	}
	t.Run("message", func(t *testing.T) {
		for _, r := range []struct{ from, to, refusal string }{
			{"boss", "cto", ""},
			{"boss", "eng-2", ""},
			{"boss", "bob", ""}, // a human seat of role engineer
			{"boss", "alice", "role ceo may message only cto, role:engineer; ask an operator to widen roles.ceo.may.message"},
			{"boss", "any", "role ceo may message only cto, role:engineer"},
			{"eng-1", "alice", ""},
			{"eng-1", "bob", ""},
			{"eng-1", "boss", "role engineer may message only human;"},
			{"any", "boss", ""},
			{"any", "alice", ""},
			// send_message is a seat's tool: who is not an agent seat
			// of this org has no role to allow it anything.
			{"alice", "boss", "seat alice is not an agent seat of the org this process runs"},
			{"operator", "boss", "seat operator is not an agent seat of the org this process runs"},
			{"ghost", "eng-1", "seat ghost is not an agent seat of the org this process runs"},
		} {
			check(t, r.from+" → "+r.to, c.MayMessage(r.from, r.to), r.refusal)
		}
	})
	t.Run("delegate", func(t *testing.T) {
		for _, r := range []struct {
			from, to string
			chain    []string
			refusal  string
		}{
			{"boss", "eng-1", []string{"boss"}, ""},
			{"boss", "cto", []string{"boss"}, "role ceo may delegate to only role:engineer; ask an operator to widen roles.ceo.may.delegate"},
			{"eng-1", "eng-2", []string{"eng-1"}, "role engineer may delegate to no one"},
			{"any", "cto", []string{"any"}, ""},
			{"any", "cto", []string{"cto", "boss", "any"}, "cto is already on this ticket's delegation chain (cto → boss → any): delegating back to it would make a loop"},
			{"alice", "eng-1", []string{"alice"}, ""},
			{"alice", "eng-1", []string{"eng-1", "alice"}, "eng-1 is already on this ticket's delegation chain"},
		} {
			check(t, r.from+" → "+r.to, c.MayDelegate(r.from, r.to, r.chain), r.refusal)
		}
	})
	t.Run("spawn", func(t *testing.T) {
		for _, r := range []struct{ from, role, refusal string }{
			{"boss", "engineer", ""},
			{"boss", "free", "role ceo may spawn only into the pools of engineer; ask an operator to add free to roles.ceo.may.spawn"},
			{"any", "engineer", "role free may spawn no role's pool; ask an operator to add engineer to roles.free.may.spawn"},
			{"cto", "free", ""},
			{"alice", "engineer", ""},
		} {
			check(t, r.from+" spawns "+r.role, c.MaySpawn(r.from, r.role), r.refusal)
		}
	})
	t.Run("tools", func(t *testing.T) {
		for _, r := range []struct{ from, tool, refusal string }{
			{"boss", "send_message", ""},
			{"boss", "github__create_issue", ""},
			{"boss", "delegate", "role ceo may call only tools matching send_message, github__*; ask an operator to widen roles.ceo.may.tools"},
			{"boss", "gitlab__x", "role ceo may call only tools matching"},
			{"eng-1", "recall", "role engineer may call no tool;"},
			{"any", "fs__write", ""},
			{"ghost", "fs__write", "seat ghost is not an agent seat of the org this process runs, so no role says what it may do"},
		} {
			check(t, r.from+" calls "+r.tool, c.MayCall(r.from, r.tool), r.refusal)
		}
	})
	t.Run("turn caps", func(t *testing.T) {
		for _, r := range []struct {
			from            string
			message         bool
			calls, messages int
			refusal         string
		}{
			{"eng-1", false, 2, 0, ""},
			{"eng-1", false, 3, 0, "this turn has made its 3 tool calls (roles.engineer.max_tool_calls_per_turn)"},
			{"eng-1", true, 1, 0, ""},
			{"eng-1", true, 1, 1, "this turn has sent its 1 messages and delegations (roles.engineer.max_messages_per_turn)"},
			{"eng-1", false, 1, 1, ""}, // a call that sends nothing is not held by the message cap
			{"any", true, 63, 15, ""},
			{"any", false, 64, 0, "its 64 tool calls"},
			{"any", true, 10, 16, "its 16 messages"},
			{"ghost", false, 0, 0, "seat ghost is not an agent seat of the org this process runs"},
		} {
			check(t, r.from, c.TurnCaps(r.from, r.message, r.calls, r.messages), r.refusal)
		}
	})
	t.Run("hops", func(t *testing.T) {
		for _, r := range []struct {
			hops    int
			chain   []string
			refusal string
		}{
			{1, []string{"boss"}, ""},
			{4, []string{"a", "b", "c", "d"}, ""},
			{5, []string{"a", "b", "c", "d", "e"}, "this would be delegation hop 5 (a → b → c → d → e), past tickets.max_hops (4)"},
		} {
			check(t, strings.Join(r.chain, ","), c.CheckHops(r.hops, r.chain), r.refusal)
		}
	})
}

// A role built without a file and no may has the default lists, not
// nothing.
func TestMayOfABuiltRole(t *testing.T) {
	t.Parallel()
	c := &Config{Roles: map[string]Role{"r": {MaxToolCallsPerTurn: 64, MaxMessagesPerTurn: 16}}, Seats: []Seat{{Handle: "a", Role: "r", Kind: "agent"}, {Handle: "b", Role: "r", Kind: "agent"}}}
	if err := c.MayMessage("a", "b"); err != nil {
		t.Errorf("message: %v", err)
	}
	if err := c.MayCall("a", "anything"); err != nil {
		t.Errorf("call: %v", err)
	}
	if err := c.TurnCaps("a", true, 63, 15); err != nil {
		t.Errorf("caps: %v", err)
	}
	if err := c.MaySpawn("a", "r"); err == nil {
		t.Error("spawn allowed; want none by default")
	}
	if err := c.CheckHops(5, nil); err == nil {
		t.Error("hop 5 allowed; want the default limit 4")
	}
	c.Roles["r"] = Role{}
	if err := c.TurnCaps("a", false, 0, 0); err == nil {
		t.Error("a call allowed with max_tool_calls_per_turn 0; want none")
	}
}

// A change of a role's may or caps is hot: the next tool call reads it.
func TestMayIsHot(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"roles.ceo.may.message", "roles.ceo.may.tools", "roles.ceo.max_tool_calls_per_turn", "roles.ceo.max_messages_per_turn", "tickets.max_hops"} {
		if class, _ := classify(key); class != ClassHot {
			t.Errorf("%s is %s; want hot", key, class)
		}
	}
}

// Attack: a seat the process's org does not name (one removed since, or a
// made-up handle a forged activity names) would be held by no role's may,
// and so allowed everything. It is refused everything instead: every tool
// call first (delegate and spawn go through the delegate tool, and
// MayDelegate and MaySpawn let people, who no may holds, through), then
// each message and the turn's caps.
func TestASeatTheOrgDoesNotNameIsRefusedNotAllowed(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(mayOrg))
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"message":            c.MayMessage("ghost", "eng-1"),
		"the delegate tool":  c.MayCall("ghost", "delegate"),
		"an MCP server tool": c.MayCall("ghost", "fs__write"),
		"caps":               c.TurnCaps("ghost", false, 0, 0),
	} {
		if crewlet.ErrorCode(err) != crewlet.EFORBIDDEN || !strings.Contains(crewlet.ErrorMessage(err), "seat ghost is not an agent seat of the org this process runs") {
			t.Errorf("%s of an unknown seat: %v; want forbidden, naming it", what, err)
		}
	}
}
