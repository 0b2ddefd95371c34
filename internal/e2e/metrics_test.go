package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
)

// scrape reads a Prometheus text endpoint, with token as its bearer when
// set (the API's /metrics takes one; a worker's metrics listener does
// not), and fails the test where the client library's linter finds a
// problem in what it serves: the Temporal SDK's series as well as
// crewlet's.
func scrape(t *testing.T, url, token string) string {
	t.Helper()
	status, body := getAs(t, url, token)
	if status != http.StatusOK {
		t.Fatalf("scrape %s: %d %s", url, status, body)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("scrape %s: not Prometheus text: %v", url, err)
	}
	for _, p := range problems {
		t.Errorf("scrape %s: %s: %s", url, p.Metric, p.Text)
	}
	return string(body)
}

// series sums the samples of name whose labels hold every one of labels
// ("result=\"sent\""); found says whether there was any.
func series(text, name string, labels ...string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another series whose name starts with this one
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// Each failure a series names moves it, and so does the work around it: a
// dead letter, a tool call, a ticket settled, an activity fenced for a
// stale tenure, and a node killed under its seats, counted by the
// processes that saw them (workers on metrics.listen, the API on /metrics),
// next to the Temporal SDK's series in the same registry.
func TestMetricsCountTheFailuresTheyName(t *testing.T) {
	org := writeFile(t, "org.yaml", fmt.Sprintf(`company: { name: metricco }
profiles:
  local:
    provider: scripted
    rules:
      - { match: '^poison', fail: 'the provider refused this request' }
      - match: '^count'
        tools: [ { name: ledger__read_counter, args: {} } ]
        reply: 'count: {{index .Results 0}}'
roles:
  clerk:
    charter: works as clerk
    profile: local
    mcp: [ { name: ledger, command: [ %q ] } ]
seats:
  - { handle: s01, role: clerk }
  - { handle: s02, role: clerk }
`, toolstest.BuildT(t)))
	c := newCompany(t, org)
	c.setenv("CREWLET_NODES_REBALANCE_INTERVAL=1h")
	c.apiServer()
	listen := map[string]string{"n1": freeAddr(t), "n2": freeAddr(t)}
	nodes := map[string]*proc{"n1": c.workerWithEnv("n1", []string{"CREWLET_METRICS_LISTEN=" + listen["n1"]})}
	c.waitAttached(60 * time.Second)
	nodes["n2"] = c.workerWithEnv("n2", []string{"CREWLET_METRICS_LISTEN=" + listen["n2"]})
	workers := func(name string, labels ...string) float64 {
		total := 0.0
		for id := range nodes {
			v, _ := series(scrape(t, "http://"+listen[id]+"/metrics", ""), name, labels...)
			total += v
		}
		return total
	}
	// reaches waits until the workers' sum of a series is at least want
	// (a step counts just after what the test can see of it), and returns it.
	reaches := func(want float64, name string, labels ...string) float64 {
		t.Helper()
		var got float64
		testenv.Eventually(t, 10*time.Second, name+" counted", func() error {
			if got = workers(name, labels...); got < want {
				return fmt.Errorf("%s%v across the workers: %v; want %v", name, labels, got, want)
			}
			return nil
		})
		return got
	}
	deadBefore, fencedBefore := workers("crewlet_dead_letters_total"), workers("crewlet_fenced_activities_total")

	// A dead letter: the provider refuses the request as bad.
	poisoned := c.send("s01", "poison")
	testenv.Eventually(t, 60*time.Second, "the poisoned message dead-lettered", func() error {
		var dls []struct {
			Message struct {
				EventID string `json:"event_id"`
			} `json:"message"`
		}
		if err := c.call(http.MethodGet, "/deadletters", nil, &dls); err != nil {
			return err
		}
		for _, d := range dls {
			if d.Message.EventID == poisoned.EventID {
				return nil
			}
		}
		return fmt.Errorf("not among %d dead letters", len(dls))
	})
	if got := reaches(deadBefore+1, "crewlet_dead_letters_total"); got != deadBefore+1 {
		t.Errorf("crewlet_dead_letters_total across the workers: %v after one dead letter; want %v", got, deadBefore+1)
	}

	// A turn with a tool call, and a ticket served and settled.
	if reply := c.waitReply(c.send("s01", "count"), 60*time.Second); !strings.HasPrefix(reply, "count: ") {
		t.Fatalf("reply to count: %q; want its tool call's result", reply)
	}
	var ticket crewlet.Ticket
	if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "s02", Task: "a task", Wait: "60s"}, &ticket); err != nil {
		t.Fatal(err)
	}
	if ticket.Phase != crewlet.TicketDone {
		t.Fatalf("ticket %s: phase %s after its wait; want done", ticket.ID, ticket.Phase)
	}
	if got := reaches(1, "crewlet_tool_calls_total", `server="ledger"`, `outcome="ok"`); got != 1 {
		t.Errorf("crewlet_tool_calls_total{server=ledger,outcome=ok} across the workers: %v after one call; want 1", got)
	}
	reaches(2, "crewlet_turns_finished_total", `outcome="done"`)
	// Both turns began; their three entries (poison, count, the ticket's
	// request) were read, and the two answered ones acked.
	reaches(2, "crewlet_turns_started_total")
	reaches(3, "crewlet_mail_read_total")
	reaches(2, "crewlet_mail_acked_total")
	if got := reaches(1, "crewlet_tickets_ended_total", `phase="done"`); got != 1 {
		t.Errorf("crewlet_tickets_ended_total{phase=done} across the workers: %v after one settled ticket; want 1", got)
	}

	// A fenced activity: another tenure of s02 began (its epoch moved on
	// behind the seat's back), so the seat's next step is refused as stale
	// and the seat re-establishes, then answers.
	conn, err := pgx.Connect(context.Background(), c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE seats SET epoch = epoch + 1 WHERE handle = 's02'`); err != nil {
		t.Fatal(err)
	}
	if reply := c.waitReply(c.send("s02", "hello"), 60*time.Second); reply == "" {
		t.Fatal("s02 never answered after its tenure was fenced")
	}
	reaches(fencedBefore+1, "crewlet_fenced_activities_total")

	// A failover: the node holding the seats dies; the survivor claims it
	// and tells its seats.
	victim := c.busiestNode()
	survivorID := "n1"
	if victim.NodeID == "n1" {
		survivorID = "n2"
	}
	survivorURL := "http://" + listen[survivorID] + "/metrics"
	before := scrape(t, survivorURL, "")
	claimedBefore, _ := series(before, "crewlet_nodes_claimed_total")
	sentBefore, _ := series(before, "crewlet_host_lost_signals_total", `result="sent"`)
	establishedBefore, _ := series(before, "crewlet_seat_establish_seconds_count")
	nodes[victim.NodeID].kill(t)
	delete(nodes, victim.NodeID)
	survivor := c.liveIncarnation(survivorID)
	testenv.Eventually(t, 30*time.Second, "every seat on the survivor", func() error {
		for h, st := range c.seatMap() {
			if st.Kind == "agent" && st.Node != survivor {
				return fmt.Errorf("%s on %s", h, st.Node)
			}
		}
		return nil
	})
	var after string
	// A seat's row names the survivor once it is placed there, a moment
	// before the survivor's Attach hosts it: wait for both seats hosted.
	testenv.Eventually(t, 10*time.Second, "the survivor's claim, signals and seats counted", func() error {
		after = scrape(t, survivorURL, "")
		claimed, _ := series(after, "crewlet_nodes_claimed_total")
		sent, _ := series(after, "crewlet_host_lost_signals_total", `result="sent"`)
		hosted, _ := series(after, "crewlet_node_seats_hosted")
		// The moved seats' workflows, now run by the survivor alone, time
		// their establish there.
		established, _ := series(after, "crewlet_seat_establish_seconds_count")
		if claimed < claimedBefore+1 || sent < sentBefore+float64(len(victim.SeatsHeld)) || hosted < 2 ||
			established < establishedBefore+float64(len(victim.SeatsHeld)) {
			return fmt.Errorf("claimed %v (before %v), host_lost sent %v (before %v) for %d seats, %v seats hosted, %v establishes timed (before %v)",
				claimed, claimedBefore, sent, sentBefore, len(victim.SeatsHeld), hosted, established, establishedBefore)
		}
		return nil
	})
	if got, _ := series(after, "crewlet_nodes_claimed_total"); got != claimedBefore+1 {
		t.Errorf("survivor's crewlet_nodes_claimed_total: %v after one node died; want %v", got, claimedBefore+1)
	}
	if got, _ := series(after, "crewlet_node_seats_hosted"); got != 2 {
		t.Errorf("survivor's crewlet_node_seats_hosted: %v; want 2", got)
	}
	if age, ok := series(after, "crewlet_node_presence_age_seconds"); !ok || age > 3 {
		t.Errorf("survivor's crewlet_node_presence_age_seconds: %v (present %v); want under the 3s heartbeat timeout", age, ok)
	}
	// The SDK records a workflow task once it is answered, which may be a
	// moment after the seat it placed is hosted.
	testenv.Eventually(t, 10*time.Second, "the SDK's and the runtime's series on the survivor", func() error {
		text := scrape(t, survivorURL, "")
		for _, name := range []string{"temporal_request_total", "temporal_workflow_task_execution_latency_seconds_count", "go_goroutines"} {
			if _, ok := series(text, name); !ok {
				return fmt.Errorf("survivor's metrics lack %s", name)
			}
		}
		return nil
	})

	// The API counts what it was asked and the mail it published.
	text := scrape(t, c.api+"/metrics", c.bearer())
	if got, _ := series(text, "crewlet_http_requests_total", `route="POST /seats/{handle}/messages"`, `status="202"`); got != 3 {
		t.Errorf("API's messages sent: %v; want 3", got)
	}
	// The three messages and the ticket's request.
	if got, _ := series(text, "crewlet_mail_published_total"); got != 4 {
		t.Errorf("API's crewlet_mail_published_total: %v; want 4", got)
	}
	if got, _ := series(text, "crewlet_tickets_opened_total"); got != 1 {
		t.Errorf("API's crewlet_tickets_opened_total: %v; want 1", got)
	}
	// The API shows the company as it stands: every agent seat under one
	// status, and each seat's mailbox.
	if got, _ := series(text, "crewlet_seats"); got != 2 {
		t.Errorf("API's crewlet_seats summed over the statuses: %v; want the 2 agent seats", got)
	}
	for _, name := range []string{"crewlet_mailbox_waiting", "crewlet_mailbox_lag_seconds"} {
		for _, seat := range []string{"s01", "s02"} {
			if _, ok := series(text, name, `seat="`+seat+`"`); !ok {
				t.Errorf("API's metrics lack %s for %s", name, seat)
			}
		}
	}
	for _, name := range []string{"crewlet_tickets_open", "crewlet_credentials_quarantined", "crewlet_credentials_cooling"} {
		if _, ok := series(text, name); !ok {
			t.Errorf("API's metrics lack %s", name)
		}
	}
}
