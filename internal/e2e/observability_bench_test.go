package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkObservabilityOverhead is BenchmarkThroughput's loaded phase with
// metrics and tracing off, on, on again and off again, on one company of
// benchSeats seats: `crewlet serve` is restarted for each phase with
// CREWLET_METRICS_ENABLED and the OTLP endpoint set for it. On, every span
// is exported over OTLP/HTTP to a collector stand-in in this process, and
// /metrics is scraped every 5s as Prometheus would. The dev server slows as
// its history grows, phase after phase; off-on-on-off cancels a steady
// slowing out of the sums. It reports replies/s of each phase, off and on
// (each the sum of its two phases) and the throughput overhead, 1 - on/off;
// crewlet's CPU per reply off and on and their overhead, which the server's
// slowing does not touch; and how much OTLP the collector took.
//
//	go test ./internal/e2e -run '^$' -bench ObservabilityOverhead -benchtime 1x -timeout 40m
func BenchmarkObservabilityOverhead(b *testing.B) {
	d := benchDuration(b)
	var exports, exported atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		exports.Add(1)
		exported.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	c, replied := benchCompany(b)
	defer c.stopAll()
	replies := map[bool]int{}
	cpu := map[bool]int64{}
	for phase, on := range []bool{false, true, true, false} {
		c.stopAll()
		if on {
			c.setenv("CREWLET_METRICS_ENABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")
		} else {
			c.setenv("CREWLET_METRICS_ENABLED=false", "OTEL_EXPORTER_OTLP_ENDPOINT=")
		}
		serve := c.serve()
		c.waitAttached(2 * time.Minute)
		time.Sleep(burstIdle)
		before := exports.Load()
		stopScrapes := make(chan struct{})
		scraped := make(chan struct{})
		go func() {
			defer close(scraped)
			for on {
				select {
				case <-stopScrapes:
					return
				case <-time.After(5 * time.Second):
				}
				if status, _, err := c.raw(http.MethodGet, "/metrics", nil); err != nil || status != http.StatusOK {
					b.Errorf("scrape /metrics: HTTP %d, %v", status, err)
				}
			}
		}()
		cpu0 := cpuTicks(b, serve.cmd.Process.Pid)
		n := len(loadPhase(b, c, replied, d))
		cpu[on] += cpuTicks(b, serve.cmd.Process.Pid) - cpu0
		close(stopScrapes)
		<-scraped
		replies[on] += n
		name := "off"
		if on {
			name = "on"
		}
		// Each phase is reported, not logged: a benchmark's log is cut
		// short, and the phases say how noisy the sums are.
		b.ReportMetric(float64(n)/d.Seconds(), fmt.Sprintf("phase%d-%s-replies/s", phase+1, name))
		if on && exports.Load() == before {
			// The exporter batches every 5s at most: a phase without one
			// exported nothing, and measured tracing off.
			b.Fatalf("no span was exported in a phase with tracing on")
		}
	}
	off, on := float64(replies[false])/(2*d.Seconds()), float64(replies[true])/(2*d.Seconds())
	b.ReportMetric(off, "off-replies/s")
	b.ReportMetric(on, "on-replies/s")
	b.ReportMetric(100*(1-on/off), "overhead-%")
	cpuOff := float64(cpu[false]) / clockTicks / float64(replies[false]) * 1000
	cpuOn := float64(cpu[true]) / clockTicks / float64(replies[true]) * 1000
	b.ReportMetric(cpuOff, "off-cpu-ms/reply")
	b.ReportMetric(cpuOn, "on-cpu-ms/reply")
	b.ReportMetric(100*(cpuOn/cpuOff-1), "cpu-overhead-%")
	b.ReportMetric(float64(exported.Load())/1024, "otlp-KiB")
}
