package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/testenv"
)

// BenchmarkStream measures the live stream under load: 100 seats kept busy
// as in BenchmarkThroughput (one message in flight per seat), first with
// no watcher, then with one SSE watcher per seat, then with none again
// (after a warm-up that counts in none). It
// reports replies/s in each phase and the watched phase's against the
// mean of the two unwatched (watched/unwatched; the target is 0.95 or
// more), and, from the watched phase, event produced (its time, stamped
// where the step emitted it) → received by the watcher, p50 and p99. Its
// ceiling, on the same stack: as many events per second written straight
// to 100 Redis streams and read by 100 blocking readers (bare-p50/p99-ms).
//
//	go test ./internal/e2e -run '^$' -bench 'Stream$' -benchtime 1x -timeout 30m
func BenchmarkStream(b *testing.B) {
	d := benchDuration(b)
	c := newCompany(b, fleetOrg(b, benchSeats, 0))
	c.setenv("CREWLET_API_MUTATIONS_PER_MINUTE=0", "CREWLET_MAILBOX_SENDER_PER_MINUTE=0", fmt.Sprintf("CREWLET_STREAM_MAX_PER_PRINCIPAL=%d", benchSeats+10))
	c.serve()
	c.waitAttached(2 * time.Minute)
	replied := watchReplies(b, c.dbURL)

	// The first sends after the seats settle are slow (their first turns
	// on this node); they count in no phase.
	loadPhase(b, c, replied, min(d, 15*time.Second))
	before := len(loadPhase(b, c, replied, d))
	w := watchSeats(b, c, seatNames(benchSeats))
	watched := len(loadPhase(b, c, replied, d))
	lat, received := w.stop()
	after := len(loadPhase(b, c, replied, d))
	c.stopAll()
	if len(lat) == 0 {
		b.Fatal("the watchers received no event")
	}
	eventRate := float64(received) / d.Seconds()
	bare := bareStreamLatency(b, benchSeats, eventRate, d)

	unwatched := float64(before+after) / 2 / d.Seconds()
	rate := float64(watched) / d.Seconds()
	b.ReportMetric(float64(before)/d.Seconds(), "before-replies/s")
	b.ReportMetric(float64(after)/d.Seconds(), "after-replies/s")
	b.ReportMetric(unwatched, "unwatched-replies/s")
	b.ReportMetric(rate, "watched-replies/s")
	b.ReportMetric(rate/unwatched, "watched/unwatched")
	b.ReportMetric(eventRate, "events/s")
	reportLatency(b, "event", lat)
	reportLatency(b, "bare", bare)
	b.Logf("%d seats, %s a phase: %.1f replies/s unwatched (%.1f before, %.1f after), %.1f with %d watchers (%.3f); "+
		"%d events at %.0f/s produced→received p50 %s p99 %s; bare Redis stream at the same rate p50 %s p99 %s",
		benchSeats, d, unwatched, float64(before)/d.Seconds(), float64(after)/d.Seconds(), rate, benchSeats, rate/unwatched,
		received, eventRate, lat[len(lat)/2], lat[len(lat)*99/100], bare[len(bare)/2], bare[len(bare)*99/100])
}

// reportLatency reports NAME-p50-ms and NAME-p99-ms of sorted latencies.
func reportLatency(b *testing.B, name string, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, name+"-p99-ms")
}

// seatWatchers are one SSE watcher per seat, each timing every event from
// its stamp to its arrival.
type seatWatchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	lat    []time.Duration
}

func watchSeats(b *testing.B, c *company, seats []string) *seatWatchers {
	ctx, cancel := context.WithCancel(context.Background())
	w := &seatWatchers{cancel: cancel}
	var opened sync.WaitGroup
	for _, seat := range seats {
		opened.Add(1)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.api+"/seats/"+seat+"/stream", nil)
			req.Header.Set("Authorization", "Bearer "+c.bearer())
			resp, err := http.DefaultClient.Do(req)
			opened.Done()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("watch %s: %v %v", seat, err, resp)
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64*1024), 16<<20)
			var local []time.Duration
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				at := time.Now()
				var ev events.Event
				if json.Unmarshal([]byte(data), &ev) == nil {
					local = append(local, at.Sub(ev.Time))
				}
			}
			w.mu.Lock()
			w.lat = append(w.lat, local...)
			w.mu.Unlock()
		}()
	}
	opened.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return w
}

// stop closes the watchers and returns every latency they timed.
func (w *seatWatchers) stop() ([]time.Duration, int) {
	w.cancel()
	w.wg.Wait()
	return w.lat, len(w.lat)
}

// bareStreamLatency is the ceiling of produced → received: for d, events
// stamped and written with XADD by one writer, round-robin over n Redis
// streams, rate a second in all, each stream read by its own blocking
// XREAD; it returns each event's stamp → read.
func bareStreamLatency(b *testing.B, n int, rate float64, d time.Duration) []time.Duration {
	opts, err := redis.ParseURL(testenv.Stack(b).RedisURL)
	if err != nil {
		b.Fatal(err)
	}
	opts.PoolSize = 2*n + 8
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	prefix := "bare-stream" + testenv.Suffix()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var out []time.Duration
	var wg sync.WaitGroup
	for i := range n {
		key := fmt.Sprintf("%s:%d", prefix, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := "0-0"
			var local []time.Duration
			for ctx.Err() == nil {
				res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Count: 256, Block: time.Second}).Result()
				if err != nil {
					continue
				}
				at := time.Now()
				for _, m := range res[0].Messages {
					last = m.ID
					var sent int64
					fmt.Sscan(m.Values["t"].(string), &sent)
					local = append(local, at.Sub(time.Unix(0, sent)))
				}
			}
			mu.Lock()
			out = append(out, local...)
			mu.Unlock()
		}()
	}
	// One writer, as a node has one emitter, round-robin over the streams.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Duration(float64(time.Second) / max(rate, 1)))
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("%s:%d", prefix, i%n), MaxLen: 10000, Approx: true,
					Values: []any{"t", time.Now().UnixNano()}})
			}
		}
	}()
	time.Sleep(d)
	cancel()
	wg.Wait()
	for i := range n {
		rdb.Del(context.Background(), fmt.Sprintf("%s:%d", prefix, i))
	}
	if len(out) == 0 {
		b.Fatal("the bare streams carried no event")
	}
	return out
}
