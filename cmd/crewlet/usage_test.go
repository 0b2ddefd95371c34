package main

import (
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
)

// The help names, for every client command, the routes it calls, and each
// named route is one the API serves.
func TestUsageNamesTheRouteOfEveryClientCommand(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte("company: { name: helpco }\nseats: [ { handle: alice, kind: human } ]\n"))
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	h := (&api.Server{Org: org, Log: slog.New(slog.DiscardHandler)}).Handler()
	if err := chi.Walk(h.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+pattern] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, client, ok := strings.Cut(usage, "Client commands")
	if !ok {
		t.Fatal("the usage has no client commands section")
	}
	route := regexp.MustCompile(`\b(GET|POST) (/[a-z_/{}.]*)`)
	commands := 0
	var current string
	named := map[string]bool{}
	flush := func() {
		if current != "" && !named[current] {
			t.Errorf("client command %q names no route it calls", current)
		}
	}
	for _, line := range strings.Split(client, "\n")[1:] {
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "    ") {
			flush()
			current = strings.Fields(line)[0] + " " + strings.Fields(line)[1]
			commands++
		}
		for _, m := range route.FindAllStringSubmatch(line, -1) {
			named[current] = true
			if !served[m[1]+" "+m[2]] {
				t.Errorf("%s: the help names %s %s, which the API does not serve", current, m[1], m[2])
			}
		}
	}
	flush()
	if commands < 25 {
		t.Fatalf("found %d client commands in the usage; want every one of them", commands)
	}
}
