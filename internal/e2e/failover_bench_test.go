package e2e

import (
	"net/http"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
)

// BenchmarkFailover measures, with the default timeouts, the time from
// killing the worker that holds the most seats until each seat it held is
// re-established on a survivor (a new tenure, idle there). Each run: 30
// seats on 3 worker processes; right after the kill every moved seat is sent
// a message, and each must answer it. It does failoverRuns
// kills whatever b.N is; run it with
//
//	go test ./internal/e2e -run '^$' -bench Failover -benchtime 1x
func BenchmarkFailover(b *testing.B) {
	const failoverRuns = 5
	var all []time.Duration
	for run := 0; run < failoverRuns; run++ {
		all = append(all, failoverOnce(b)...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	p50, max := all[len(all)/2], all[len(all)-1]
	b.ReportMetric(p50.Seconds(), "p50-s")
	b.ReportMetric(max.Seconds(), "max-s")
	b.Logf("failover over %d runs, %d moved seats: p50 %s, max %s",
		failoverRuns, len(all), p50.Round(time.Millisecond), max.Round(time.Millisecond))
}

// failoverOnce kills one node of a fresh 3-node company and returns, for
// each seat it held, how long after the kill the seat had a new tenure.
func failoverOnce(b *testing.B) []time.Duration {
	c := newCompany(b, fleetOrg(b, 30, 100*time.Millisecond))
	defer c.stopAll()
	probe := filepath.Join(b.TempDir(), "probe.jsonl")
	c.setenv("CREWLET_SCRIPTED_PROBE=" + probe)
	c.apiServer()
	nodes := map[string]*proc{"n1": c.worker("n1"), "n2": c.worker("n2"), "n3": c.worker("n3")}
	c.waitAttached(60 * time.Second)
	var victim api.NodeView
	for _, n := range c.nodes().Nodes {
		if n.Live && len(n.SeatsHeld) > len(victim.SeatsHeld) {
			victim = n
		}
	}
	killedAt := time.Now()
	nodes[victim.NodeID].kill(b)
	moved := map[string]bool{}
	for _, h := range victim.SeatsHeld {
		moved[h] = true
		if err := c.call(http.MethodPost, "/seats/"+h+"/messages", api.SendMessageRequest{Text: "after the kill"}, nil); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	moves := map[string]time.Duration{}
	for len(moves) < len(moved) {
		for seat := range moved {
			if _, done := moves[seat]; done {
				continue
			}
			if st := c.state(seat); st.Node != "" && st.Node != victim.Incarnation && st.Status == crewlet.StatusIdle {
				moves[seat] = time.Since(killedAt)
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("60s after the kill only %d of %d seats re-established on a survivor", len(moves), len(moved))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every moved seat answers its message: the turns ran, under either
	// tenure (a turn without tool calls needs no host).
	for seat := range moved {
		for len(readProbe(b, probe)[seat]) == 0 {
			if time.Now().After(deadline) {
				b.Fatalf("seat %s never ran a turn after the kill", seat)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	out := make([]time.Duration, 0, len(moves))
	for _, d := range moves {
		out = append(out, d)
	}
	return out
}
