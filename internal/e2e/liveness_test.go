package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
)

// Node-level liveness (docs/architecture.md, "Tenure: which node runs a seat"):
// no seat holds its tenure with an activity; each node's presence loop detects
// dead peers, fences itself when cut off from Postgres, and tears down tenures
// that moved on.

// mcpFleetOrg writes an org of n seats s01..sNN whose role runs the MCP test
// server (stdio) with each tenure: "count" calls its read-only tool.
func mcpFleetOrg(t testing.TB, n int) string {
	t.Helper()
	bin := toolstest.BuildT(t)
	var seats strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&seats, "  - { handle: s%02d, role: clerk }\n", i)
	}
	return writeFile(t, "org.yaml", fmt.Sprintf(`company: { name: liveco }
profiles:
  tooled:
    provider: scripted
    rules:
      - match: '^count'
        tools: [ { name: ledger__read_counter, args: {} } ]
        reply: 'count: {{index .Results 0}}'
roles:
  clerk:
    charter: keeps the ledger
    profile: tooled
    mcp:
      - { name: ledger, command: [ %q ] }
seats:
%s`, bin, seats.String()))
}

// mcpChildren returns the pids of the MCP test servers a process started.
func mcpChildren(p *proc) []int {
	var out []int
	for _, c := range testenv.Children(p.cmd.Process.Pid) {
		if strings.HasPrefix(c.Comm, "testserver") && c.State != "Z" {
			out = append(out, c.PID)
		}
	}
	return out
}

// A node killed with kill -9: the failure detector of exactly one survivor
// claims it and tells its seats, which re-establish on survivors within
// about the heartbeat timeout without a message or a tool call to notice;
// each new tenure starts its MCP child with it, so a message sent right
// after the kill is answered by a tool call on a survivor, first time.
func TestDetectorMovesEverySeatOfAKilledNode(t *testing.T) {
	c := newCompany(t, mcpFleetOrg(t, 6))
	c.apiServer()
	nodes := map[string]*proc{"n1": c.worker("n1"), "n2": c.worker("n2"), "n3": c.worker("n3")}
	c.waitAttached(60 * time.Second)

	victim := c.busiestNode()
	if len(victim.SeatsHeld) == 0 {
		t.Fatalf("no node holds a seat: %+v", c.nodes())
	}
	before := c.seatMap()
	killedAt := time.Now()
	nodes[victim.NodeID].kill(t)
	sent := c.sendAll(victim.SeatsHeld, "count")

	moved := map[string]time.Duration{}
	testenv.Eventually(t, 30*time.Second, "every seat of the killed node on a survivor", func() error {
		now := c.seatMap()
		for _, h := range victim.SeatsHeld {
			if _, ok := moved[h]; ok {
				continue
			}
			if s := now[h]; s.Epoch > before[h].Epoch && s.Node != victim.Incarnation && s.Node != "" {
				moved[h] = time.Since(killedAt)
			}
		}
		if len(moved) < len(victim.SeatsHeld) {
			return fmt.Errorf("moved %d of %d: %v", len(moved), len(victim.SeatsHeld), moved)
		}
		return nil
	})
	for _, m := range sent {
		if reply := c.waitReply(m, 60*time.Second); !strings.HasPrefix(reply, "count: ") {
			t.Errorf("reply of %s: %q; want its tool call answered on a survivor", m.To, reply)
		}
	}
	for _, h := range victim.SeatsHeld {
		if st := c.state(h); st.Counters.Establishes != 2 || st.Counters.Failures != 0 {
			t.Errorf("seat %s: %d establishes, %d failed turns; want one re-establish and no failure: its tool call found its new tenure ready",
				h, st.Counters.Establishes, st.Counters.Failures)
		}
	}
	claims := 0
	for id, p := range nodes {
		if id == victim.NodeID {
			continue
		}
		for _, line := range linesWith(p.out.String(), "node_claimed") {
			if strings.Contains(line, "dead="+victim.Incarnation) {
				claims++
			}
		}
		held := 0
		for _, s := range c.seatMap() {
			if s.Node == c.liveIncarnation(id) {
				held++
			}
		}
		if got := len(mcpChildren(p)); got != held {
			t.Errorf("node %s runs %d MCP children for %d seats; want one each", id, got, held)
		}
	}
	if claims != 1 {
		t.Errorf("%d survivors claimed %s; want exactly one", claims, victim.Incarnation)
	}
	t.Logf("killed %s with %d seats; each on a survivor after %v", victim.Incarnation, len(victim.SeatsHeld), moved)
}

// A node cut off from Postgres (a test hook fails its presence writes) stops
// acting for its seats before any peer may take them: within half the
// heartbeat timeout it stops their MCP children and refuses their tool
// calls; then a peer's detector claims it and the seats move. No seat ever
// has an MCP child on both nodes.
func TestNodeCutOffFromPostgresFencesItselfBeforeItsSeatsMove(t *testing.T) {
	c := newCompany(t, mcpFleetOrg(t, 2))
	c.setenv("CREWLET_NODES_REBALANCE_INTERVAL=1h")
	c.apiServer()
	const cutAfter = 15 * time.Second
	cut := c.workerWithEnv("n1", []string{testhook.Hooks{CutStoreAfter: cutAfter}.Env()})
	c.waitAttached(60 * time.Second)
	n1 := c.liveIncarnation("n1")
	c.allOn(n1)
	testenv.Eventually(t, 20*time.Second, "n1's MCP children up", func() error {
		if n := len(mcpChildren(cut)); n != 2 {
			return fmt.Errorf("%d children", n)
		}
		return nil
	})
	survivor := c.worker("n2")

	// Watch both nodes' children until the seats are on n2: at no moment
	// may the two nodes together run more children than there are seats.
	var fencedAt, movedAt time.Time
	testenv.Eventually(t, 60*time.Second, "both seats moved to n2", func() error {
		old, cur := len(mcpChildren(cut)), len(mcpChildren(survivor))
		if old+cur > 2 {
			t.Fatalf("n1 runs %d MCP children and n2 %d for 2 seats: a seat's tools ran on both nodes", old, cur)
		}
		if fencedAt.IsZero() && old == 0 {
			fencedAt = time.Now()
		}
		on := 0
		for _, s := range c.seatMap() {
			if s.Kind == "agent" && s.Node != n1 && s.Node != "" {
				on++
			}
		}
		if on < 2 {
			return fmt.Errorf("%d seats moved; n1 children %d, n2 children %d", on, old, cur)
		}
		if cur != 2 {
			return fmt.Errorf("n2 runs %d children", cur)
		}
		movedAt = time.Now()
		return nil
	})
	if fencedAt.IsZero() || movedAt.Before(fencedAt) {
		t.Fatalf("n1's children gone at %v, seats moved at %v; want n1 fenced first", fencedAt, movedAt)
	}
	if lines := linesWith(cut.out.String(), "node_fenced_itself"); len(lines) == 0 {
		t.Fatalf("n1 never logged node_fenced_itself; output:\n%s", cut.out.String())
	}
	for _, h := range []string{"s01", "s02"} {
		if reply := c.waitReply(c.send(h, "count"), 60*time.Second); !strings.HasPrefix(reply, "count: ") {
			t.Errorf("reply of %s after the move: %q", h, reply)
		}
	}
}

// A tenure that moved on while its old node lives (the seat was told its
// host was lost, as after a false alarm): the old node notices within a
// beat that the seat's epoch is not its own any more and stops the MCP
// child it ran for it.
func TestFencedTenureStopsItsMCPChildOnALiveOldNode(t *testing.T) {
	c := newCompany(t, mcpFleetOrg(t, 1))
	c.setenv("CREWLET_NODES_REBALANCE_INTERVAL=1h")
	c.apiServer()
	old := c.worker("n1")
	c.waitAttached(60 * time.Second)
	n1 := c.liveIncarnation("n1")
	testenv.Eventually(t, 20*time.Second, "n1's MCP child up", func() error {
		if n := len(mcpChildren(old)); n != 1 {
			return fmt.Errorf("%d children", n)
		}
		return nil
	})
	c.worker("n2")
	before := c.seatMap()["s01"]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.temporal.SignalWorkflow(ctx, crewlet.SeatWorkflowID("s01"), "", crewlet.SignalHostLost,
		crewlet.HostLostRequest{Node: n1, By: "test"}); err != nil {
		t.Fatal(err)
	}
	var movedAt time.Time
	testenv.Eventually(t, 30*time.Second, "s01 on n2", func() error {
		if s := c.seatMap()["s01"]; s.Epoch <= before.Epoch || s.Node == n1 {
			return fmt.Errorf("s01 epoch %d on %s", s.Epoch, s.Node)
		}
		movedAt = time.Now()
		return nil
	})
	testenv.Eventually(t, 10*time.Second, "n1's MCP child for s01 gone", func() error {
		if n := len(mcpChildren(old)); n != 0 {
			return fmt.Errorf("n1 still runs %d children", n)
		}
		return nil
	})
	// The presence loop beats every third of the 3s heartbeat timeout.
	if took := time.Since(movedAt); took > 2*time.Second {
		t.Errorf("n1 stopped the moved tenure's child %v after the move; want within a beat (1s) and the poll", took)
	}
}

// Shutdown always ends: a serve whose seats have nowhere to go (it is the
// only node) still exits within its bound of SIGINT: the drain timeout and
// its grace, two heartbeat timeouts, the API's 10s.
func TestServeExitsWithinItsShutdownBoundWhenItsSeatsHaveNowhereToGo(t *testing.T) {
	c := newCompany(t, mcpFleetOrg(t, 3))
	c.setenv("CREWLET_NODES_DRAIN_TIMEOUT=2s")
	p := c.serve()
	c.waitAttached(60 * time.Second)
	const bound = 2*time.Second + 5*time.Second + 2*3*time.Second + 10*time.Second
	asked := time.Now()
	p.signal(t, syscall.SIGINT)
	p.wait(t, bound+5*time.Second)
	took := time.Since(asked)
	t.Logf("serve exited %v after SIGINT (bound %v)", took.Round(10*time.Millisecond), bound)
	if took > bound+time.Second {
		t.Fatalf("serve took %v to exit; want within its bound %v", took, bound)
	}
}

// A node whose start is slow after it registered (making its build current
// can wait on Temporal for minutes) beats its presence meanwhile: a peer
// does not claim it, though its host queue may already run tenures. Before,
// its first beat came after that check, and a check longer than the
// heartbeat timeout got a starting node claimed by its peers (seen with
// three nodes starting at once, their promotions in conflict).
func TestStartingNodeIsNotClaimedWhileItChecksItsBuild(t *testing.T) {
	c := newCompany(t, mcpFleetOrg(t, 2))
	c.apiServer()
	peer := c.worker("n1")
	c.waitAttached(60 * time.Second)
	const slow = 8 * time.Second // more than twice the heartbeat timeout (3 s)
	slowNode := c.workerWithEnv("n2", []string{testhook.Hooks{SlowStart: slow}.Env()})
	testenv.Eventually(t, slow+30*time.Second, "n2 started after its slow start", func() error {
		if len(linesWith(slowNode.out.String(), "node_started")) == 0 {
			return fmt.Errorf("n2 has not logged node_started")
		}
		return nil
	})
	if claims := linesWith(peer.out.String(), "node_claimed"); len(claims) != 0 {
		t.Fatalf("n1 claimed a node while n2 started slowly: %v", claims)
	}
	if lines := linesWith(slowNode.out.String(), "node_fenced_itself"); len(lines) != 0 {
		t.Fatalf("n2 fenced itself during its slow start: %v", lines)
	}
	c.liveIncarnation("n2") // fails the test unless n2 is live
}
