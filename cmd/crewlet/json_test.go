package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// jsonOrg is a company with a human seat, an agent seat and a schedule,
// served by `crewlet api` on addr with the admin token in $CLIJSON_TOKEN.
const jsonOrg = `
company: { name: %s, timezone: UTC }
temporal: { task_queue: %s }
api: { listen: "%s" }
auth: { tokens: [ { name: ops, role: admin, token_env: CLIJSON_TOKEN } ] }
mailbox: { key_prefix: %s }
profiles:
  local: { provider: scripted }
roles:
  engineer: { charter: builds, profile: local }
seats:
  - { handle: alice, kind: human }
  - { handle: cto, role: engineer }
schedules:
  - { name: nightly, cron: "0 3 * * *", timezone: UTC, to: cto, text: "nightly report" }
`

const jsonToken = "clijson-admin-token-0123456789abcdef"

// Every read command's -o json is the JSON its route answers for the same
// request, against `crewlet api` on the dev stack: a script may hold it to
// the REST API's shape.
func TestReadCommandsPrintTheAPIsJSON(t *testing.T) {
	stack := testenv.Stack(t)
	suffix := testenv.Suffix()
	dbURL := testenv.MigratedDatabase(t)
	t.Setenv("CREWLET_PG_URL", dbURL)
	t.Setenv("CREWLET_TEMPORAL_ADDRESS", stack.Temporal)
	t.Setenv("CLIJSON_TOKEN", jsonToken)
	addr := freeAddr(t)
	org := filepath.Join(t.TempDir(), "org.yaml")
	doc := fmt.Sprintf(jsonOrg, "clijson"+suffix, "clijson"+suffix, addr, "clijson"+suffix)
	if err := os.WriteFile(org, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	var serveErr error
	var log testenv.Log
	go func() {
		defer close(served)
		serveErr = run(ctx, []string{"api", "--config", org}, io.Discard, &log)
	}()
	t.Cleanup(func() {
		stop()
		<-served
	})
	a := jsonAPI{ctx: ctx, base: "http://" + addr}
	testenv.Eventually(t, time.Minute, "crewlet api ready", func() error {
		select {
		case <-served:
			t.Fatalf("api ended: %v\n%s", serveErr, log.String())
		default:
		}
		resp, err := http.Get(a.base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: HTTP %d", resp.StatusCode)
		}
		return nil
	})
	seed := seedReads(t, ctx, testenv.Store(t, dbURL))

	reads := []struct {
		args  []string
		route string
	}{
		{[]string{"seats", "ls"}, "/seats"},
		{[]string{"seats", "show", "cto"}, "/seats/cto"},
		{[]string{"seats", "events", "cto"}, "/seats/cto/events"},
		{[]string{"seats", "usage", "cto"}, "/seats/cto/usage"},
		{[]string{"seats", "turns", "cto", "--limit", "5"}, "/seats/cto/turns?limit=5"},
		{[]string{"seats", "memory", "cto"}, "/seats/cto/memory?limit=20"},
		{[]string{"turn", "show", "turn/cto/wk1"}, "/turns/cto/wk1"},
		{[]string{"inbox", "alice"}, "/seats/alice/inbox?limit=20"},
		{[]string{"conversation", "conv-1"}, "/conversations/conv-1?limit=1000&after=0"},
		{[]string{"tickets", "ls"}, "/tickets?limit=50"},
		{[]string{"tickets", "show", seed.ticket}, "/tickets/" + seed.ticket},
		{[]string{"tickets", "cost", seed.ticket}, "/tickets/" + seed.ticket},
		{[]string{"costs"}, "/costs?by=seat"},
		{[]string{"costs", "--by", "day", "--since", "2026-11-01", "--until", "2026-11-30"}, "/costs?by=day&since=2026-11-01&until=2026-11-30"},
		{[]string{"approvals", "ls", "--status", "all"}, "/approvals?limit=50&status=all"},
		{[]string{"audit", "--limit", "3"}, "/audit?limit=3"},
		{[]string{"deadletters", "ls"}, "/deadletters"},
		{[]string{"profiles"}, "/profiles"},
		{[]string{"prices", "show", "gpt-4o-mini", "--input-tokens", "2000"}, "/prices?cached_tokens=0&input_tokens=2000&model=gpt-4o-mini&output_tokens=1000"},
		{[]string{"pools"}, "/pools"},
		{[]string{"nodes", "ls", "--all"}, "/nodes?all=true"},
		{[]string{"schedules", "ls"}, "/schedules"},
		{[]string{"schedules", "show", "nightly"}, "/schedules/nightly?limit=20"},
		{[]string{"config", "show"}, "/config"},
		{[]string{"eval", "dataset", "list"}, "/evals/datasets"},
		{[]string{"eval", "dataset", "show", "picked"}, "/evals/datasets/picked"},
		{[]string{"eval", "runs"}, "/evals/runs"},
		{[]string{"eval", "show", seed.run}, "/evals/runs/" + seed.run},
		{[]string{"eval", "show", seed.run, "--json"}, "/evals/runs/" + seed.run},
	}
	covered := map[string]bool{}
	for _, r := range reads {
		covered["crewlet "+strings.Join(r.args[:commandWords(r.args)], " ")] = true
		t.Run(strings.Join(r.args, " "), func(t *testing.T) {
			args := append(r.args, "--api", a.base, "--token", jsonToken)
			if !slices.Contains(r.args, "--json") {
				args = append(args, "-o", "json")
			}
			var out bytes.Buffer
			if err := run(ctx, args, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			var got any
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("-o json printed what is not JSON (%v):\n%s", err, out.String())
			}
			if want := a.get(t, r.route); !reflect.DeepEqual(got, want) {
				t.Fatalf("-o json printed:\n%s\nGET %s answers:\n%s", out.String(), r.route, mustJSON(want))
			}
		})
	}
	// The policy what-if computes its report by POST, calling no model and
	// writing nothing: the same request answers the same.
	t.Run("replay --policy", func(t *testing.T) {
		var out bytes.Buffer
		args := []string{"replay", "--policy", org, "--dataset", "picked", "-o", "json", "--api", a.base, "--token", jsonToken}
		if err := run(ctx, args, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("-o json printed what is not JSON (%v):\n%s", err, out.String())
		}
		want := a.post(t, "/evals/policy", replay.PolicyRequest{Org: doc, Dataset: "picked"})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("-o json printed:\n%s\nPOST /evals/policy answers:\n%s", out.String(), mustJSON(want))
		}
	})
	// A read added to the tree is held to its route here too.
	for _, cmd := range commands(t) {
		if cmd.Flags().Lookup("output") != nil && !covered[cmd.CommandPath()] && !jsonNotByGET[cmd.CommandPath()] {
			t.Errorf("%s takes -o json, and this test does not hold it to its route", cmd.CommandPath())
		}
	}
}

// jsonNotByGET are the reads with -o json that no GET answers: a replay's
// report is what a POST computes, by running a model (its --policy form,
// which runs none, is held to POST /evals/policy above); watch prints each
// event of a stream as one line of JSON.
var jsonNotByGET = map[string]bool{"crewlet replay": true, "crewlet watch": true}

// commandWords is how many of args name the command, before its
// arguments.
func commandWords(args []string) int {
	root := newCLI(io.Discard, io.Discard).root()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		return 0
	}
	return len(args) - len(rest)
}

// jsonAPI is the API the test's `crewlet api` serves.
type jsonAPI struct {
	ctx  context.Context
	base string
}

// get is the JSON the API answers to GET path.
func (a jsonAPI) get(t *testing.T, path string) any {
	t.Helper()
	return a.answer(t, http.MethodGet, path, nil)
}

// post is the JSON the API answers to POST path with body.
func (a jsonAPI) post(t *testing.T, path string, body any) any {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return a.answer(t, http.MethodPost, path, bytes.NewReader(b))
}

func (a jsonAPI) answer(t *testing.T, method, path string, body io.Reader) any {
	t.Helper()
	req, err := http.NewRequestWithContext(a.ctx, method, a.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+jsonToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d, %v", method, path, resp.StatusCode, err)
	}
	return v
}

func mustJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// seeded names what seedReads wrote.
type seeded struct{ ticket, run string }

// seedReads gives each read something to answer: a finished turn with its
// rounds, memory, mail in a conversation, a ticket, an approval, a seat
// event, a dataset and an eval run.
func seedReads(t *testing.T, ctx context.Context, st *store.Store) seeded {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
	mail := crewlet.Message{EventID: "ev-wk1", Type: crewlet.MessageChat, From: "alice", To: "cto", Body: "question", Conversation: "conv-1", SentAt: now}
	if _, err := st.OpenTurn(ctx, wire.TurnRow{
		Seat: "cto", WorkKey: "wk1", TurnID: crewlet.TurnWorkflowID("cto", "wk1"), Epoch: 1, MaxRounds: 8,
		Mail: []crewlet.Message{mail}, Threads: []int{0}, StartedAt: now.Add(-time.Minute),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendTurnMessage(ctx, "cto", crewlet.ThreadKey("ev-wk1"), wire.TurnMessage{Thread: 0, Key: "user", Message: crewlet.ChatMessage{Role: "user", Content: "question"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordRound(ctx, wire.RoundRow{Seat: "cto", WorkKey: crewlet.ThreadKey("ev-wk1"), Round: 1, Profile: "local", InputTokens: 40, OutputTokens: 5, RecordedAt: now}, time.UTC); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishTurn(ctx, "cto", "wk1", string(crewlet.TurnDone), "", "", 1); err != nil {
		t.Fatal(err)
	}
	reply := crewlet.Message{EventID: "ev-re", Type: crewlet.MessageChat, From: "cto", To: "alice", Body: "answer", Conversation: "conv-1", InReplyTo: "ev-wk1", SentAt: now}
	if err := st.AppendMessages(ctx, "wk1", mail, reply); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteDiary(ctx, "cto", "launch moved"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordSeatEvent(ctx, "cto", "turn_trigger_skipped", "ev-wk1", map[string]any{"reason": "paused"}); err != nil {
		t.Fatal(err)
	}
	ticket, _, err := st.CreateTicket(ctx, "clijson-1", crewlet.Ticket{From: "alice", To: "cto", Task: "review the plan", Conversation: "conv-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateApproval(ctx, crewlet.Approval{ID: "ap-1", Handle: "cto", TurnID: "turn/cto/wk1", CallKey: "wk1/1/0", Tool: "deploy", Args: `{"env":"prod"}`, Role: "engineer", Policy: "deploys", Approvers: []string{"alice"}, OnTimeout: "deny", Epoch: 1, Status: "pending", Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDataset(ctx, wire.Dataset{Name: "picked", Selector: wire.DatasetSelector{Turns: []string{"turn/cto/wk1"}},
		CreatedBy: "ops", Turns: []string{"turn/cto/wk1"}}); err != nil {
		t.Fatal(err)
	}
	run, err := st.CreateEvalRun(ctx, wire.EvalRun{ID: "run-1", Dataset: "picked", Change: json.RawMessage(`{"profile":"local"}`), Checks: json.RawMessage(`[]`), Concurrency: 1, Principal: "ops", Status: "running"})
	if err != nil {
		t.Fatal(err)
	}
	return seeded{ticket: ticket.ID, run: run.ID}
}
