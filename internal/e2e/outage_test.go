package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
)

// An outage is not a partition: Postgres down for 10 s under load, with
// two nodes, moves nothing. Nobody can write the store, so nobody can claim
// anybody, and each node sees that in the Redis witness and keeps its
// seats, their MCP children (the very same processes) and their tenures;
// when Postgres returns nobody is claimed, and every message sent before,
// during and after is answered exactly once. Down is both a server that
// refuses (stopped) and one that hangs (frozen: every query waits, so the
// seats' local activities run out of time, which is not a lost host).
func TestPostgresOutageMovesNoSeatAndLosesNoMessage(t *testing.T) {
	for _, outage := range []struct {
		name       string
		down, back func(*testenv.Postgres)
	}{
		{"stopped", (*testenv.Postgres).Stop, (*testenv.Postgres).Start},
		{"frozen", (*testenv.Postgres).Freeze, (*testenv.Postgres).Thaw},
	} {
		t.Run(outage.name, func(t *testing.T) {
			rideOutPostgresOutage(t, outage.down, outage.back)
		})
	}
}

func rideOutPostgresOutage(t *testing.T, down, back func(*testenv.Postgres)) {
	pg := testenv.OwnPostgres(t)
	const seats = 4
	c := newCompanyOn(t, mcpFleetOrg(t, seats), pg.URL)
	c.setenv("CREWLET_NODES_HEARTBEAT_TIMEOUT=3s", "CREWLET_NODES_REBALANCE_INTERVAL=1h")
	c.apiServer()
	n1 := c.worker("n1")
	n2 := c.worker("n2")
	c.waitAttached(60 * time.Second)
	handles := make([]string, seats)
	for i := range handles {
		handles[i] = fmt.Sprintf("s%02d", i+1)
	}
	// Every seat answers once before the outage, so each tenure's MCP
	// child is up.
	for _, m := range c.sendAll(handles, "count") {
		c.waitReply(m, 60*time.Second)
	}
	before := c.seatMap()
	children := map[string][]int{"n1": mcpChildren(n1), "n2": mcpChildren(n2)}
	if got := len(children["n1"]) + len(children["n2"]); got != seats {
		t.Fatalf("%d MCP children before the outage (%v); want one per seat, %d", got, children, seats)
	}

	// Load: a message every 250 ms, round the seats, from 2 s before the
	// outage to 3 s after it. The load's messages need no tool: the mail
	// held up by the outage is answered in one batch per seat, and a batch
	// shares its turn's max_rounds.
	load := c.steadyLoad(handles, 60, 250*time.Millisecond)
	time.Sleep(2 * time.Second)
	down(pg)
	stoppedAt := time.Now()
	// Both nodes report riding the outage out: the positive signal that
	// each saw it and decided, not a quiet ten seconds.
	waitLogged(t, 10*time.Second, "node_riding_out_store_outage", n1, n2)
	time.Sleep(time.Until(stoppedAt.Add(10 * time.Second)))
	back(pg)
	t.Logf("postgres was down %v", time.Since(stoppedAt).Round(time.Millisecond))
	c.echoedOnce(load(), handles)

	after := c.seatMap()
	for _, h := range handles {
		if after[h].Node != before[h].Node || after[h].Epoch != before[h].Epoch {
			t.Errorf("seat %s moved: on %s at epoch %d before the outage, on %s at %d after",
				h, before[h].Node, before[h].Epoch, after[h].Node, after[h].Epoch)
		}
	}
	for name, p := range map[string]*proc{"n1": n1, "n2": n2} {
		if got := mcpChildren(p); !slices.Equal(got, children[name]) {
			t.Errorf("%s's MCP children were %v before the outage and are %v after; want the same processes", name, children[name], got)
		}
		for _, event := range []string{"node_fenced_itself", "node_claimed", "seat_detached"} {
			if lines := linesWith(p.out.String(), event); len(lines) != 0 {
				t.Errorf("%s logged %s during a shared outage: %v", name, event, lines)
			}
		}
	}
}

// A node that loses Postgres while it starts keeps running: its workers
// poll and it may host seats already, so ending it would move them. Its
// start of the seats waits for the store and is whole once it is back. The
// node here is the only one and the API starts no seat at boot, so the
// seats answer only if the node's own start, tried again, started them.
// Before, the boot's seat start failing ended the process ("start seats:
// … connection refused"), seen in CI when an outage test's second node was
// still starting.
func TestPostgresOutageWhileANodeStartsEndsNoNode(t *testing.T) {
	pg := testenv.OwnPostgres(t)
	handles := []string{"s01", "s02"}
	c := newCompanyOn(t, mcpFleetOrg(t, len(handles)), pg.URL)
	c.apiServer()
	// The slow start holds the node after it registered and beats, before
	// it makes its build current and starts the seats: the outage begins
	// in that window.
	const slow = 4 * time.Second
	n1 := c.workerWithEnv("n1", []string{testhook.Hooks{SlowStart: slow}.Env()})
	pg.Stop()
	waitLogged(t, slow+30*time.Second, "seats_start_incomplete", n1)
	pg.Start()
	waitLogged(t, 60*time.Second, "seats_started", n1)
	select {
	case <-n1.done:
		t.Fatalf("n1 exited after an outage during its start: %s", n1.out.String())
	default:
	}
	if lines := linesWith(n1.out.String(), "node_started"); len(lines) != 1 {
		t.Fatalf("n1 logged node_started %d times; want once: %v", len(lines), lines)
	}
	c.waitAttached(60 * time.Second)
	for _, m := range c.sendAll(handles, "count") {
		c.waitReply(m, 60*time.Second)
	}
}

// steadyLoad sends n messages ("hello i") round the handles, one every
// period, in the background; a send the API refuses is sent again until it
// is taken, and only taken ones count. The function it returns waits for
// the last send and returns the messages taken.
func (c *company) steadyLoad(handles []string, n int, every time.Duration) func() []crewlet.Message {
	var (
		accepted []crewlet.Message
		refused  int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			text := fmt.Sprintf("hello %d", i)
			to := handles[i%len(handles)]
			for {
				var msg crewlet.Message
				if err := c.call(http.MethodPost, "/seats/"+to+"/messages", api.SendMessageRequest{Text: text}, &msg); err == nil {
					accepted = append(accepted, msg)
					break
				}
				refused++
				time.Sleep(every)
			}
			time.Sleep(every)
		}
	}()
	return func() []crewlet.Message {
		<-done
		c.t.Logf("%d messages taken, %d sends refused and sent again", len(accepted), refused)
		return slices.Clone(accepted)
	}
}

// echoedOnce fails the test unless each message got its scripted echo
// ("[seat] text") exactly once, and the seats have nothing left to answer.
func (c *company) echoedOnce(msgs []crewlet.Message, handles []string) {
	c.t.Helper()
	for _, m := range msgs {
		if reply, want := c.waitReply(m, 2*time.Minute), fmt.Sprintf("[%s] %s", m.To, m.Body); reply != want {
			c.t.Errorf("reply to %q: %q; want %q", m.Body, reply, want)
		}
	}
	c.waitAnswered(time.Minute, handles...)
	for _, m := range msgs {
		if r := c.repliesTo(m); len(r) != 1 {
			c.t.Errorf("%q answered %d times: %v", m.Body, len(r), r)
		}
	}
}
