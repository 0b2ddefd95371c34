package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
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
	reportP50Max(b, "", fmt.Sprintf("failover over %d runs, %d moved seats, kill to new tenure", failoverRuns, len(moves)), moves)
	reportP50Max(b, "answer-", fmt.Sprintf("failover over %d runs, %d moved seats, kill to answer", failoverRuns, len(answers)), answers)
}

// reportP50Max reports the median and the slowest of all as the
// benchmark's metrics prefix+"p50-s" and prefix+"max-s", and logs them
// after what they measure.
func reportP50Max(b *testing.B, prefix, what string, all []time.Duration) {
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	p50, max := sorted[len(sorted)/2], sorted[len(sorted)-1]
	b.ReportMetric(p50.Seconds(), prefix+"p50-s")
	b.ReportMetric(max.Seconds(), prefix+"max-s")
	b.Logf("%s: p50 %s, max %s", what, p50.Round(time.Millisecond), max.Round(time.Millisecond))
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
