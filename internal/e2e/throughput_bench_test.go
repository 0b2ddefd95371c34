package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
)

// benchDuration is how long each throughput phase runs: 2 minutes unless
// CREWLET_BENCH_DURATION says otherwise (e.g. 20s for a quick look).
func benchDuration(b *testing.B) time.Duration {
	if v := os.Getenv("CREWLET_BENCH_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("CREWLET_BENCH_DURATION: %v", err)
		}
		return d
	}
	return 2 * time.Minute
}

const benchSeats = 100

// BenchmarkThroughput drives 100 seats with the scripted model at zero
// delay: one sender per seat sends, waits for the reply, sends again, for
// benchDuration. It reports publish→reply latency (p50, p99) and sustained
// replies/s; then the bare ceiling on the same stack: 100 no-op workflows each
// looping over the same steps a turn uses (3 local activities in the seat, a
// child workflow with 2 local and 1 regular), and crewlet's throughput as a
// ratio of it; then the same steps run inline in the looping workflow
// (bare-inline-turns/s, BenchmarkTurnShape's inline shape), the shape seats
// run turns in since node-liveness 5, and the ratio to that (inline-ratio);
// then the reply shape (bare-reply-turns/s, reply-ratio): the same inline
// steps in a workflow woken by a signal per reply, with the turn's two
// search attribute upserts, each woken again as soon as it replies, which
// is the Temporal work a reply takes.
// Before those phases, once every seat is established and has sat idle for
// burstIdle, it sends one message to each of the 100 seats at once and
// reports, per seat, publish→first reply (burst-p50/p99/max-ms): how fast a
// company that was quiet answers a wave. Per reply of the load phase it
// reports what crewlet spent: its process's CPU, the Temporal server's, the
// whole machine's (every process and the kernel, the load generator
// included) beside the whole machine's per turn of the bare inline and
// reply-shape phases (bare-inline-machine-cpu-ms/turn,
// bare-reply-machine-cpu-ms/turn), and its database's transactions and
// backend CPU; with CREWLET_BENCH_PROFILE=FILE
// it writes a CPU profile of the crewlet process over that phase (served
// by metrics.pprof) for `go tool pprof FILE`, and in FILE.steps the time
// per reply its worker spent in each local activity, activity and
// workflow task type.
//
//	go test ./internal/e2e -run '^$' -bench '^BenchmarkThroughput$' -benchtime 1x -timeout 20m
func BenchmarkThroughput(b *testing.B) {
	d := benchDuration(b)
	replies, latencies, unloaded, burst, cost := crewletThroughput(b, d)
	ceiling := bareCeiling(b, d)
	inlineCeiling, inlineMachineMs := withMachineCPU(b, func() float64 { return bareInlineCeiling(b, d) })
	replyCeiling, replyMachineMs := withMachineCPU(b, func() float64 { return bareReplyCeiling(b, d) })
	bareUnloadedLatency := bareUnloaded(b, benchSeats, len(unloaded))
	reportBurst(b, "burst", burst)
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	p50 := latencies[len(latencies)/2]
	p99 := latencies[len(latencies)*99/100]
	rate := float64(replies) / d.Seconds()
	b.ReportMetric(rate, "replies/s")
	b.ReportMetric(float64(p50.Milliseconds()), "p50-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "p99-ms")
	b.ReportMetric(ceiling, "bare-turns/s")
	b.ReportMetric(rate/ceiling, "ratio")
	b.ReportMetric(inlineCeiling, "bare-inline-turns/s")
	b.ReportMetric(rate/inlineCeiling, "inline-ratio")
	b.ReportMetric(replyCeiling, "bare-reply-turns/s")
	b.ReportMetric(rate/replyCeiling, "reply-ratio")
	sort.Slice(unloaded, func(i, j int) bool { return unloaded[i] < unloaded[j] })
	unloadedP50, unloadedP99 := unloaded[len(unloaded)/2], unloaded[len(unloaded)*99/100]
	b.ReportMetric(float64(unloadedP50.Milliseconds()), "unloaded-p50-ms")
	b.ReportMetric(float64(unloadedP99.Milliseconds()), "unloaded-p99-ms")
	// The stack's own latency for a reply's shape, one wake at a time.
	sort.Slice(bareUnloadedLatency, func(i, j int) bool { return bareUnloadedLatency[i] < bareUnloadedLatency[j] })
	bareP50, bareP99 := bareUnloadedLatency[len(bareUnloadedLatency)/2], bareUnloadedLatency[len(bareUnloadedLatency)*99/100]
	b.ReportMetric(float64(bareP50.Microseconds())/1000, "bare-unloaded-p50-ms")
	b.ReportMetric(float64(bareP99.Microseconds())/1000, "bare-unloaded-p99-ms")
	b.ReportMetric(float64(unloadedP50)/float64(bareP50), "unloaded-p50-ratio")
	b.ReportMetric(float64(unloadedP99)/float64(bareP99), "unloaded-p99-ratio")
	b.ReportMetric(cost.cpuMs/float64(replies), "crewlet-cpu-ms/reply")
	b.ReportMetric(cost.temporalCPUMs/float64(replies), "temporal-cpu-ms/reply")
	b.ReportMetric(cost.machineCPUMs/float64(replies), "machine-cpu-ms/reply")
	b.ReportMetric(inlineMachineMs, "bare-inline-machine-cpu-ms/turn")
	b.ReportMetric(replyMachineMs, "bare-reply-machine-cpu-ms/turn")
	b.ReportMetric(float64(cost.xacts)/float64(replies), "pg-xacts/reply")
	b.ReportMetric(cost.pgCPUMs/float64(replies), "pg-cpu-ms/reply")
	b.ReportMetric(cost.epochReads/float64(replies), "epoch-reads/reply")
	var local, tasks float64
	kinds := make([]string, 0, len(cost.steps))
	for k, ms := range cost.steps {
		kinds = append(kinds, k)
		switch {
		case strings.HasPrefix(k, "local activity "):
			local += ms
		case strings.HasPrefix(k, "workflow task "):
			tasks += ms
		}
	}
	sort.Strings(kinds)
	var steps strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&steps, "%s: %.2f ms per reply\n", k, cost.steps[k]/float64(replies))
	}
	if profile := os.Getenv("CREWLET_BENCH_PROFILE"); profile != "" {
		// Beside the profile: a benchmark's log is cut short.
		if err := os.WriteFile(profile+".steps", []byte(steps.String()), 0o644); err != nil {
			b.Error(err)
		}
	}
	b.ReportMetric(local/float64(replies), "local-activity-ms/reply")
	b.ReportMetric(tasks/float64(replies), "workflow-task-ms/reply")
	b.Logf("%d seats, %s: %.1f replies/s, latency p50 %s p99 %s (one message in flight per seat); "+
		"one message at a time: p50 %s p99 %s (bare reply shape: p50 %s p99 %s); bare ceilings: child shape %.1f turns/s (ratio %.2f), inline %.1f turns/s (ratio %.2f), reply shape %.1f turns/s (ratio %.2f)",
		benchSeats, d, rate, p50, p99, unloadedP50, unloadedP99, bareP50, bareP99, ceiling, rate/ceiling, inlineCeiling, rate/inlineCeiling, replyCeiling, rate/replyCeiling)
}

// withMachineCPU runs a ceiling phase, which returns turns per second, and
// returns that and the whole machine's CPU per turn over the phase in ms.
func withMachineCPU(b *testing.B, phase func() float64) (rate, msPerTurn float64) {
	ticks0, began := machineTicks(b), time.Now()
	rate = phase()
	return rate, float64(machineTicks(b)-ticks0) / clockTicks * 1000 / (rate * time.Since(began).Seconds())
}

// loadCost is what the crewlet process and its Postgres database spent
// during a load phase.
type loadCost struct {
	// cpuMs is the crewlet process's CPU time (user and system).
	cpuMs float64
	// temporalCPUMs is the Temporal server's (temporalServerPIDs).
	temporalCPUMs float64
	// machineCPUMs is the whole machine's: every process, the load
	// generator and reply watcher included, and the kernel's.
	machineCPUMs float64
	// xacts is how many transactions the database committed or rolled
	// back, the reply watcher's polls not counted: each statement outside
	// a transaction is one.
	xacts int64
	// pgCPUMs is the CPU time of the database's Postgres backends, the
	// reply watcher's not counted.
	pgCPUMs float64
	// epochReads is how many round trips crewlet made only to read a
	// seat's epoch (crewlet_epoch_reads_total).
	epochReads float64
	// steps is the time, in ms, crewlet's worker spent in each kind of
	// step (sdkTimes' keys).
	steps map[string]float64
}

func crewletThroughput(b *testing.B, d time.Duration) (int, []time.Duration, []time.Duration, []time.Duration, loadCost) {
	profile := os.Getenv("CREWLET_BENCH_PROFILE")
	c, replied := benchCompanyWith(b, func(c *company) {
		if profile != "" {
			c.setenv("CREWLET_METRICS_LISTEN="+freeAddr(b), "CREWLET_METRICS_PPROF=true")
		}
	})
	defer c.stopAll()
	serve := c.procs[0]

	// A wave into a quiet company first: every seat idle for a while.
	time.Sleep(burstIdle)
	burst := burstPhase(b, c, replied, seatNames(benchSeats))

	// Then unloaded latency: one message at a time, round-robin over seats.
	var unloaded []time.Duration
	for i, seat := range seatNames(benchSeats) {
		if i == 200 {
			break
		}
		start := time.Now()
		var msg crewlet.Message
		if err := c.call(http.MethodPost, "/seats/"+seat+"/messages", api.SendMessageRequest{Text: "ping"}, &msg); err != nil {
			b.Fatal(err)
		}
		unloaded = append(unloaded, replied.wait(msg.EventID).Sub(start))
	}

	if profile != "" {
		go captureProfile(b, serve, profile, d)
	}
	temporal := temporalServerPIDs(b)
	cpu0, polls0 := cpuTicks(b, serve.cmd.Process.Pid), replied.polls.Load()
	temporal0, machine0 := cpuTicks(b, temporal...), machineTicks(b)
	xacts0, pgTicks0 := dbUse(b, c.dbURL, replied.pid)
	steps0, epochReads0 := sdkTimes(b, c), scrapeSums(b, c, epochReadSeries)
	latencies := loadPhase(b, c, replied, d)
	xacts, pgTicks := dbUse(b, c.dbURL, replied.pid)
	steps, epochReads := sdkTimes(b, c), scrapeSums(b, c, epochReadSeries)
	cost := loadCost{
		cpuMs:         float64(cpuTicks(b, serve.cmd.Process.Pid)-cpu0) / clockTicks * 1000,
		temporalCPUMs: float64(cpuTicks(b, temporal...)-temporal0) / clockTicks * 1000,
		machineCPUMs:  float64(machineTicks(b)-machine0) / clockTicks * 1000,
		xacts:         xacts - xacts0 - (replied.polls.Load() - polls0),
		pgCPUMs:       float64(pgTicks-pgTicks0) / clockTicks * 1000,
		steps:         map[string]float64{},
	}
	for k, v := range epochReads {
		cost.epochReads += v - epochReads0[k]
	}
	for k, v := range steps {
		if ms := (v - steps0[k]) * 1000; ms > 0 {
			cost.steps[k] = ms
		}
	}
	return len(latencies), latencies, unloaded, burst, cost
}

// sdkTimeSeries are the Temporal SDK's timers whose sums say where a
// reply's time goes inside crewlet: local activities run inside a workflow
// task, so their time is part of the task's.
var sdkTimeSeries = map[string]string{
	"temporal_local_activity_execution_latency_seconds_sum": "local activity",
	"temporal_activity_execution_latency_seconds_sum":       "activity",
	"temporal_workflow_task_execution_latency_seconds_sum":  "workflow task",
}

// epochReadSeries counts the round trips made only to read a seat's epoch.
var epochReadSeries = map[string]string{"crewlet_epoch_reads_total": "epoch reads"}

// sdkTimes scrapes crewlet's /metrics for the sums of sdkTimeSeries, in
// seconds, keyed "KIND TYPE" (TYPE the activity or workflow type).
func sdkTimes(b *testing.B, c *company) map[string]float64 {
	return scrapeSums(b, c, sdkTimeSeries)
}

// scrapeSums scrapes crewlet's /metrics for the sums of the series named
// in series, keyed "KIND TYPE" (KIND series' word for it, TYPE the activity
// or workflow type where a label names one).
func scrapeSums(b *testing.B, c *company, series map[string]string) map[string]float64 {
	status, body, err := c.raw(http.MethodGet, "/metrics", nil)
	if err != nil || status != http.StatusOK {
		b.Fatalf("scrape /metrics: HTTP %d, %v", status, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		kind, known := series[name]
		if !ok || !known {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		typ := ""
		for _, l := range strings.Split(labels, ",") {
			if k, v, _ := strings.Cut(l, "="); k == "activity_type" || k == "activity" || (k == "workflow_type" && typ == "") {
				typ = strings.Trim(v, `"`)
			}
		}
		var sum float64
		if _, err := fmt.Sscan(value, &sum); err == nil {
			out[kind+" "+typ] += sum
		}
	}
	return out
}

// dbUse is how many transactions a database has committed and rolled back,
// and the CPU ticks its backends have used, but for the backend of pid
// skip. Postgres publishes a session's counts within a second or so, so
// over a phase of a minute the difference of two readings is close; a
// backend that ended between the readings is missed (crewlet's pool keeps
// its connections).
func dbUse(b *testing.B, dbURL string, skip uint32) (xacts, ticks int64) {
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(),
		`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&xacts); err != nil {
		b.Fatal(err)
	}
	rows, err := conn.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), $1)`, int64(skip))
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	for _, pid := range pids {
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			ticks += statTicks(string(stat))
		}
	}
	return xacts, ticks
}

// captureProfile writes a CPU profile of the crewlet process over most of
// a load phase of length d to path (CREWLET_BENCH_PROFILE), from the pprof
// endpoint of its metrics listener.
func captureProfile(b *testing.B, p *proc, path string, d time.Duration) {
	var addr string
	for _, kv := range p.cmd.Env {
		if v, ok := strings.CutPrefix(kv, "CREWLET_METRICS_LISTEN="); ok {
			addr = v
		}
	}
	seconds := max(1, int((d - 5*time.Second).Seconds()))
	time.Sleep(2 * time.Second)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds))
	if err != nil {
		b.Errorf("CPU profile: %v", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		b.Errorf("CPU profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		b.Errorf("CPU profile: %v", err)
	}
}

// loadPhase keeps one message in flight per seat for d: each sender sends,
// waits for the reply, sends again. It returns each reply's publish→reply
// latency.
func loadPhase(b *testing.B, c *company, replied *replyWatcher, d time.Duration) []time.Duration {
	var mu sync.Mutex
	var latencies []time.Duration
	var slow []string
	defer func() {
		for i, line := range slow {
			if i == 20 {
				break
			}
			b.Logf("slow reply: %s", line)
		}
	}()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, seat := range seatNames(benchSeats) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				start := time.Now()
				var msg crewlet.Message
				if err := c.call(http.MethodPost, "/seats/"+seat+"/messages", api.SendMessageRequest{Text: "ping"}, &msg); err != nil {
					b.Error(err)
					return
				}
				at := replied.wait(msg.EventID)
				mu.Lock()
				latencies = append(latencies, at.Sub(start))
				if l := at.Sub(start); l > 5*time.Second {
					slow = append(slow, fmt.Sprintf("%s %s at +%s took %s", seat, msg.EventID, start.Sub(deadline.Add(-d)).Round(time.Millisecond), l.Round(time.Millisecond)))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return latencies
}

// burstIdle is how long every seat sits idle, once established, before the
// burst: long enough that nothing of establishing is still in flight.
const burstIdle = 5 * time.Second

// BenchmarkBurst is BenchmarkThroughput's burst phase alone: 100 seats
// established and idle, then one message to each at once; it reports, per
// seat, publish→first reply (p50, p99, max). A second wave after another
// idle spell measures seats that have answered before. Then, on the same
// stack, its ceiling: as many bare workflows, idle as long, woken at once,
// each running a turn's steps doing nothing (bare-burst-*), and the first
// burst's max over the ceiling's, which says more across machines than
// either alone.
//
//	go test ./internal/e2e -run '^$' -bench 'Burst$' -benchtime 1x -timeout 10m
func BenchmarkBurst(b *testing.B) {
	c, replied := benchCompany(b)
	time.Sleep(burstIdle)
	first := burstPhase(b, c, replied, seatNames(benchSeats))
	time.Sleep(burstIdle)
	second := burstPhase(b, c, replied, seatNames(benchSeats))
	c.stopAll()
	ceiling := bareBurst(b, benchSeats)
	reportBurst(b, "burst", first)
	reportBurst(b, "burst2", second)
	reportBurst(b, "bare-burst", ceiling)
	b.ReportMetric(float64(first[len(first)-1])/float64(ceiling[len(ceiling)-1]), "burst-max/bare-max")
	b.Logf("bare ceiling, %d idle workflows woken at once, each running a turn's steps: p50 %s max %s; the first burst's max is %.1fx its max",
		benchSeats, ceiling[len(ceiling)/2].Round(time.Millisecond), ceiling[len(ceiling)-1].Round(time.Millisecond),
		float64(first[len(first)-1])/float64(ceiling[len(ceiling)-1]))
}

// burstPhase sends one message to each seat at once (every sender waits at
// one start line) and returns, per seat, the time from just before its POST
// to its reply being recorded. The slowest seats are logged with how long
// their POST itself took, to tell a slow publish from a slow turn.
func burstPhase(b *testing.B, c *company, replied *replyWatcher, seats []string) []time.Duration {
	type result struct {
		seat, event string
		post, reply time.Duration
	}
	results := make([]result, len(seats))
	start := make(chan struct{})
	var ready, wg sync.WaitGroup
	for i, seat := range seats {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			t0 := time.Now()
			var msg crewlet.Message
			if err := c.call(http.MethodPost, "/seats/"+seat+"/messages", api.SendMessageRequest{Text: "ping"}, &msg); err != nil {
				b.Error(err)
				return
			}
			posted := time.Since(t0)
			results[i] = result{seat: seat, event: msg.EventID, post: posted, reply: replied.wait(msg.EventID).Sub(t0)}
		}()
	}
	ready.Wait()
	began := time.Now()
	close(start)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	sort.Slice(results, func(i, j int) bool { return results[i].reply < results[j].reply })
	out := make([]time.Duration, len(results))
	for i, r := range results {
		out[i] = r.reply
	}
	for _, r := range results[max(0, len(results)-5):] {
		b.Logf("burst slowest: %s %s post %s reply %s", r.seat, r.event, r.post.Round(time.Millisecond), r.reply.Round(time.Millisecond))
	}
	b.Logf("burst of %d at %s: p50 %s p99 %s max %s", len(out), began.Format(time.StampMilli),
		out[len(out)/2].Round(time.Millisecond), out[len(out)*99/100].Round(time.Millisecond), out[len(out)-1].Round(time.Millisecond))
	return out
}

// reportBurst reports a burst's publish→first reply p50, p99 and max as
// NAME-p50-ms, NAME-p99-ms and NAME-max-ms.
func reportBurst(b *testing.B, name string, burst []time.Duration) {
	sort.Slice(burst, func(i, j int) bool { return burst[i] < burst[j] })
	b.ReportMetric(float64(burst[len(burst)/2].Milliseconds()), name+"-p50-ms")
	b.ReportMetric(float64(burst[len(burst)*99/100].Milliseconds()), name+"-p99-ms")
	b.ReportMetric(float64(burst[len(burst)-1].Milliseconds()), name+"-max-ms")
}

// replyWatcher tells senders when the reply to their message was recorded,
// from one poll of the transcript for all of them, so waiting adds no load.
type replyWatcher struct {
	// polls counts the watcher's queries, so what a phase costs Postgres
	// can leave them out.
	polls atomic.Int64
	// pid is the watcher's Postgres backend.
	pid     uint32
	mu      sync.Mutex
	waiters map[string]chan time.Time
	seen    map[string]time.Time
}

func watchReplies(b *testing.B, dbURL string) *replyWatcher {
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		b.Fatal(err)
	}
	w := &replyWatcher{waiters: map[string]chan time.Time{}, seen: map[string]time.Time{}, pid: conn.PgConn().PID()}
	stop, stopped := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(stop); <-stopped })
	go func() {
		defer close(stopped)
		defer conn.Close(context.Background())
		// seq is allotted before commit, so a later poll may find a lower seq
		// than one already seen: look back a window and skip what was seen.
		// The window is watchLookback seqs, some 6 s of the load phase's three rows
		// per reply, far beyond a commit's lag; a wider one made every poll
		// return hundreds of rows, whose reading took CPU from the phase
		// it measures and not from the ceiling's.
		var last int64
		handled := map[int64]bool{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			w.polls.Add(1)
			rows, err := conn.Query(context.Background(),
				`SELECT seq, in_reply_to, recorded_at FROM messages WHERE seq > $1 AND in_reply_to IS NOT NULL ORDER BY seq`, max(0, last-watchLookback))
			if err != nil {
				continue
			}
			for rows.Next() {
				var seq int64
				var id string
				var at time.Time
				if rows.Scan(&seq, &id, &at) == nil && !handled[seq] {
					handled[seq] = true
					last = max(last, seq)
					w.arrived(id, at)
				}
			}
			rows.Close()
		}
	}()
	return w
}

// watchLookback is how many seqs below the highest seen the reply watcher
// looks again.
const watchLookback = 500

func (w *replyWatcher) arrived(eventID string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.waiters[eventID]; ok {
		ch <- at
		delete(w.waiters, eventID)
		return
	}
	w.seen[eventID] = at
}

func (w *replyWatcher) wait(eventID string) time.Time {
	w.mu.Lock()
	if at, ok := w.seen[eventID]; ok {
		delete(w.seen, eventID)
		w.mu.Unlock()
		return at
	}
	ch := make(chan time.Time, 1)
	w.waiters[eventID] = ch
	w.mu.Unlock()
	return <-ch
}

// bareWorkflow is the ceiling's unit of work: the steps a turn costs, doing
// nothing.
func bareWorkflow(ctx workflow.Context, turns int) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	for i := 0; i < turns; i++ {
		for range 3 {
			if err := workflow.ExecuteLocalActivity(lctx, bareActivity).Get(ctx, nil); err != nil {
				return err
			}
		}
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: fmt.Sprintf("%s/turn/%d", workflow.GetInfo(ctx).WorkflowExecution.ID, i),
		})
		if err := workflow.ExecuteChildWorkflow(cctx, bareTurn).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// bareTurn is a turn's child workflow with one model round: a local step
// before and after one regular activity.
func bareTurn(ctx workflow.Context) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteLocalActivity(lctx, bareActivity).Get(ctx, nil); err != nil {
		return err
	}
	if err := workflow.ExecuteActivity(actx, bareActivity).Get(ctx, nil); err != nil {
		return err
	}
	return workflow.ExecuteLocalActivity(lctx, bareActivity).Get(ctx, nil)
}

func bareActivity(context.Context) error { return nil }

// bareWorker starts, on the dev stack, a worker of its own on a fresh task
// queue (prefix + a suffix) with what register gives it, and returns its
// client and queue, and stop, which stops both.
func bareWorker(b *testing.B, prefix string, opts worker.Options, register func(worker.Worker)) (client.Client, string, func()) {
	b.Helper()
	quiet := tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tc, err := client.Dial(client.Options{HostPort: testenv.Stack(b).Temporal, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	queue := prefix + testenv.Suffix()
	w := worker.New(tc, queue, opts)
	register(w)
	if err := w.Start(); err != nil {
		tc.Close()
		b.Fatal(err)
	}
	return tc, queue, func() { w.Stop(); tc.Close() }
}

// bareWaker is an idle seat at its barest: once started it says so, waits
// for a wake signal, and then runs one turn's steps, doing nothing.
func bareWaker(ctx workflow.Context) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteLocalActivity(lctx, bareReadyActivity).Get(ctx, nil); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, bareWake).Receive(ctx, nil)
	return bareWorkflow(ctx, 1)
}

const (
	bareWake          = "wake"
	bareReadyActivity = "bareReady"
)

// bareBurst is the burst's ceiling on this stack: n workflows, each idle for
// burstIdle, are woken at once and each runs a turn's steps; it returns,
// per workflow, the time from just before its wake to its end.
func bareBurst(b *testing.B, n int) []time.Duration {
	var ready atomic.Int64
	// The pollers crewlet's shared worker has, so the ceiling is not held
	// back by the SDK's default two.
	pollers := worker.Options{WorkflowTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{
		InitialNumberOfPollers: 8, MinimumNumberOfPollers: 2, MaximumNumberOfPollers: 16,
	})}
	tc, queue, stop := bareWorker(b, "crewlet-bare-burst-", pollers, func(w worker.Worker) {
		w.RegisterWorkflow(bareWaker)
		w.RegisterWorkflow(bareTurn)
		w.RegisterActivity(bareActivity)
		w.RegisterActivityWithOptions(func(context.Context) error { ready.Add(1); return nil },
			activity.RegisterOptions{Name: bareReadyActivity})
	})
	defer stop()
	runs := make([]client.WorkflowRun, n)
	for i := range runs {
		r, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
			ID: fmt.Sprintf("bare-burst/%s/%d", queue, i), TaskQueue: queue,
		}, bareWaker)
		if err != nil {
			b.Fatal(err)
		}
		runs[i] = r
	}
	testenv.Eventually(b, time.Minute, "every bare waker started", func() error {
		if got := ready.Load(); got < int64(n) {
			return fmt.Errorf("%d of %d started", got, n)
		}
		return nil
	})
	time.Sleep(burstIdle)
	out := make([]time.Duration, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			err := tc.SignalWorkflow(context.Background(), r.GetID(), r.GetRunID(), bareWake, nil)
			if err == nil {
				err = r.Get(context.Background(), nil)
			}
			if err != nil {
				b.Error(err)
			}
			out[i] = time.Since(t0)
		}()
	}
	close(start)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return out
}

func bareCeiling(b *testing.B, d time.Duration) float64 {
	return bareLoopRate(b, d, "crewlet-bare-", bareWorkflow, func(w worker.Worker) {
		w.RegisterWorkflow(bareWorkflow)
		w.RegisterWorkflow(bareTurn)
		w.RegisterActivity(bareActivity)
	})
}

// benchCompany runs benchSeats seats under `crewlet serve`, every one
// attached, and watches their replies. The benchmarks send as one principal
// far faster than the API's per-principal mutation limit allows a person
// to, so the limit is off.
func benchCompany(b *testing.B) (*company, *replyWatcher) {
	return benchCompanyWith(b, func(*company) {})
}

// benchCompanyWith is benchCompany with setup run before `crewlet serve`
// starts (its environment, say).
func benchCompanyWith(b *testing.B, setup func(*company)) (*company, *replyWatcher) {
	c := newCompany(b, fleetOrg(b, benchSeats, 0))
	c.setenv("CREWLET_API_MUTATIONS_PER_MINUTE=0", "CREWLET_MAILBOX_SENDER_PER_MINUTE=0")
	setup(c)
	c.serve()
	c.waitAttached(2 * time.Minute)
	return c, watchReplies(b, c.dbURL)
}
