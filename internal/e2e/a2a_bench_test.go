package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/testenv"
)

// a2aBenchTasks is how many tasks each round sends at once, one to each
// of as many seats.
const a2aBenchTasks = 100

// a2aBenchRounds is how many rounds each way runs, taking turns so that
// both meet the same load of the machine.
const a2aBenchRounds = 3

// BenchmarkA2ASendToCompleted measures, with 100 tasks in flight at once,
// the time from an A2A SendMessage sent (blocking, to a seat's endpoint)
// until it answers with the task completed; beside it, the same work
// through POST /tickets with wait, in the same company and run, rounds of
// the two taking turns. It reports p50 and p99 of each and their ratio
// (the target is at most 1.1). Run it with
//
//	go test ./internal/e2e -run '^$' -bench A2ASendToCompleted -benchtime 1x
func BenchmarkA2ASendToCompleted(b *testing.B) {
	c := newCompany(b, fleetOrg(b, a2aBenchTasks, 0))
	defer c.stopAll()
	// One principal sends far faster than the API's per-principal limits
	// let a person.
	c.setenv("CREWLET_API_MUTATIONS_PER_MINUTE=0", "CREWLET_MAILBOX_SENDER_PER_MINUTE=0")
	c.serve()
	c.waitAttached(2 * time.Minute)

	run := testenv.Suffix()
	var viaA2A, viaTickets []time.Duration
	for round := range a2aBenchRounds {
		viaA2A = append(viaA2A, concurrently(b, func(seat string) error {
			var sent a2a.SendMessageResponse
			msg := a2a.Message{MessageID: fmt.Sprintf("bench-%s-%d-%s", run, round, seat), Role: a2a.RoleUser, Parts: []a2a.Part{a2a.TextPart("work")}}
			if err := c.a2aCall("/a2a/seats/"+seat, a2a.MethodSendMessage, a2a.SendMessageRequest{Message: &msg}, &sent); err != nil {
				return err
			}
			if sent.Task == nil || sent.Task.Status.State != a2a.StateCompleted {
				return fmt.Errorf("SendMessage to %s answered %+v; want the task completed", seat, sent.Task)
			}
			return nil
		})...)
		viaTickets = append(viaTickets, concurrently(b, func(seat string) error {
			var tk crewlet.Ticket
			if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: seat, Task: "work", Wait: "5m"}, &tk); err != nil {
				return err
			}
			if tk.Phase != crewlet.TicketDone {
				return fmt.Errorf("POST /tickets to %s answered %s; want done", seat, tk.Phase)
			}
			return nil
		})...)
	}
	a2aP50, a2aP99 := p50p99(viaA2A)
	tkP50, tkP99 := p50p99(viaTickets)
	b.ReportMetric(float64(a2aP50.Milliseconds()), "a2a-p50-ms")
	b.ReportMetric(float64(a2aP99.Milliseconds()), "a2a-p99-ms")
	b.ReportMetric(float64(tkP50.Milliseconds()), "tickets-p50-ms")
	b.ReportMetric(float64(tkP99.Milliseconds()), "tickets-p99-ms")
	b.ReportMetric(a2aP50.Seconds()/tkP50.Seconds(), "a2a/tickets-p50")
	b.ReportMetric(a2aP99.Seconds()/tkP99.Seconds(), "a2a/tickets-p99")
	b.Logf("%d rounds of %d tasks at once: A2A SendMessage→completed p50 %s p99 %s; POST /tickets (wait)→done p50 %s p99 %s",
		a2aBenchRounds, a2aBenchTasks, a2aP50, a2aP99, tkP50, tkP99)
}

// concurrently runs send for each bench seat at once and returns how long
// each took; any error fails the benchmark.
func concurrently(b *testing.B, send func(seat string) error) []time.Duration {
	took := make([]time.Duration, a2aBenchTasks)
	errs := make([]error, a2aBenchTasks)
	var wg sync.WaitGroup
	for i, seat := range seatNames(a2aBenchTasks) {
		wg.Go(func() {
			start := time.Now()
			errs[i] = send(seat)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return took
}

// p50p99 are the median and the 99th percentile of all.
func p50p99(all []time.Duration) (time.Duration, time.Duration) {
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	return sorted[len(sorted)/2], sorted[len(sorted)*99/100]
}
