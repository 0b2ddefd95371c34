// Command crewlet runs and operates a crewlet company: the server processes
// (serve, worker, api, migrate), config checks, and client commands that talk
// to the REST API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/crewlet/crewlet/internal/testhook"
)

const usage = `crewlet runs a company of AI agent seats.

Server commands (read the org file; --config FILE, default $CREWLET_CONFIG or crewlet.yaml):
  serve             run the API and a worker node in one process; --watch applies the org
                    file as a new config revision whenever it changes
  worker            run a worker node
  api               run the REST API
  migrate           apply database migrations and exit
  config check FILE validate an org file; lists every problem
  versions          count the running seats and turns on each version of each workflow
                    change and on each worker build, and say which code kept for older
                    runs may go and which old build's nodes may stop (docs/versioning.md)

Client commands (talk to the API at --api URL, default $CREWLET_API or http://127.0.0.1:8080,
with the bearer token --token, default $CREWLET_TOKEN, else the local token of an API on this
machine; each names the route it calls):
  console                       print the console's sign-in link for that token, once the API takes
                                it (GET /me); the token rides in the URL fragment, which the
                                browser never sends
  seats ls                      list every seat and its status (GET /seats)
  seats show HANDLE             show one seat: org entry, database row, live state (GET /seats/{handle})
  send HANDLE TEXT [--wait D] [--from SEAT] [--conversation ID]
                                send a message and print the reply (--wait 0 returns at once)
                                (POST /seats/{handle}/messages, then GET /conversations/{id})
  inbox HANDLE [--limit N] [--all]
                                show a seat's newest mail (every page with --all), how people
                                read a human seat (GET /seats/{handle}/inbox)
  conversation ID               print a conversation's transcript (GET /conversations/{id})
  watch HANDLE | --conversation ID [--after ID] [--json]
                                print a seat's or a conversation's live events as they come, one
                                line each; reconnects from the last one on a dropped connection,
                                Ctrl-C stops (GET /seats/{handle}/stream, GET /conversations/{id}/stream)
  seats events HANDLE           a seat's event history: skipped triggers, dead letters, requeues
                                (GET /seats/{handle}/events)
  seats usage HANDLE            tokens used and caps per day/week/month, seat and company; the hold
                                if any (GET /seats/{handle}/usage)
  seats turns HANDLE [--limit N]
                                a seat's newest turns: id, status, rounds, start, note
                                (GET /seats/{handle}/turns)
  seats memory HANDLE [--kind K] [--limit N] [--before CURSOR]
                                a seat's diary, episodes and counterparties, newest first;
                                --kind diary|episodes|counterparties pages one list
                                (GET /seats/{handle}/memory)
  turn show TURN-ID             a turn's model transcript per thread and its charter receipts
                                (GET /turns/{handle}/{work_key})
  replay TURN-ID [--charter FILE] [--profile P] [--model M] [--revision N] [--json]
                                run a finished turn again with a changed charter, profile, model or
                                config revision: its recorded and replayed answers side by side, each
                                tool call answered from the record (matched) or never run (diverged);
                                writes nothing of the seat's, charged to evals.budget
                                (POST /turns/{handle}/{work_key}/replay)
  replay --policy FILE (--dataset NAME | TURN-ID...) [--json]
                                hold the recorded tool calls to a candidate org file: each one's
                                approval gate and may now (allowed, gated, refused) beside what
                                it met when it ran; no model called, nothing written (POST /evals/policy)
  eval dataset create NAME (--seat H | --role R) --since T [--until T] [--limit N] | --turn ID... | --turns FILE
                                freeze finished turns as a dataset: a seat's or role's in a window,
                                or by id; at most 1000 (POST /evals/datasets)
  eval dataset list | show NAME | delete NAME
                                the datasets; one's turn ids; delete one
                                (GET /evals/datasets, GET /evals/datasets/{name}, DELETE /evals/datasets/{name})
  eval run DATASET [--charter FILE] [--profile P] [--model M] [--revision N]
                   [--check KIND[:ARG]]... [--checks FILE] [--concurrency K]
                                replay every turn of the dataset with the change, K at once (8),
                                as one durable workflow, and score each with the checks: contains:TEXT,
                                regex:PATTERN, json_schema:FILE, same_tools, judge:PROFILE:RUBRIC;
                                charged to evals.budget (POST /evals/runs)
  eval runs                     the eval runs with their totals (GET /evals/runs)
  eval show RUN [--turn ID] [--json]
                                a run's report: per turn the checks and the recorded and replayed
                                answers; pass rate, tokens, divergences (GET /evals/runs/{run})
  ask TARGET TASK [--wait D] [--from SEAT] [--conversation ID]
                                open a ticket to a seat or role:NAME and print its reply;
                                --wait 0 returns once it is open (POST /tickets)
  tickets ls [--from H] [--to H] [--phase P] [--open] [--limit N]
                                tickets, newest first (GET /tickets)
  tickets show ID               one ticket (GET /tickets/{id})
  tickets answer ID TEXT        answer the question on a ticket you delegated (POST /tickets/{id}/answer)
  tickets cancel ID [--reason TEXT] [--by NAME]
                                cancel an open ticket you delegated; an admin may any (POST /tickets/{id}/cancel)
  approvals ls [--seat H] [--status S] [--limit N]
                                tool calls waiting for a decision (GET /approvals)
  approvals approve ID [--reason TEXT] [--remember [--args] --until T]
                                approve a gated tool call, and with --remember stop asking until T
                                (POST /approvals/{id}/approve)
  approvals deny ID --reason TEXT
                                deny it; the model gets "denied by YOU: TEXT" (POST /approvals/{id}/deny)
  seats spawn ROLE              spawn a seat of ROLE from its pool; print its handle (POST /seats/spawn)
  pools                         each role's spawn pool: max, live, free, reclaimable, its seats (GET /pools)
  config apply FILE [--restart]  apply an org file as the next config revision and list each
                                changed key as hot, deferred or cold (admin; POST /config)
  config show [--document]      the active revision, who applied it, when, and which revision
                                each process runs (GET /config)
  audit [--principal NAME] [--outcome O] [--limit N]
                                the API's audit log, newest first (admin; GET /audit)
  deadletters ls                mail the seats gave up on, with reason and delivery count
                                (GET /deadletters)
  deadletters requeue ID        put a dead letter back in its seat's mailbox with a fresh budget
                                (POST /deadletters/{id}/requeue)
  profiles                      model profiles: load, free slots, quarantine, cooling-off, model
                                gate (GET /profiles)
  models disable MODEL [--reason TEXT]
                                switch a model off fleet-wide: its profiles take no new turn
                                (POST /models/{id}/disable)
  models enable MODEL           switch it back on; turns waiting for it run (POST /models/{id}/enable)
  nodes ls [--all]              list worker nodes: labels, seats held, fair share, heartbeat age
                                (GET /nodes)
  nodes drain ID                drain a node (incarnation or node id): its seats move, it exits
                                (POST /nodes/{id}/drain)
  schedules ls                  the org's schedules: when, target, overlap, paused, fires, skipped,
                                next fire (GET /schedules)
  schedules show NAME [--limit N]
                                one schedule and its fire history: recent, running and recorded fires,
                                skips (GET /schedules/{name})
  schedules trigger NAME        fire a schedule now (POST /schedules/{name}/trigger)
  schedules pause|unpause NAME [--reason TEXT]
                                stop or restart a schedule's fires (POST /schedules/{name}/pause|unpause)
  schedules backfill NAME --from T --to T
                                run the fires due in a past range, each answered once
                                (POST /schedules/{name}/backfill)
  pause HANDLE [--stop-turn] [--reason TEXT] [--by NAME]
                                pause a seat (POST /seats/{handle}/pause)
  resume HANDLE [--by NAME]     resume a paused or drained seat (POST /seats/{handle}/resume)
  drain HANDLE [--reason TEXT] [--by NAME]
                                drain a seat: it finishes its turn and takes no more mail
                                (POST /seats/{handle}/drain)
`

// exitUsage is the exit code for a command line crewlet cannot run.
const exitUsage = 2

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(os.Stderr, "crewlet: %v\n\n%s", err, usage)
			os.Exit(exitUsage)
		}
		fmt.Fprintf(os.Stderr, "crewlet: %v\n", err)
		os.Exit(1)
	}
}

// usageError is a command line that names no command crewlet knows, or has
// the wrong arguments.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"no command given"}
	}
	// A test hook that does not parse would leave the test running against
	// a process that ignores it.
	if _, err := testhook.Load(); err != nil {
		return err
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServer(ctx, rest, stderr, roleAPI|roleWorker)
	case "worker":
		return runServer(ctx, rest, stderr, roleWorker)
	case "api":
		return runServer(ctx, rest, stderr, roleAPI)
	case "migrate":
		return runMigrate(ctx, rest, stdout)
	case "config":
		if len(rest) == 0 {
			return usageError{"usage: crewlet config check FILE | config apply FILE [--restart] | config show [--document]"}
		}
		switch rest[0] {
		case "check":
			return runConfigCheck(rest[1:], stdout)
		case "apply":
			return runConfigApply(ctx, rest[1:], stdout)
		case "show":
			return runConfigShow(ctx, rest[1:], stdout, stderr)
		}
		return usageError{fmt.Sprintf("unknown config command %q; use check, apply or show", rest[0])}
	case "seats":
		if len(rest) == 0 {
			return usageError{"usage: crewlet seats ls | seats show HANDLE | seats events HANDLE | seats usage HANDLE | seats turns HANDLE | seats memory HANDLE | seats spawn ROLE"}
		}
		switch rest[0] {
		case "ls":
			return runSeatsList(ctx, rest[1:], stdout)
		case "show":
			return runSeatsShow(ctx, rest[1:], stdout)
		case "events":
			return runSeatEvents(ctx, rest[1:], stdout)
		case "usage":
			return runSeatUsage(ctx, rest[1:], stdout)
		case "turns":
			return runSeatTurns(ctx, rest[1:], stdout)
		case "spawn":
			return runSeatSpawn(ctx, rest[1:], stdout)
		case "memory":
			return runSeatMemory(ctx, rest[1:], stdout)
		}
		return usageError{fmt.Sprintf("unknown seats command %q; use ls, show, events, usage, turns, memory or spawn", rest[0])}
	case "turn":
		if len(rest) == 0 || rest[0] != "show" {
			return usageError{"usage: crewlet turn show TURN-ID"}
		}
		return runTurnShow(ctx, rest[1:], stdout)
	case "replay":
		return runReplay(ctx, rest, stdout)
	case "eval":
		return runEval(ctx, rest, stdout)
	case "deadletters":
		if len(rest) == 0 {
			return usageError{"usage: crewlet deadletters ls | deadletters requeue ID"}
		}
		switch rest[0] {
		case "ls":
			return runDeadLettersList(ctx, rest[1:], stdout)
		case "requeue":
			return runDeadLetterRequeue(ctx, rest[1:], stdout)
		}
		return usageError{fmt.Sprintf("unknown deadletters command %q; use ls or requeue", rest[0])}
	case "nodes":
		if len(rest) == 0 {
			return usageError{"usage: crewlet nodes ls | nodes drain ID"}
		}
		switch rest[0] {
		case "ls":
			return runNodesList(ctx, rest[1:], stdout)
		case "drain":
			return runNodesDrain(ctx, rest[1:], stdout)
		}
		return usageError{fmt.Sprintf("unknown nodes command %q; use ls or drain", rest[0])}
	case "profiles":
		return runProfiles(ctx, rest, stdout)
	case "pools":
		return runPools(ctx, rest, stdout)
	case "models":
		if len(rest) == 0 || (rest[0] != "disable" && rest[0] != "enable") {
			return usageError{"usage: crewlet models disable MODEL | models enable MODEL"}
		}
		return runModelSwitch(ctx, rest[0], rest[1:], stdout)
	case "ask":
		return runAsk(ctx, rest, stdout)
	case "audit":
		return runAudit(ctx, rest, stdout)
	case "approvals":
		return runApprovals(ctx, rest, stdout)
	case "tickets":
		if len(rest) == 0 {
			return usageError{"usage: crewlet tickets ls | tickets show ID | tickets answer ID TEXT | tickets cancel ID"}
		}
		switch rest[0] {
		case "ls":
			return runTicketsList(ctx, rest[1:], stdout)
		case "show":
			return runTicketShow(ctx, rest[1:], stdout)
		case "answer":
			return runTicketAnswer(ctx, rest[1:], stdout)
		case "cancel":
			return runTicketCancel(ctx, rest[1:], stdout)
		}
		return usageError{fmt.Sprintf("unknown tickets command %q; use ls, show, answer or cancel", rest[0])}
	case "send":
		return runSend(ctx, rest, stdout)
	case "inbox":
		return runInbox(ctx, rest, stdout)
	case "conversation":
		return runConversation(ctx, rest, stdout)
	case "watch":
		return runWatch(ctx, rest, stdout, stderr)
	case "pause", "resume", "drain":
		return runSignal(ctx, cmd, rest, stdout)
	case "schedules":
		return runSchedules(ctx, rest, stdout)
	case "versions":
		return runVersions(ctx, rest, stdout)
	case "console":
		return runConsole(ctx, rest, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}

// anyPositional lets parseFlags take any number of positional arguments,
// for a command that counts them itself.
const anyPositional = -1

// parseFlags parses fs from args with flags allowed anywhere, before or after
// the positional arguments, and checks the positional count.
func parseFlags(fs *flag.FlagSet, args []string, positional int, synopsis string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{fmt.Sprintf("%v; usage: %s", err, synopsis)}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if positional != anyPositional && len(pos) != positional {
		return nil, usageError{"usage: " + synopsis}
	}
	return pos, nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
