package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/testhook"
)

// traffic sends a steady stream of messages round-robin over seats until
// stopped, and returns what it sent.
type traffic struct {
	mu   sync.Mutex
	sent []crewlet.Message
	errs []error
	stop chan struct{}
	done chan struct{}
}

func startTraffic(c *company, seats []string, every time.Duration) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			case <-time.After(every):
			}
			var msg crewlet.Message
			err := c.call(http.MethodPost, "/seats/"+seats[i%len(seats)]+"/messages",
				api.SendMessageRequest{Text: fmt.Sprintf("job %d", i)}, &msg)
			tr.mu.Lock()
			if err != nil {
				tr.errs = append(tr.errs, err)
			} else {
				tr.sent = append(tr.sent, msg)
			}
			tr.mu.Unlock()
		}
	}()
	return tr
}

func (tr *traffic) finish(t *testing.T) []crewlet.Message {
	t.Helper()
	close(tr.stop)
	<-tr.done
	if len(tr.errs) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(tr.errs), tr.errs[0])
	}
	return tr.sent
}

// assertExactlyOneReply waits for every message's reply, and for the seats
// to have acked all their mail, so no turn is left to reply again; then it
// checks none got two.
func (c *company) assertExactlyOneReply(t *testing.T, sent []crewlet.Message, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var seats []string
	for _, m := range sent {
		c.waitReply(m, time.Until(deadline)+time.Second)
		if !slices.Contains(seats, m.To) {
			seats = append(seats, m.To)
		}
	}
	c.waitAnswered(time.Until(deadline)+time.Second, seats...)
	for _, m := range sent {
		if r := c.repliesTo(m); len(r) != 1 {
			t.Fatalf("%q to %s got %d replies %q; want exactly one", m.Body, m.To, len(r), r)
		}
	}
}

// interval is one completion the scripted probe saw.
type interval struct {
	node, event string
	start, end  time.Time
	ended       bool
}

// readProbe returns each seat's completions, in start order.
func readProbe(t testing.TB, path string) map[string][]*interval {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open probe: %v", err)
	}
	defer f.Close()
	open := map[string]*interval{}
	bySeat := map[string][]*interval{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r model.ProbeRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("probe line %q: %v", sc.Text(), err)
		}
		key := r.Node + "/" + r.Seat + "/" + r.EventID
		switch r.Phase {
		case "start":
			iv := &interval{node: r.Node, event: r.EventID, start: r.At}
			open[key] = iv
			bySeat[r.Seat] = append(bySeat[r.Seat], iv)
		case "end":
			if iv := open[key]; iv != nil {
				iv.end, iv.ended = r.At, true
				delete(open, key)
			}
		}
	}
	for _, ivs := range bySeat {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
	}
	return bySeat
}

// assertNoOverlap checks that no seat ran two completions at once. A
// completion that never ended must have been on a node killed at killedAt.
func assertNoOverlap(t *testing.T, bySeat map[string][]*interval, killed string, killedAt time.Time) {
	t.Helper()
	for seat, ivs := range bySeat {
		for _, iv := range ivs {
			if !iv.ended {
				if iv.node != killed {
					t.Fatalf("seat %s: completion of %s on %s never ended", seat, iv.event, iv.node)
				}
				iv.end = killedAt
			}
		}
		for i := 1; i < len(ivs); i++ {
			if ivs[i].start.Before(ivs[i-1].end) {
				t.Fatalf("seat %s ran two turns at once: %s on %s [%s, %s] and %s on %s from %s",
					seat, ivs[i-1].event, ivs[i-1].node, ivs[i-1].start.Format(time.StampMicro), ivs[i-1].end.Format(time.StampMicro),
					ivs[i].event, ivs[i].node, ivs[i].start.Format(time.StampMicro))
			}
		}
	}
}

func seatNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s%02d", i+1)
	}
	return out
}

func TestFailoverMovesEverySeatOfAKilledNode(t *testing.T) {
	const seats = 30
	c := newCompany(t, fleetOrg(t, seats, 300*time.Millisecond))
	probe := filepath.Join(t.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env())
	c.apiServer()
	nodes := map[string]*proc{"n1": c.worker("n1"), "n2": c.worker("n2"), "n3": c.worker("n3")}
	c.waitAttached(60 * time.Second)

	tr := startTraffic(c, seatNames(seats), 30*time.Millisecond)
	time.Sleep(2 * time.Second)
	victim := c.busiestNode()
	before := map[string]api.SeatSummary{}
	for _, s := range c.seats() {
		before[s.Handle] = s
	}
	killedAt := time.Now()
	nodes[victim.NodeID].kill(t)
	t.Logf("killed %s holding %d seats", victim.Incarnation, len(victim.SeatsHeld))
	time.Sleep(6 * time.Second)
	sent := tr.finish(t)
	t.Logf("sent %d messages", len(sent))

	c.assertExactlyOneReply(t, sent, 90*time.Second)

	after := map[string]api.SeatSummary{}
	for _, s := range c.seats() {
		after[s.Handle] = s
	}
	for _, h := range victim.SeatsHeld {
		b, a := before[h], after[h]
		if a.Epoch <= b.Epoch || a.Node == victim.Incarnation || a.Node == "" {
			t.Errorf("seat %s: before epoch %d on %s, after epoch %d on %s; want a higher epoch on a survivor",
				h, b.Epoch, b.Node, a.Epoch, a.Node)
		}
	}
	assertNoOverlap(t, readProbe(t, probe), victim.Incarnation, killedAt)
}
