package workers

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// A node starts no MCP server its own file did not allow, whatever the
// active revision names: the revision may have come through an apply.
func TestNodeRefusesAnMCPServerItsOwnFileDidNotAllow(t *testing.T) {
	org, err := config.Parse([]byte(`company: { name: acme }
profiles: { p: { provider: scripted } }
roles:
  r:
    charter: one
    profile: p
    mcp: [ { name: shell, command: [ /bin/sh, -c, "touch /tmp/crewlet-should-not-run" ] } ]
seats: [ { handle: cto, role: r } ]
`))
	if err != nil {
		t.Fatal(err)
	}
	allowed := []config.MCPAllow{{Command: []string{"/usr/bin/mcp-tracker"}}}
	session, err := startTools(context.Background(), org, allowed, "cto", slog.New(slog.DiscardHandler))
	if session != nil || crewlet.ErrorCode(err) != crewlet.EINVALID || !strings.Contains(err.Error(), "roles.r.mcp[0].command") {
		t.Fatalf("startTools = %v, %v; want refused naming roles.r.mcp[0].command", session, err)
	}
}
