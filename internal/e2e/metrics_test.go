package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet/internal/testenv"
)

// scrape reads a Prometheus text endpoint.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %s", url, resp.StatusCode, body)
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

// Each failure a series names moves it: a dead letter, an activity fenced
// for a stale tenure, and a node killed under its seats, counted by the
// processes that saw them (workers on metrics.listen, the API on /metrics),
// next to the Temporal SDK's series in the same registry.
func TestMetricsCountTheFailuresTheyName(t *testing.T) {
	org := writeFile(t, "org.yaml", `company: { name: metricco }
profiles:
  local:
    provider: scripted
    rules:
      - { match: '^poison', fail: 'the provider refused this request' }
roles: { clerk: { profile: local } }
seats:
  - { handle: s01, role: clerk }
  - { handle: s02, role: clerk }
`)
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
			v, _ := series(scrape(t, "http://"+listen[id]+"/metrics"), name, labels...)
			total += v
		}
		return total
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
	if got := workers("crewlet_dead_letters_total"); got != deadBefore+1 {
		t.Errorf("crewlet_dead_letters_total across the workers: %v after one dead letter; want %v", got, deadBefore+1)
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
	if got := workers("crewlet_fenced_activities_total"); got <= fencedBefore {
		t.Errorf("crewlet_fenced_activities_total across the workers: %v after a stale tenure's step; want more than %v", got, fencedBefore)
	}

	// A failover: the node holding the seats dies; the survivor claims it
	// and tells its seats.
	victim := c.busiestNode()
	survivorID := "n1"
	if victim.NodeID == "n1" {
		survivorID = "n2"
	}
	survivorURL := "http://" + listen[survivorID] + "/metrics"
	before := scrape(t, survivorURL)
	claimedBefore, _ := series(before, "crewlet_nodes_claimed_total")
	sentBefore, _ := series(before, "crewlet_host_lost_signals_total", `result="sent"`)
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
	after := scrape(t, survivorURL)
	if got, _ := series(after, "crewlet_nodes_claimed_total"); got != claimedBefore+1 {
		t.Errorf("survivor's crewlet_nodes_claimed_total: %v after one node died; want %v", got, claimedBefore+1)
	}
	if got, _ := series(after, "crewlet_host_lost_signals_total", `result="sent"`); got < sentBefore+float64(len(victim.SeatsHeld)) {
		t.Errorf("survivor's host_lost signals sent: %v; want at least %v (one per seat of the dead node)", got, sentBefore+float64(len(victim.SeatsHeld)))
	}
	if got, _ := series(after, "crewlet_node_seats_hosted"); got != 2 {
		t.Errorf("survivor's crewlet_node_seats_hosted: %v; want 2", got)
	}
	if age, ok := series(after, "crewlet_node_presence_age_seconds"); !ok || age > 3 {
		t.Errorf("survivor's crewlet_node_presence_age_seconds: %v (present %v); want under the 3s heartbeat timeout", age, ok)
	}
	for _, name := range []string{"temporal_request_total", "temporal_workflow_task_execution_latency_seconds_count", "go_goroutines"} {
		if _, ok := series(after, name); !ok {
			t.Errorf("survivor's metrics lack %s", name)
		}
	}

	// The API counts what it was asked and the mail it published.
	var text string
	resp, err := http.Get(c.api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text = string(raw)
	if got, _ := series(text, "crewlet_http_requests_total", `route="POST /seats/{handle}/messages"`, `status="202"`); got != 2 {
		t.Errorf("API's messages sent: %v; want 2", got)
	}
	if got, _ := series(text, "crewlet_mail_published_total"); got != 2 {
		t.Errorf("API's crewlet_mail_published_total: %v; want 2", got)
	}
}
