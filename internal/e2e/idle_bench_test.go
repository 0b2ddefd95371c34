package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
)

// BenchmarkIdleSeats establishes CREWLET_BENCH_SEATS agent seats (default
// 1000) on one node (`crewlet serve`), then leaves them idle for
// CREWLET_BENCH_IDLE (default 2m) and reports what they cost: Temporal
// calls per second made by crewlet (counted by the binary's call hook),
// CPU % of one core for crewlet and for the Temporal server (the dev server,
// or every service process named by CREWLET_BENCH_TEMPORAL_PIDS, which the
// cluster stack's env file sets), crewlet's
// RSS. It also reports the time to establish every seat against the bare
// ceiling of the same stack: as many workflows, each running one activity,
// started and finished.
//
//	CREWLET_BENCH_SEATS=10000 go test ./internal/e2e -run '^$' -bench IdleSeats -benchtime 1x -timeout 60m
func BenchmarkIdleSeats(b *testing.B) {
	n := envInt(b, "CREWLET_BENCH_SEATS", 1000)
	idle := envDuration(b, "CREWLET_BENCH_IDLE", 2*time.Minute)
	c := newCompany(b, fleetOrg(b, n, 0))
	defer c.stopAll()
	calls := filepath.Join(b.TempDir(), "calls")
	c.setenv(testhook.Hooks{TemporalCalls: calls}.Env(), "CREWLET_API_MUTATIONS_PER_MINUTE=0", "CREWLET_MAILBOX_SENDER_PER_MINUTE=0")
	start := time.Now()
	p := c.start("serve", "serve")
	testenv.Eventually(b, 60*time.Minute, "every seat established", func() error {
		select {
		case <-p.done:
			b.Fatalf("serve exited: %s", p.out.String())
		default:
		}
		node := c.onlyLiveIncarnation()
		if node == "" {
			return fmt.Errorf("no live node yet")
		}
		// Attached, not only reserved: Attach bumps the epoch.
		seats, err := c.store().Seats(context.Background())
		if err != nil {
			return err
		}
		attached := 0
		for _, s := range seats {
			if s.Node == node && s.Epoch > 0 {
				attached++
			}
		}
		if attached < n {
			return fmt.Errorf("%d of %d seats established", attached, n)
		}
		return nil
	})
	established := time.Since(start)
	b.Logf("%d seats established in %s", n, established.Round(100*time.Millisecond))
	// Let the boot's work (first reads, search attributes) settle.
	time.Sleep(15 * time.Second)

	temporal := temporalServerPIDs(b)
	crewlet := p.cmd.Process.Pid
	calls0, crewCPU0, tempCPU0 := readCalls(b, calls), cpuTicks(b, crewlet), cpuTicks(b, temporal...)
	t0 := time.Now()
	time.Sleep(idle)
	window := time.Since(t0).Seconds()
	callsPerSec := float64(readCalls(b, calls)-calls0) / window
	crewPct := 100 * float64(cpuTicks(b, crewlet)-crewCPU0) / clockTicks / window
	tempPct := 100 * float64(cpuTicks(b, temporal...)-tempCPU0) / clockTicks / window
	rss := rssMiB(b, crewlet)
	c.stopAll()
	c.terminateSeats()

	bare := bareStarts(b, n)
	b.ReportMetric(established.Seconds(), "established-s")
	b.ReportMetric(bare.Seconds(), "bare-start-s")
	b.ReportMetric(established.Seconds()/bare.Seconds(), "established/bare")
	b.ReportMetric(callsPerSec, "idle-calls/s")
	b.ReportMetric(crewPct, "crewlet-cpu-%")
	b.ReportMetric(tempPct, "temporal-cpu-%")
	b.ReportMetric(rss, "crewlet-rss-MiB")
	b.Logf("%d idle seats over %s: %.2f Temporal calls/s, crewlet %.1f%% of a core, Temporal %.1f%%, crewlet RSS %.0f MiB; established in %s, bare ceiling %s (%.2fx)",
		n, idle, callsPerSec, crewPct, tempPct, rss, established.Round(100*time.Millisecond), bare.Round(100*time.Millisecond), established.Seconds()/bare.Seconds())
}

// onlyLiveIncarnation is the incarnation of the company's one live node,
// "" while it has none.
func (c *company) onlyLiveIncarnation() string {
	for _, n := range c.nodes().Nodes {
		if n.Live {
			return n.Incarnation
		}
	}
	return ""
}

// clockTicks is the kernel's USER_HZ, what /proc's CPU times count in.
const clockTicks = 100

// cpuTicks returns the processes' user + system CPU time in clock ticks,
// summed.
func cpuTicks(b *testing.B, pids ...int) int64 {
	b.Helper()
	var total int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		total += statTicks(string(stat))
	}
	return total
}

// machineTicks returns the CPU time the whole machine has spent busy (every
// CPU's user, nice, system, irq, softirq and steal time from /proc/stat) in
// clock ticks.
func machineTicks(b *testing.B) int64 {
	b.Helper()
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		b.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	var total int64
	// user nice system idle iowait irq softirq steal: all but idle and iowait.
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			b.Fatalf("/proc/stat: %q: %v", line, err)
		}
		total += n
	}
	return total
}

// statTicks is the user and system CPU ticks of a /proc/PID/stat line.
func statTicks(s string) int64 {
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// After the comm: state ppid ... utime is field 14 of the whole line,
	// index 11 here; stime follows.
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

// rssMiB returns a process's resident set size.
func rssMiB(b *testing.B, pid int) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// readCalls returns the call hook's running total.
func readCalls(b *testing.B, path string) int64 {
	b.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("read the Temporal call count: %v", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(string(raw), "calls ")), 10, 64)
	if err != nil {
		b.Fatalf("Temporal call count %q: %v", raw, err)
	}
	return n
}

// temporalServerPIDs finds the Temporal server's processes: those
// CREWLET_BENCH_TEMPORAL_PIDS names (the cluster stack's four services), or
// else the dev stack's one.
func temporalServerPIDs(b *testing.B) []int {
	b.Helper()
	if v := os.Getenv("CREWLET_BENCH_TEMPORAL_PIDS"); v != "" {
		var pids []int
		for _, f := range strings.Fields(v) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("CREWLET_BENCH_TEMPORAL_PIDS=%q: want process ids separated by spaces", v)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				b.Fatalf("CREWLET_BENCH_TEMPORAL_PIDS names process %d, which is not running: run deploy/cluster/stack.sh up and load .dev/cluster.env again", pid)
			}
			pids = append(pids, pid)
		}
		return pids
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.TrimSpace(string(comm)) == "temporal-dev" {
			return []int{pid}
		}
	}
	b.Fatal("no Temporal dev server process (temporal-dev, deploy/temporal) found, and CREWLET_BENCH_TEMPORAL_PIDS is not set")
	return nil
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}

// bareStarts is the ceiling of establishing n seats on this stack: the time
// to start n workflows that each run one activity, and see them finish.
func bareStarts(b *testing.B, n int) time.Duration {
	tc, queue, stop := bareWorker(b, "crewlet-bare-start-", worker.Options{MaxConcurrentWorkflowTaskPollers: 8}, func(w worker.Worker) {
		w.RegisterWorkflow(bareStart)
		w.RegisterActivity(bareActivity)
	})
	defer stop()
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
				ID: fmt.Sprintf("bare-start/%s/%d", queue, i), TaskQueue: queue,
			}, bareStart)
			if err == nil {
				err = r.Get(context.Background(), nil)
			}
			if err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// bareStart is a seat's establishment at its barest: one activity.
func bareStart(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	return workflow.ExecuteActivity(ctx, bareActivity).Get(ctx, nil)
}
