package e2e

import (
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/testenv"
)

// seatPageEvents is how many events one run of the benchmark writes, far
// more than the page keeps on screen (500 lines), so the page's trimming
// is part of what is measured; the seat's stream keeps them all, so the
// API loses none to trimming however far behind the page falls.
const seatPageEvents = 10000

// BenchmarkConsoleSeatPageStream measures how many events a second one open
// seat page keeps up with: an idle seat's page, live, and then
// seatPageEvents turn events written to the seat's stream as fast as the
// emitter writes them (a turn's shape: a round, eight model deltas, the
// round's output, a tool call and its result, again and again), timed from
// the first write to the last event drawn in the page. It reports that
// rate (events/s), the rate the events were written at (written-events/s,
// the most the page could show), and the seconds the page trailed the
// writer (lag-ms).
//
//	go test ./internal/e2e -run '^$' -bench 'ConsoleSeatPageStream' -benchtime 1x
func BenchmarkConsoleSeatPageStream(b *testing.B) {
	c := newCompany(b, fleetOrg(b, 1, 0))
	c.setenv(fmt.Sprintf("CREWLET_STREAM_KEEP=%d", 2*seatPageEvents))
	defer c.stopAll()
	c.serve()
	c.waitAttached(2 * time.Minute)
	br := c.browser()
	br.open("/ui/#/seats/s01")
	br.waitVisible(`main[data-ready="seat"]`)
	br.waitJS("the live stream", `document.getElementById("live").textContent === "live"`)

	opts, err := redis.ParseURL(testenv.Stack(b).RedisURL)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	// The emitter reads only the stream's settings from its org.
	org, err := config.Parse(fmt.Appendf(nil, "company: { name: bench }\nstream: { keep: %d }\nseats: [ { handle: someone, kind: human } ]\n", 2*seatPageEvents))
	if err != nil {
		b.Fatal(err)
	}
	em := events.NewEmitter(rdb, c.prefix, org, slog.New(slog.DiscardHandler))

	var shown, written, lag []float64
	for run := range b.N {
		turn := fmt.Sprintf("turn/s01/bench%d", run)
		start := time.Now()
		for i := range seatPageEvents {
			em.Emit(benchEvent(turn, i), fmt.Sprintf("%s/%d", turn, i))
			// The emitter's queue holds 4096: wait for it to drain
			// rather than have it drop events.
			if i%2000 == 1999 {
				em.Flush(30 * time.Second)
			}
		}
		last := events.Event{Seat: "s01", Turn: turn, Kind: events.TurnFinished, Data: events.Data{Status: "done", Note: turn + " ends"}}
		em.Emit(last, turn+"/end")
		em.Flush(30 * time.Second)
		wrote := time.Since(start)
		inPage(br, "the last event drawn", chromedp.PollFunction[bool](
			`(want) => [...document.querySelectorAll('#stream [data-kind="turn_finished"]')].some((e) => e.textContent.includes(want))`,
			chromedp.WithPollingInterval(5*time.Millisecond),
			chromedp.WithPollingTimeout(5*time.Minute),
			chromedp.WithPollingArgs(turn+" ends"),
		))
		took := time.Since(start)
		n := float64(seatPageEvents + 1)
		shown = append(shown, n/took.Seconds())
		written = append(written, n/wrote.Seconds())
		lag = append(lag, float64((took - wrote).Milliseconds()))
		if got := eval[int](br, `document.querySelectorAll("#stream .event").length`); got > 500 {
			b.Fatalf("the page holds %d lines; it keeps 500", got)
		}
	}
	sort.Float64s(shown)
	sort.Float64s(written)
	sort.Float64s(lag)
	b.ReportMetric(shown[len(shown)/2], "events/s")
	b.ReportMetric(written[len(written)/2], "written-events/s")
	b.ReportMetric(lag[len(lag)/2], "lag-ms")
	b.Logf("%d events: the page drew them at %.0f/s (median of %d), written at %.0f/s; the page trailed the writer by %.0f ms",
		seatPageEvents+1, shown[len(shown)/2], len(shown), written[len(written)/2], lag[len(lag)/2])
}

// benchEvent is the i-th event of a turn that keeps going: rounds of a
// start, eight deltas, the output, a tool call and its result.
func benchEvent(turn string, i int) events.Event {
	round, step := i/12+1, i%12
	ev := events.Event{Seat: "s01", Conversation: "bench", Turn: turn, Time: time.Now(), Data: events.Data{Round: round}}
	switch {
	case step == 0:
		ev.Kind, ev.Data.Profile = events.RoundStarted, "local"
	case step <= 8:
		ev.Kind, ev.Data.Attempt, ev.Data.Seq, ev.Data.Text = events.ModelDelta, 1, step, fmt.Sprintf("piece %d of round %d; ", step, round)
	case step == 9:
		ev.Kind, ev.Data.Text, ev.Data.Tools = events.ModelOutput, fmt.Sprintf("round %d's whole answer", round), []string{"lookup"}
	case step == 10:
		ev.Kind, ev.Data.Call, ev.Data.Tool, ev.Data.Args = events.ToolStarted, 1, "lookup", []byte(`{"q":"x"}`)
	default:
		ev.Kind, ev.Data.Call, ev.Data.Tool, ev.Data.Outcome, ev.Data.Result = events.ToolFinished, 1, "lookup", "ok", "found it"
	}
	return ev
}
