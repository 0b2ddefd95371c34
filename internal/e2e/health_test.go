package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/health"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
)

// healthOrg gives each seat a real way into a health state: cto delegates
// and waits, reviewer asks the person who opened its ticket and waits, eng and quiet are paused, cheap has a budget of one token a
// day, slow's model takes 6s a round, flaky's provider refuses every turn,
// gpu needs a label no node has. The duty runs every second.
const healthOrg = `company: { name: healthco }
nodes: { reconcile_interval: 1h }
health:
  interval: 1s
  gone_after: 1s
  turn_overrun: 3s
  backlog: 2
  failing_turns: 2
  dead_letters: 1
  notify:
    - { url: '%s', states: [gone, paused], headers_from: { x-hook-token: CREWLET_TEST_HOOK_TOKEN } }
profiles:
  lead:
    provider: scripted
    rules:
      - match: '^get a fix for (.*)'
        tools: [ { name: delegate, args: { to: eng, task: 'please fix {{index .Groups 1}}', wait: true } } ]
        reply: 'eng says: {{.Last}}'
  plain: { provider: scripted }
  slow: { provider: scripted, delay: 6s }
  broken:
    provider: scripted
    rules:
      - { match: '.*', fail: 'the provider refuses this' }
  asks:
    provider: scripted
    rules:
      - match: '^please review (.*)'
        tools: [ { name: ask, args: { question: 'which part of {{index .Groups 1}}?' } } ]
        reply: 'Reviewed. {{.Last}}'
roles:
  lead: { charter: leads and delegates, profile: lead }
  engineer: { charter: fixes things, profile: plain }
  thrifty: { charter: spends little, profile: plain, budget: { tokens_per_day: 1 } }
  slowpoke: { charter: thinks long, profile: slow }
  broken: { charter: fails, profile: broken }
  gpu: { charter: needs a gpu, profile: plain, placement: { labels: { gpu: 'yes' } } }
  asker: { charter: asks before it acts, profile: asks }
seats:
  - { handle: cto, role: lead }
  - { handle: eng, role: engineer }
  - { handle: idle, role: engineer }
  - { handle: quiet, role: engineer }
  - { handle: cheap, role: thrifty }
  - { handle: slow, role: slowpoke }
  - { handle: flaky, role: broken }
  - { handle: gpu, role: gpu }
  - { handle: reviewer, role: asker }
  - { handle: alice, kind: human }
`

// hookServer records the health notifications posted to it.
type hookServer struct {
	*httptest.Server
	mu    sync.Mutex
	notes []health.Notification
	bad   []string
}

func newHookServer(t *testing.T, token string) *hookServer {
	h := &hookServer{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var n health.Notification
		h.mu.Lock()
		defer h.mu.Unlock()
		if err := json.Unmarshal(body, &n); err != nil || r.Header.Get("X-Hook-Token") != token {
			h.bad = append(h.bad, fmt.Sprintf("token %q body %s", r.Header.Get("X-Hook-Token"), body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.notes = append(h.notes, n)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookServer) received() ([]health.Notification, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]health.Notification(nil), h.notes...), append([]string(nil), h.bad...)
}

// seatHealth returns GET /seats keyed by handle.
func (c *company) seatHealth() map[string]api.SeatSummary {
	out := map[string]api.SeatSummary{}
	var seats []api.SeatSummary
	if err := c.call(http.MethodGet, "/seats", nil, &seats); err != nil {
		return out
	}
	for _, s := range seats {
		out[s.Handle] = s
	}
	return out
}

// waitHealth waits until GET /seats shows the seat in state and returns
// the cause shown.
func (c *company) waitHealth(seat string, state crewlet.SeatHealth, timeout time.Duration) string {
	c.t.Helper()
	var cause string
	testenv.Eventually(c.t, timeout, seat+" "+string(state), func() error {
		s := c.seatHealth()[seat]
		if s.Health != state {
			return fmt.Errorf("%s is %s (%s)", seat, s.Health, s.HealthCause)
		}
		cause = s.HealthCause
		return nil
	})
	c.t.Logf("%s: %s — %s", seat, state, cause)
	return cause
}

// Every state the duty can see from a live company is reached by its real
// cause, each transition is recorded, shown and logged once, a gone seat
// fails the ticket a waiting turn holds on it, and the webhook gets the
// transitions it asked for.
func TestSeatHealthStatesFromRealCauses(t *testing.T) {
	const token = "hook-secret"
	hook := newHookServer(t, token)
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(healthOrg, hook.URL)))
	c.setenv("CREWLET_TEST_HOOK_TOKEN=" + token)
	c.apiServer()
	w := c.worker("n1")
	for _, s := range []string{"cto", "eng", "idle", "quiet", "cheap", "slow", "flaky", "reviewer"} {
		c.waitHealth(s, crewlet.HealthOK, 60*time.Second)
	}

	// unplaceable: no node has the label gpu's role asks for.
	if cause := c.waitHealth("gpu", crewlet.HealthUnplaceable, 30*time.Second); !strings.Contains(cause, "placement") {
		t.Errorf("gpu's cause %q; want it to name the placement", cause)
	}

	// paused, through the API.
	for _, s := range []string{"eng", "quiet"} {
		if err := c.call(http.MethodPost, "/seats/"+s+"/pause", crewlet.PauseRequest{Reason: "health test"}, nil); err != nil {
			t.Fatalf("pause %s: %v", s, err)
		}
		c.waitHealth(s, crewlet.HealthPaused, 30*time.Second)
	}

	// backlog: three messages wait behind the pause (health.backlog 2).
	for i := range 3 {
		c.send("quiet", fmt.Sprintf("hello %d", i))
	}
	if cause := c.waitHealth("quiet", crewlet.HealthBacklog, 30*time.Second); !strings.Contains(cause, "3 messages waiting") || !strings.Contains(cause, "also: paused") {
		t.Errorf("quiet's cause %q; want the backlog, and the pause behind it", cause)
	}

	// held: a turn spends more than cheap's one token a day.
	c.waitReply(c.send("cheap", "hello"), 30*time.Second)
	if cause := c.waitHealth("cheap", crewlet.HealthHeld, 30*time.Second); !strings.Contains(cause, "seat day budget is spent") {
		t.Errorf("cheap's cause %q; want its day budget", cause)
	}

	// turn_overrunning: slow's turn takes 6s, past health.turn_overrun 3s;
	// then it answers and is ok again.
	slowMsg := c.send("slow", "take your time")
	c.waitHealth("slow", crewlet.HealthOverrunning, 30*time.Second)
	c.waitReply(slowMsg, 30*time.Second)
	c.waitHealth("slow", crewlet.HealthOK, 30*time.Second)

	// dead_letters_rising, then failing: the provider refuses flaky's
	// turns, each trigger is dead-lettered; one is enough for the first
	// (health.dead_letters 1), two failed turns in a row for the second.
	c.send("flaky", "first")
	c.waitHealth("flaky", crewlet.HealthDeadLetters, 30*time.Second)
	c.send("flaky", "second")
	if cause := c.waitHealth("flaky", crewlet.HealthFailing, 30*time.Second); !strings.Contains(cause, "last 2 turns failed") {
		t.Errorf("flaky's cause %q; want its failed turns", cause)
	}

	// waiting: cto delegates to the paused eng and waits on the ticket.
	conv := "health-" + testenv.Suffix()
	ask := c.send("cto", "get a fix for the build", inConversation(conv))
	if cause := c.waitHealth("cto", crewlet.HealthWaiting, 30*time.Second); !strings.Contains(cause, "(seat eng)") {
		t.Errorf("cto's cause %q; want the ticket it waits on, to eng", cause)
	}

	// gone: eng's workflow is terminated in Temporal. The ticket cto waits
	// on fails with the reason, and cto's turn goes on with it.
	if err := c.temporal.TerminateWorkflow(t.Context(), crewlet.SeatWorkflowID("eng"), "", "health test"); err != nil {
		t.Fatalf("terminate eng: %v", err)
	}
	c.waitHealth("eng", crewlet.HealthGone, 30*time.Second)
	reply := c.waitReply(ask, 30*time.Second)
	tickets := c.tickets("from=cto")
	if len(tickets) != 1 || tickets[0].Phase != crewlet.TicketFailed || !strings.HasPrefix(tickets[0].Reason, "seat eng is gone: no seat workflow runs") {
		t.Fatalf("cto's tickets %+v; want one failed because eng is gone", tickets)
	}
	if !strings.Contains(reply, "failed") {
		t.Errorf("cto's answer %q; want it to carry the failed ticket", reply)
	}
	c.waitHealth("cto", crewlet.HealthOK, 30*time.Second)

	// waiting on a person: alice opens a ticket to reviewer, whose turn
	// asks her a question and waits for the answer.
	if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "reviewer", Task: "please review the plan", From: "alice"}, nil); err != nil {
		t.Fatalf("open a ticket for reviewer: %v", err)
	}
	if cause := c.waitHealth("reviewer", crewlet.HealthWaiting, 30*time.Second); !strings.Contains(cause, "(person alice)") {
		t.Errorf("reviewer's cause %q; want the ticket it waits on, from alice", cause)
	}

	// Shown by the CLI and the gauge.
	testenv.Eventually(t, 10*time.Second, "seats ls shows health", func() error {
		out, err := c.cli("seats", "ls")
		if err != nil || !lineHas(out, "eng", "gone") || !lineHas(out, "quiet", "paused", "backlog") || !lineHas(out, "gpu", "unplaceable") {
			return fmt.Errorf("crewlet seats ls: %v\n%s", err, out)
		}
		return nil
	})
	testenv.Eventually(t, 40*time.Second, "gauge of gone seats", func() error {
		if v, ok := series(scrape(t, c.api+"/metrics", c.bearer()), "crewlet_seats_health", `state="gone"`); !ok || v != 1 {
			return fmt.Errorf("crewlet_seats_health{state=\"gone\"} = %v (found %v); want 1", v, ok)
		}
		return nil
	})

	// Each recorded transition is logged once, in order.
	logged := regexp.MustCompile(`msg=seat_health .*?seat=(\S+) from=(\S+) to=(\S+)`)
	perSeat := map[string][]string{}
	for _, m := range logged.FindAllStringSubmatch(w.out.String(), -1) {
		perSeat[m[1]] = append(perSeat[m[1]], m[2]+"→"+m[3])
	}
	for _, seat := range []string{"cto", "eng", "idle", "quiet", "cheap", "slow", "flaky", "gpu", "reviewer"} {
		var d api.SeatDetail
		if err := c.call(http.MethodGet, "/seats/"+seat, nil, &d); err != nil {
			t.Fatalf("GET /seats/%s: %v", seat, err)
		}
		var recorded []string
		for i := len(d.HealthTransitions) - 1; i >= 0; i-- {
			recorded = append(recorded, string(d.HealthTransitions[i].From)+"→"+string(d.HealthTransitions[i].To))
		}
		if strings.Join(recorded, " ") != strings.Join(perSeat[seat], " ") {
			t.Errorf("%s: recorded %v, logged %v; want each logged once", seat, recorded, perSeat[seat])
		}
		if d.Health == nil || len(recorded) == 0 {
			t.Errorf("%s: GET /seats/%s has health %+v and no transitions", seat, seat, d.Health)
		}
		t.Logf("%s: %s", seat, strings.Join(recorded, ", "))
	}

	// The webhook got the transitions into and out of paused and gone,
	// with the header from the environment.
	testenv.Eventually(t, 20*time.Second, "webhook notified", func() error {
		notes, bad := hook.received()
		if len(bad) > 0 {
			return fmt.Errorf("bad posts: %v", bad)
		}
		var got []string
		for _, n := range notes {
			if n.Company != "healthco" {
				return fmt.Errorf("notification %+v; want company healthco", n)
			}
			got = append(got, n.Seat+":"+string(n.From)+"→"+string(n.To))
		}
		for _, want := range []string{"eng:ok→paused", "quiet:ok→paused", "quiet:paused→backlog", "eng:paused→gone"} {
			if !strings.Contains(strings.Join(got, " "), want) {
				return fmt.Errorf("notifications %v lack %s", got, want)
			}
		}
		for _, g := range got {
			if !strings.Contains(g, "paused") && !strings.Contains(g, "gone") {
				return fmt.Errorf("notification %s is of no state the hook asked for", g)
			}
		}
		return nil
	})
}

// establishing_too_long: a node full at its capacity cannot take a second
// seat (no placement label is missing, so it is not unplaceable); the seat
// establishes past health.establishing_after until a second node comes.
func TestSeatHealthEstablishingTooLongOnAFullNode(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", `company: { name: fullco }
health: { interval: 1s, establishing_after: 2s }
profiles: { local: { provider: scripted } }
roles: { eng: { charter: works, profile: local } }
seats:
  - { handle: a, role: eng }
  - { handle: b, role: eng }
`))
	c.apiServer()
	c.worker("n1", "--capacity", "1")
	var waiting string
	testenv.Eventually(t, 60*time.Second, "one seat ok, the other establishing too long", func() error {
		seats := c.seatHealth()
		a, b := seats["a"], seats["b"]
		switch {
		case a.Health == crewlet.HealthOK && b.Health == crewlet.HealthEstablishing:
			waiting = "b"
		case b.Health == crewlet.HealthOK && a.Health == crewlet.HealthEstablishing:
			waiting = "a"
		default:
			return fmt.Errorf("a is %s (%s), b is %s (%s)", a.Health, a.HealthCause, b.Health, b.HealthCause)
		}
		return nil
	})
	t.Logf("%s: %s — %s", waiting, crewlet.HealthEstablishing, c.seatHealth()[waiting].HealthCause)
	c.worker("n2")
	c.waitHealth(waiting, crewlet.HealthOK, 60*time.Second)
}

// unproven_teardown: a seat drained from a node whose MCP server's stop
// cannot be proven (the unstoppable_mcp test hook: the process is killed,
// its teardown still fails) stays on the node, which reports the teardown
// unproven in its heartbeat; the duty shows it, and the seat stays there.
func TestSeatHealthUnprovenTeardown(t *testing.T) {
	bin := toolstest.BuildT(t)
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(`company: { name: stuckco }
health: { interval: 1s }
profiles: { local: { provider: scripted } }
roles:
  eng:
    charter: works
    profile: local
    mcp: [ { name: stubborn, command: [ %q ] } ]
seats:
  - { handle: tooled, role: eng }
`, bin)))
	c.apiServer()
	c.workerWithEnv("n1", []string{testhook.Hooks{UnstoppableMCP: "stubborn"}.Env()})
	c.waitAttached(30 * time.Second)
	c.waitHealth("tooled", crewlet.HealthOK, 20*time.Second)
	if err := c.call(http.MethodPost, "/seats/tooled/drain", crewlet.DrainRequest{Reason: "test", By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	cause := c.waitHealth("tooled", crewlet.HealthUnprovenTeardown, 30*time.Second)
	if !strings.Contains(cause, "node n1") {
		t.Fatalf("unproven cause %q does not name the node", cause)
	}
}
