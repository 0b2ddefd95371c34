// Command crewlet runs and operates a crewlet company: the server processes
// (serve, worker, api, migrate), config checks, and client commands that talk
// to the REST API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet/internal/testhook"
)

// exitUsage is the exit code for a command line crewlet cannot run.
const exitUsage = 2

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "crewlet: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			command := ue.command
			if command == "" {
				command = "crewlet"
			}
			fmt.Fprintf(os.Stderr, "run `%s --help` for its flags and an example\n", command)
			os.Exit(exitUsage)
		}
		os.Exit(1)
	}
}

// usageError is a command line crewlet cannot run: a command it does not
// know, a flag it does not take, the wrong arguments. It carries the
// command's usage line, not the whole tree's.
type usageError struct {
	msg string
	// command is the path of the command the line was for ("crewlet seats
	// ls"); empty when the error does not know it.
	command string
}

func (e usageError) Error() string { return e.msg }

// usageErrorf says what is wrong with cmd's command line and shows its
// usage line.
func usageErrorf(cmd *cobra.Command, format string, a ...any) error {
	return usageError{msg: fmt.Sprintf(format, a...) + "; usage: " + cmd.UseLine(), command: cmd.CommandPath()}
}

// run runs one command line. Each call builds its own tree, so the flags
// of one run never leak into another (tests run many at once).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// A test hook that does not parse would leave the test running against
	// a process that ignores it.
	if _, err := testhook.Load(); err != nil {
		return err
	}
	root := newCLI(stdout, stderr).root()
	root.SetArgs(longFlagsWithOneDash(root, args))
	return root.ExecuteContext(ctx)
}

// cli is one run of the command line: where it writes, and the global
// flags every command reads.
type cli struct {
	stdout, stderr io.Writer
	// api, token and ca reach the REST API; config is the org file of the
	// server commands.
	api, token, ca, config string
}

func newCLI(stdout, stderr io.Writer) *cli { return &cli{stdout: stdout, stderr: stderr} }

// client is the REST API client of the global flags.
func (c *cli) client() *apiClient { return newAPIClient(c.api, c.token, c.ca) }

// root is the command tree. Every command is a cobra.Command built by a
// function of this package, named after it (seatsLsCmd for `seats ls`);
// cobra makes the help, the usage lines and the completion from the tree,
// so a command is listed only where it is declared.
//
// A client command's Short names what it shows or does and, in
// parentheses, the REST route(s) it calls: `crewlet --help` is the map from
// commands to routes, and TestEveryCommandHasHelp holds every client
// command to naming a route the API serves.
//
// A command that reads is one declaration through readCommand: its
// cobra.Command (Use, Short, Example, Args), the route path its arguments
// and flags make, and how to print the decoded answer as text. readCommand
// adds -o/--output: text runs the printer, json prints the API's answer as
// it came, so a script gets the REST shape (`crewlet seats ls -o json | jq`).
// For example:
//
//	func (c *cli) poolsCmd() *cobra.Command {
//		return readCommand(c, &cobra.Command{
//			Use: "pools", Short: "each role's spawn pool: max, live, free, reclaimable, its seats (GET /pools)",
//			Example: "  crewlet pools", Args: noArgs,
//		}, fixedPath("/pools"), printPools)
//	}
//
// with printPools(io.Writer, []wire.PoolView) error the table. A flag
// that shapes the route is a variable the path function reads (see
// ticketsLsCmd); a route that takes an argument has Args: exactArgs(1)
// and builds its path from args[0] (see seatsShowCmd).
//
// A read that pages (conversation, inbox --all, turn show) builds its own
// RunE and takes -o with outputFlag, printing the merged answer with
// printJSON. TestReadCommandsPrintTheAPIsJSON holds every command with -o
// to printing what its route answers.
func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "crewlet",
		Short: "crewlet runs a company of AI agent seats",
		Long: `crewlet runs a company of AI agent seats.

Server commands read the org file (--config). Client commands talk to the REST API at
--api with the bearer token --token (without one, the local token of an API on this
machine); each names the route it calls.`,
		Example: "  crewlet serve --config crewlet.yaml\n  crewlet seats ls\n  crewlet seats ls -o json | jq '.[].handle'",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRun,
		// Errors go to stderr once, from main; a usage error carries its
		// own usage line.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageErrorf(cmd, "%v", err) })
	pf := root.PersistentFlags()
	pf.StringVar(&c.api, "api", envOr("CREWLET_API", "http://127.0.0.1:8080"), "API base URL ($CREWLET_API when set)")
	pf.StringVar(&c.token, "token", os.Getenv("CREWLET_TOKEN"), "bearer token for the API ($CREWLET_TOKEN when set; without one, the local token of an API on this machine that minted one)")
	pf.StringVar(&c.ca, "ca", os.Getenv("CREWLET_CA"), "PEM file of the CA that signed an https API's certificate ($CREWLET_CA when set; empty: the system's roots)")
	pf.StringVar(&c.config, "config", envOr("CREWLET_CONFIG", "crewlet.yaml"), "org file of the server commands ($CREWLET_CONFIG when set)")

	root.AddGroup(&cobra.Group{ID: groupServer, Title: "Server commands:"}, &cobra.Group{ID: groupClient, Title: "Client commands:"})
	server := []*cobra.Command{c.serverCmd(roleAPI | roleWorker), c.serverCmd(roleWorker), c.serverCmd(roleAPI), c.migrateCmd(), c.versionsCmd()}
	client := []*cobra.Command{
		c.consoleCmd(), c.seatsCmd(), c.sendCmd(), c.inboxCmd(), c.conversationCmd(), c.watchCmd(), c.turnCmd(),
		c.replayCmd(), c.evalCmd(), c.askCmd(), c.ticketsCmd(), c.approvalsCmd(), c.poolsCmd(),
		c.auditCmd(), c.deadLettersCmd(), c.profilesCmd(), c.pricesCmd(), c.costsCmd(), c.modelsCmd(), c.nodesCmd(), c.schedulesCmd(),
		c.signalCmd("pause"), c.signalCmd("resume"), c.signalCmd("drain"),
	}
	for _, cmd := range server {
		cmd.GroupID = groupServer
	}
	for _, cmd := range client {
		cmd.GroupID = groupClient
	}
	// config holds a server command (check) and client ones (apply, show).
	cfg := c.configCmd()
	cfg.GroupID = groupServer
	root.AddCommand(server...)
	root.AddCommand(cfg)
	root.AddCommand(client...)
	// cobra adds help and completion as it runs; added now, they are in the
	// tree a test walks, with examples as every command has.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, cmd := range root.Commands() {
		switch cmd.Name() {
		case "help":
			cmd.Example = "  crewlet help seats memory"
		case "completion":
			cmd.Example = "  crewlet completion bash > ~/.local/share/bash-completion/completions/crewlet\n  crewlet completion zsh > \"${fpath[1]}/_crewlet\"\n  crewlet completion fish > ~/.config/fish/completions/crewlet.fish"
			for _, shell := range cmd.Commands() {
				shell.Example = "  crewlet completion " + shell.Name()
			}
		}
	}
	return root
}

const (
	groupServer = "server"
	groupClient = "client"
)

// group is a command that only holds subcommands; its Example is its
// subcommands' first examples.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	var examples []string
	for _, s := range subs {
		if first, _, _ := strings.Cut(s.Example, "\n"); first != "" {
			examples = append(examples, first)
		}
	}
	g := &cobra.Command{Use: use + " COMMAND", Short: short, Example: strings.Join(examples, "\n"), Args: cobra.ArbitraryArgs, RunE: groupRun}
	g.AddCommand(subs...)
	return g
}

// groupRun is the RunE of a command that holds subcommands: run with none
// or an unknown one, it says which it has.
func groupRun(cmd *cobra.Command, args []string) error {
	var names []string
	for _, s := range cmd.Commands() {
		if s.IsAvailableCommand() && s.Name() != "help" {
			names = append(names, s.Name())
		}
	}
	// The root's commands are too many for one line: its help lists them.
	use := ""
	if cmd.HasParent() {
		use = "; use " + strings.Join(names, ", ")
	}
	if len(args) == 0 {
		return usageError{msg: "no command given" + use, command: cmd.CommandPath()}
	}
	what := "command"
	if cmd.HasParent() {
		what = cmd.Name() + " command"
	}
	msg := fmt.Sprintf("unknown %s %q", what, args[0])
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageError{msg: msg + use, command: cmd.CommandPath()}
}

// noArgs and exactArgs check a command's positional arguments and
// answer a wrong count with a usage error.
var noArgs = exactArgs(0)

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == n:
			return nil
		case n == 0:
			return usageErrorf(cmd, "%s takes no argument; got %q", cmd.CommandPath(), args)
		}
		// The words after the name in Use name the arguments: HANDLE TEXT.
		names := strings.Fields(cmd.Use)[1:]
		names = names[:min(n, len(names))]
		return usageErrorf(cmd, "%s takes %s; got %d argument(s) %q", cmd.CommandPath(), strings.Join(names, " "), len(args), args)
	}
}

// longFlagsWithOneDash rewrites -name to --name where name is a flag of the
// command args run: the command line before the tree took Go's flag
// syntax, and scripts written for it keep working.
func longFlagsWithOneDash(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && len(name) > 1 && cmd.Flag(name) != nil {
			out[i] = "-" + a
		}
	}
	return out
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
