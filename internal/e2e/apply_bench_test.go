package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/wire"
)

// BenchmarkApplyNewSeat measures, over applyRuns applies to one running
// `crewlet serve` of 10 seats, the time from POST /config with one seat
// added until that seat's first reply to a message sent right after the
// apply; beside it, from the same run, publish → reply of a seat already
// running. Run it with
//
//	go test ./internal/e2e -run '^$' -bench ApplyNewSeat -benchtime 1x
func BenchmarkApplyNewSeat(b *testing.B) {
	const applyRuns = 10
	path := fleetOrg(b, 10, 0)
	base, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	c := newCompany(b, path)
	defer c.stopAll()
	c.serve()
	var applied, running []time.Duration
	doc := string(base)
	for i := 1; i <= applyRuns; i++ {
		handle := fmt.Sprintf("new%02d", i)
		doc = strings.Replace(doc, "seats:\n", "seats:\n  - { handle: "+handle+", role: worker }\n", 1)
		start := time.Now()
		var report wire.ConfigReport
		if err := c.call(http.MethodPost, "/config", wire.ConfigApplyRequest{Document: doc}, &report); err != nil {
			b.Fatal(err)
		}
		c.waitReply(c.send(handle, "hello"), replyWait)
		applied = append(applied, time.Since(start))
		start = time.Now()
		c.waitReply(c.send("s01", "hello"), replyWait)
		running = append(running, time.Since(start))
	}
	reportP50Max(b, "apply-", fmt.Sprintf("apply → new seat's reply over %d runs", applyRuns), applied)
	reportP50Max(b, "running-", fmt.Sprintf("publish → reply of a running seat over %d runs", applyRuns), running)
}
