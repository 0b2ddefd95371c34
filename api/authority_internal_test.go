package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet/internal/authority"
)

// docs/operations.md's table of routes is the router's, each route with
// the action it names and that action's right and scope from the authority
// table, word for word: change a route and paste what this test prints.
func TestTheDocsListEveryRouteWithItsAction(t *testing.T) {
	t.Parallel()
	s := &Server{Log: slog.New(slog.DiscardHandler)}
	// The console's files are served beside the table, to anyone the door
	// lets in.
	routes := append(s.routes(), route{method: http.MethodGet, pattern: "/ui", action: authority.Probe},
		route{method: http.MethodGet, pattern: "/ui/*", action: authority.Probe})
	var b strings.Builder
	b.WriteString("| route | action | right | scope |\n|---|---|---|---|\n")
	listed := map[string]bool{}
	for _, rt := range routes {
		rule := rt.rule()
		fmt.Fprintf(&b, "| `%s %s` | %s | %s | %s |\n", rt.method, rt.pattern, rule.Name, rule.Right, rule.Scope)
		listed[rt.method+" "+rt.pattern] = true
	}
	err := chi.Walk(s.Handler().(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !listed[method+" "+pattern] {
			t.Errorf("%s %s is served and names no action", method, pattern)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docs), b.String()) {
		t.Errorf("docs/operations.md lacks the table of routes as the router has it; put this there:\n\n%s", b.String())
	}
}
