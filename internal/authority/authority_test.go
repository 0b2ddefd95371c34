package authority_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
)

func operationsDoc(t *testing.T) string {
	t.Helper()
	docs, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(docs)
}

// cell is a table cell: "-" for nothing, tool names and keys in code.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func codes(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = "`" + k + "`"
	}
	return strings.Join(quoted, ", ")
}

// renderActions is docs/operations.md's authority table as the Go table
// says it.
func renderActions() string {
	var b strings.Builder
	b.WriteString("| action | right | scope | seat tool | what the seat's tool may | held by |\n|---|---|---|---|---|---|\n")
	for _, a := range authority.Actions() {
		r := authority.Of(a)
		tool, heldBy := "-", "-"
		if r.Tool != "" {
			tool, heldBy = r.Tool, codes(r.ToolHeldBy())
			if !strings.Contains(tool, "`") {
				tool = "`" + tool + "`"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Name, r.Right, r.Scope, tool, cell(r.ToolMay), heldBy)
	}
	return b.String()
}

func renderScopes() string {
	var b strings.Builder
	b.WriteString("| scope | a member may |\n|---|---|\n")
	for s := authority.ScopeFleet; s <= authority.ScopeApproval; s++ {
		fmt.Fprintf(&b, "| %s | %s |\n", s, s.Member())
	}
	return b.String()
}

// docs/operations.md holds the authority table and the table of scopes
// word for word as the Go table renders them: change the table in
// internal/authority and paste what this test prints.
func TestTheDocsHoldTheAuthorityTable(t *testing.T) {
	t.Parallel()
	docs := operationsDoc(t)
	for what, table := range map[string]string{"authority table": renderActions(), "table of scopes": renderScopes()} {
		if !strings.Contains(docs, table) {
			t.Errorf("docs/operations.md lacks the %s as internal/authority has it; put this there:\n\n%s", what, table)
		}
	}
}

// Every action a token may take through the API has a scope, and every
// action only a seat's tools take is one no role's right reaches: a route
// naming one would refuse everyone.
func TestEveryActionHasARightAndAScope(t *testing.T) {
	t.Parallel()
	for _, a := range authority.Actions() {
		r := authority.Of(a)
		switch {
		case r.Name == "":
			t.Errorf("action %d has no row", a)
		case r.Right == authority.Nobody && (r.Tool == "" || r.Scope != authority.ScopeNone):
			t.Errorf("%s: only a seat's tools take it, so it needs a tool and no scope; it has tool %q, scope %s", r.Name, r.Tool, r.Scope)
		case r.Right != authority.Public && r.Right != authority.Nobody && r.Scope == authority.ScopeNone:
			t.Errorf("%s: right %s and no scope; decide what a member may do with it", r.Name, r.Right)
		}
		for _, role := range []authority.Right{authority.Read, authority.Operate, authority.Administer} {
			if r.Right == authority.Nobody && role >= r.Right {
				t.Errorf("%s is a seat's own, yet right %s reaches it", r.Name, role)
			}
		}
	}
}

// A ticket is answered or cancelled by its delegator, whether it is a seat
// acting through its tools or a principal, or by an admin, who overrides;
// anyone else is refused, a seat named like the opener's token included.
func TestOnlyTheDelegatorOrAnAdminActsOnATicket(t *testing.T) {
	t.Parallel()
	ticket := crewlet.Ticket{ID: "t-1", From: "cto", To: "eng", OpenedBy: "otto"}
	for _, c := range []struct {
		name     string
		actor    authority.Actor
		who      string
		override bool
		refused  bool
	}{
		{"the delegating seat's tool", authority.Actor{Name: "seat:cto", Seat: "cto"}, "cto", false, false},
		{"the principal bound to the delegating seat", authority.Actor{Name: "bea", Role: config.RoleMember, Seat: "cto"}, "cto", false, false},
		{"the principal that opened it", authority.Actor{Name: "otto", Role: config.RoleOperator}, "otto", false, false},
		{"an admin", authority.Actor{Name: "ann", Role: config.RoleAdmin}, "ann", true, false},
		{"the seat it serves", authority.Actor{Name: "seat:eng", Seat: "eng"}, "", false, true},
		{"another operator", authority.Actor{Name: "alice-bot", Role: config.RoleOperator, Seat: "alice"}, "", false, true},
		{"a seat named as the opener", authority.Actor{Name: "seat:otto", Seat: "otto"}, "", false, true},
	} {
		who, override, err := authority.TicketActor(c.actor, ticket, "answer")
		if who != c.who || override != c.override || (err != nil) != c.refused {
			t.Errorf("%s: %q, override %v, %v; want %q, override %v, refused %v", c.name, who, override, err, c.who, c.override, c.refused)
		}
		if c.refused && crewlet.ErrorCode(err) != crewlet.EFORBIDDEN {
			t.Errorf("%s: %v; want forbidden", c.name, err)
		}
	}
}
