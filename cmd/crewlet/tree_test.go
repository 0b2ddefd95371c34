package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
)

// commands is every command of the tree that a person runs, root first.
func commands(t *testing.T) []*cobra.Command {
	t.Helper()
	var all []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		all = append(all, c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newCLI(io.Discard, io.Discard).root())
	return all
}

// serverCommands run processes or read the org file, not the API.
var serverCommands = map[string]bool{
	"crewlet serve": true, "crewlet worker": true, "crewlet api": true, "crewlet migrate": true,
	"crewlet versions": true, "crewlet config check": true,
}

// Every command's --help exits 0 on stdout with its usage line, its flags
// and an example; a client command's names each route it calls, and each
// is a route the API serves.
func TestEveryCommandHasHelp(t *testing.T) {
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
	route := regexp.MustCompile(`\b(GET|POST|PUT|PATCH|DELETE) (/[a-z_/{}.]*)`)
	cmds := commands(t)
	leaves := 0
	for _, cmd := range cmds {
		path := cmd.CommandPath()
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			args := append(strings.Fields(path)[1:], "--help")
			if err := run(context.Background(), args, &out, &errOut); err != nil {
				t.Fatalf("%s --help: %v", path, err)
			}
			help := out.String()
			for _, want := range []string{"Usage:\n  " + path, "Examples:\n  crewlet", "Flags:\n"} {
				if !strings.Contains(help, want) {
					t.Errorf("%s --help lacks %q:\n%s", path, want, help)
				}
			}
			if cmd.HasSubCommands() || serverCommands[path] || strings.HasPrefix(path, "crewlet completion") || path == "crewlet help" {
				return
			}
			routes := route.FindAllStringSubmatch(help, -1)
			if len(routes) == 0 {
				t.Errorf("client command %s: its help names no route it calls:\n%s", path, help)
			}
			for _, m := range routes {
				if !served[m[1]+" "+m[2]] {
					t.Errorf("%s: the help names %s %s, which the API does not serve", path, m[1], m[2])
				}
			}
		})
		if !cmd.HasSubCommands() {
			leaves++
		}
	}
	if leaves < 60 {
		t.Fatalf("found %d commands in the tree; want every one of them", leaves)
	}
}

// A usage error names what is wrong and shows the command's usage line,
// not the whole tree.
func TestUsageErrorShowsTheCommandsUsageLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"launch"}, `unknown command "launch"`},
		{[]string{}, "no command given"},
		{[]string{"seats"}, "no command given; use events, ls, memory, show, spawn, turns, usage"},
		{[]string{"seats", "lss"}, `unknown seats command "lss" (did you mean "ls"?)`},
		{[]string{"seats", "show"}, `crewlet seats show takes HANDLE; got 0 argument(s) []; usage: crewlet seats show HANDLE [flags]`},
		{[]string{"send", "cto"}, `crewlet send takes HANDLE TEXT; got 1 argument(s) ["cto"]; usage: crewlet send HANDLE TEXT [flags]`},
		{[]string{"seats", "ls", "cto"}, `crewlet seats ls takes no argument; got ["cto"]; usage: crewlet seats ls [flags]`},
		{[]string{"seats", "ls", "--limit", "3"}, "unknown flag: --limit; usage: crewlet seats ls [flags]"},
		{[]string{"seats", "ls", "-o", "yaml"}, `-o "yaml" is not an output format; use text or json; usage: crewlet seats ls [flags]`},
		{[]string{"turn", "show", "cto"}, "is not turn/HANDLE/WORK_KEY"},
	} {
		err := run(context.Background(), tt.args, io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("crewlet %s: %v; want a usage error containing %q", strings.Join(tt.args, " "), err, tt.want)
		}
		if err != nil && strings.Count(err.Error(), "crewlet ") > 2 {
			t.Errorf("crewlet %s: %v; want one usage line, not the tree", strings.Join(tt.args, " "), err)
		}
	}
}

// Flags written the Go way, with one dash, still work.
func TestLongFlagWithOneDash(t *testing.T) {
	t.Parallel()
	root := newCLI(io.Discard, io.Discard).root()
	got := longFlagsWithOneDash(root, []string{"seats", "turns", "cto", "-limit", "5", "-api=http://x", "-o", "json", "--", "-limit"})
	want := []string{"seats", "turns", "cto", "--limit", "5", "--api=http://x", "-o", "json", "--", "-limit"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q; want %q", got, want)
	}
}

// `crewlet completion SHELL` writes cobra's completion script for it.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{"bash": "__start_crewlet", "zsh": "#compdef crewlet", "fish": "complete -c crewlet"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"completion", shell}, &out, io.Discard); err != nil {
			t.Fatalf("completion %s: %v", shell, err)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("completion %s: %d bytes without %q", shell, out.Len(), want)
		}
	}
}
