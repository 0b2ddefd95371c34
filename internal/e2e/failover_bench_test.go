package e2e

import (
	"net/http"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/crewlet/crewlet/api"
)

// BenchmarkFailover measures, with the default timeouts, the time from
// killing the worker that holds the most seats to the first turn of each seat
// it held, on a survivor. Each run: 30 seats on 3 worker processes; right
// after the kill every moved seat is sent a message. It does failoverRuns
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
// each seat it held, how long after the kill the seat's first turn started.
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
	for {
		var firsts []time.Duration
		for seat, ivs := range readProbe(b, probe) {
			if !moved[seat] {
				continue
			}
			for _, iv := range ivs {
				if iv.node != victim.Incarnation && iv.start.After(killedAt) {
					firsts = append(firsts, iv.start.Sub(killedAt))
					break
				}
			}
		}
		if len(firsts) == len(moved) {
			return firsts
		}
		if time.Now().After(deadline) {
			b.Fatalf("60s after the kill only %d of %d moved seats ran a turn", len(firsts), len(moved))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
