package firstparty

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
)

func operationsDoc(t *testing.T) string {
	t.Helper()
	docs, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(docs)
}

// Every first-party tool is the seat tool of an action in the authority
// table (which docs/operations.md shows), and the table names no
// first-party tool that does not exist. What the table says holds each
// tool is what the code holds it to: may.tools and the tool-call cap for
// every tool (the ToolCall activity asks both before any call), the
// message cap for exactly the tools that count as messages, may.message
// for send_message, may.delegate and may.spawn for delegate.
func TestSeatToolsAreInTheAuthorityTable(t *testing.T) {
	t.Parallel()
	heldBy := map[string][]string{}
	for _, a := range authority.Actions() {
		r := authority.Of(a)
		if r.Tool != "" && a != authority.CallTool {
			heldBy[r.Tool] = append(heldBy[r.Tool], r.ToolHeldBy()...)
		}
	}
	for _, tool := range Specs() {
		keys, ok := heldBy[tool.Name]
		if !ok {
			t.Errorf("tool %s is the seat tool of no action in internal/authority's table", tool.Name)
			continue
		}
		delete(heldBy, tool.Name)
		want := []string{"may.tools", "max_tool_calls_per_turn"}
		if slices.Contains(Messages, tool.Name) {
			want = append(want, "max_messages_per_turn")
		}
		switch tool.Name {
		case SendMessage:
			want = append(want, "may.message")
		case Delegate:
			want = append(want, "may.delegate", "may.spawn")
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		slices.Sort(want)
		if !slices.Equal(keys, want) {
			t.Errorf("the authority table says %s is held by %v; the code holds it by %v", tool.Name, keys, want)
		}
	}
	for name := range heldBy {
		t.Errorf("the authority table names a seat tool %s that does not exist", name)
	}
	if want := []string{SendMessage, Delegate}; !slices.Equal(Messages, want) {
		t.Errorf("the tools that count as messages are %v; want %v", Messages, want)
	}
}

// The defaults the docs state for seat authority are the code's.
func TestSeatAuthorityDefaultsAreDocumented(t *testing.T) {
	t.Parallel()
	docs := operationsDoc(t)
	for _, row := range []string{
		fmt.Sprintf("| `roles.NAME.max_tool_calls_per_turn` | `%d` |", config.DefaultMaxToolCallsPerTurn),
		fmt.Sprintf("| `roles.NAME.max_messages_per_turn` | `%d` |", config.DefaultMaxMessagesPerTurn),
		fmt.Sprintf("| `tickets.max_hops` | `%d` |", config.DefaultMaxHops),
		"| `roles.NAME.may.message` / `.delegate` | `['*']` (the org) |",
		"| `roles.NAME.may.spawn` | `[]` (none) |",
		"| `roles.NAME.may.tools` | `['*']` (all) |",
	} {
		if !strings.Contains(docs, row) {
			t.Errorf("docs/operations.md's configuration keys lack %q", row)
		}
	}
	org, err := config.Parse([]byte("company: { name: acme }\nprofiles: { p: { provider: scripted } }\nroles: { r: { charter: works as r, profile: p } }\nseats: [ { handle: a, role: r }, { handle: b, role: r }, { handle: alice, kind: human } ]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"message any seat":  org.MayMessage("a", "alice"),
		"delegate any seat": org.MayDelegate("a", "b", []string{"a"}),
		"call any tool":     org.MayCall("a", "gh__create_issue"),
	} {
		if err != nil {
			t.Errorf("by default a seat may %s: %v", what, err)
		}
	}
	if org.MaySpawn("a", "r") == nil {
		t.Error("by default a seat may spawn; the docs say none")
	}
}
