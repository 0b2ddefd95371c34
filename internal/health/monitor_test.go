package health

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// failedTargets records the seats whose tickets a pass failed, and why.
type failedTargets struct {
	mu      sync.Mutex
	reasons map[string]string
}

func (f *failedTargets) FailTarget(_ context.Context, handle, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reasons[handle] = reason
	return nil
}

func (f *failedTargets) reason(handle string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reasons[handle]
}

// monitorOrg is an org of n agent seats, s0 … s(n-1), on its own task
// queue, so Temporal's list of its seat workflows is empty.
func monitorOrg(t testing.TB, n int) *config.Config {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "company: { name: healthtest }\ntemporal: { task_queue: health-%s }\nhealth: { gone_after: 0s }\n", testenv.Suffix())
	b.WriteString("profiles: { local: { provider: scripted } }\nroles: { eng: { charter: works, profile: local } }\nseats:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - { handle: s%d, role: eng }\n", i)
	}
	org, err := config.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return org
}

func newMonitor(t testing.TB, org *config.Config, st *store.Store, seats Lister, log *testenv.Log) (*Monitor, *failedTargets) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mb, err := mailbox.Open(ctx, testenv.Stack(t).RedisURL, "health"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	failed := &failedTargets{reasons: map[string]string{}}
	return &Monitor{Org: org, Store: st, Mailbox: mb, Seats: seats, Tickets: failed, LiveWithin: 3 * time.Second,
		Log: slog.New(slog.NewTextHandler(log, nil))}, failed
}

func openTicketTo(t testing.TB, st *store.Store, to string) {
	t.Helper()
	_, _, err := st.CreateTicket(context.Background(), "key-"+to, crewlet.Ticket{From: "alice", To: to, Task: "fix it", Conversation: "c-" + to})
	if err != nil {
		t.Fatal(err)
	}
}

// Unknown is never absent: when Temporal's list does not answer, the pass
// records nothing, fails no ticket, and says why.
func TestAFailedListClassifiesNothing(t *testing.T) {
	t.Parallel()
	org := monitorOrg(t, 2)
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	unreachable, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	log := &testenv.Log{}
	m, failed := newMonitor(t, org, st, seatclient.New(unreachable, org), log)
	openTicketTo(t, st, "s0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := m.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Unknown || len(out.Transitions) != 0 {
		t.Errorf("pass = %+v; want unknown and no transition", out)
	}
	rows, err := st.SeatHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 || failed.reason("s0") != "" {
		t.Errorf("recorded %+v, failed tickets of s0 %q; want nothing", rows, failed.reason("s0"))
	}
	if !strings.Contains(log.String(), "seat_health_unknown") {
		t.Errorf("no seat_health_unknown in the log:\n%s", log)
	}
}

// A list that answers without a seat's workflow makes it gone (gone_after
// 0s here); two passes racing record and log each transition once, and
// the open ticket of the gone seat is failed with the cause.
func TestGoneIsRecordedOnceAcrossRacingPasses(t *testing.T) {
	t.Parallel()
	org := monitorOrg(t, 3)
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	tc, err := client.Dial(client.Options{HostPort: testenv.Stack(t).Temporal})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	log := &testenv.Log{}
	m, failed := newMonitor(t, org, st, seatclient.New(tc, org), log)
	openTicketTo(t, st, "s1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outs := make([]crewlet.HealthOutput, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() { outs[i], errs[i] = m.Pass(ctx) })
	}
	wg.Wait()
	var transitions []string
	for i := range outs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		for _, tr := range outs[i].Transitions {
			transitions = append(transitions, fmt.Sprintf("%s:%s→%s", tr.Seat, tr.From, tr.To))
		}
	}
	if len(transitions) != 3 {
		t.Fatalf("transitions %v; want each of the three seats unknown→gone once", transitions)
	}
	if n := strings.Count(log.String(), "msg=seat_health "); n != 3 {
		t.Errorf("%d seat_health lines; want 3:\n%s", n, log)
	}
	for _, seat := range []string{"s0", "s1", "s2"} {
		tr, err := st.HealthTransitions(ctx, seat, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr) != 1 || tr[0].From != crewlet.HealthUnknown || tr[0].To != crewlet.HealthGone {
			t.Errorf("%s: transitions %+v; want one unknown→gone", seat, tr)
		}
	}
	if r := failed.reason("s1"); !strings.HasPrefix(r, "seat s1 is gone: no seat workflow runs in Temporal") {
		t.Errorf("s1's tickets failed with %q; want the gone cause", r)
	}
	if r := failed.reason("s0"); r != "" {
		t.Errorf("s0 has no open ticket, yet its tickets were failed with %q", r)
	}
}
