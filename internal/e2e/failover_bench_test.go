package e2e

import (
	"net/http"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testhook"
)

// BenchmarkFailover measures, with the default timeouts, the time from
// killing the worker that holds the most seats until each seat it held is
// re-established on a survivor (a new tenure, idle there), and until each
// answers the message it was sent right after the kill. Each run: 30 seats
// on 3 worker processes. It does failoverRuns kills whatever b.N is; run
// it with
//
//	go test ./internal/e2e -run '^$' -bench Failover -benchtime 1x
func BenchmarkFailover(b *testing.B) {
	const failoverRuns = 5
	var moves, answers []time.Duration
	for run := 0; run < failoverRuns; run++ {
		m, a := failoverOnce(b)
		moves, answers = append(moves, m...), append(answers, a...)
	}
	for _, d := range []struct {
		name string
		all  []time.Duration
	}{{"", moves}, {"answer-", answers}} {
		sort.Slice(d.all, func(i, j int) bool { return d.all[i] < d.all[j] })
		p50, max := d.all[len(d.all)/2], d.all[len(d.all)-1]
		b.ReportMetric(p50.Seconds(), d.name+"p50-s")
		b.ReportMetric(max.Seconds(), d.name+"max-s")
		b.Logf("failover over %d runs, %d moved seats, kill to %s: p50 %s, max %s", failoverRuns, len(d.all),
			map[string]string{"": "new tenure", "answer-": "answer"}[d.name], p50.Round(time.Millisecond), max.Round(time.Millisecond))
	}
}

// failoverOnce kills one node of a fresh 3-node company and returns, for
// each seat it held, how long after the kill the seat had a new tenure, and
// how long until it answered the message sent right after the kill.
func failoverOnce(b *testing.B) (moved, answered []time.Duration) {
	c := newCompany(b, fleetOrg(b, 30, 100*time.Millisecond))
	defer c.stopAll()
	probe := filepath.Join(b.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env())
	c.apiServer()
	nodes := map[string]*proc{"n1": c.worker("n1"), "n2": c.worker("n2"), "n3": c.worker("n3")}
	c.waitAttached(60 * time.Second)
	victim := c.busiestNode()
	killedAt := time.Now()
	nodes[victim.NodeID].kill(b)
	sent := map[string]crewlet.Message{}
	for _, h := range victim.SeatsHeld {
		var msg crewlet.Message
		if err := c.call(http.MethodPost, "/seats/"+h+"/messages", api.SendMessageRequest{Text: "after the kill"}, &msg); err != nil {
			b.Fatal(err)
		}
		sent[h] = msg
	}
	deadline := time.Now().Add(60 * time.Second)
	moves, answers := map[string]time.Duration{}, map[string]time.Duration{}
	for len(moves) < len(sent) || len(answers) < len(sent) {
		for seat, msg := range sent {
			if _, done := answers[seat]; !done && len(c.repliesTo(msg)) > 0 {
				answers[seat] = time.Since(killedAt)
			}
		}
		for seat := range sent {
			if _, done := moves[seat]; done {
				continue
			}
			if st := c.state(seat); st.Node != "" && st.Node != victim.Incarnation && st.Status == crewlet.StatusIdle {
				moves[seat] = time.Since(killedAt)
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("60s after the kill %d of %d seats re-established on a survivor and %d answered", len(moves), len(sent), len(answers))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every moved seat ran its turn (under either tenure: a turn without
	// tool calls needs no host), and exactly once.
	runs := readProbe(b, probe)
	for seat := range sent {
		if len(runs[seat]) == 0 {
			b.Fatalf("seat %s answered without a turn in the probe", seat)
		}
	}
	for _, d := range moves {
		moved = append(moved, d)
	}
	for _, d := range answers {
		answered = append(answered, d)
	}
	return moved, answered
}
