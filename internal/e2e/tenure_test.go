package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/workflows"
)

// Tenure across the fleet
// (docs/architecture.md, "Tenure: which node runs a seat"): node drain by
// SIGTERM and through the API, a joining node getting work, label placement,
// the watchdog.

// seatMap returns GET /seats keyed by handle.
func (c *company) seatMap() map[string]api.SeatSummary {
	c.t.Helper()
	out := map[string]api.SeatSummary{}
	for _, s := range c.seats() {
		out[s.Handle] = s
	}
	return out
}

// liveIncarnation returns the live incarnation of a node id.
func (c *company) liveIncarnation(nodeID string) string {
	c.t.Helper()
	for _, n := range c.nodes().Nodes {
		if n.NodeID == nodeID && n.Live {
			return n.Incarnation
		}
	}
	c.t.Fatalf("node %s is not live; GET /nodes: %+v", nodeID, c.nodes())
	return ""
}

// busiestNode returns the live node holding the most seats.
func (c *company) busiestNode() api.NodeView {
	var busiest api.NodeView
	for _, n := range c.nodes().Nodes {
		if n.Live && len(n.SeatsHeld) > len(busiest.SeatsHeld) {
			busiest = n
		}
	}
	return busiest
}

// allOn checks that every agent seat is held by incarnation and returns the
// seats.
func (c *company) allOn(incarnation string) map[string]api.SeatSummary {
	c.t.Helper()
	seats := c.seatMap()
	for h, s := range seats {
		if s.Kind == "agent" && s.Node != incarnation {
			c.t.Fatalf("seat %s is on %q (epoch %d); want every seat on %s", h, s.Node, s.Epoch, incarnation)
		}
	}
	return seats
}

// probeRuns returns the probe's completions of one event, or none while the
// probe file does not exist yet.
func probeRuns(t testing.TB, path, seat, eventID string) []*interval {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	var out []*interval
	for _, iv := range readProbe(t, path)[seat] {
		if iv.event == eventID {
			out = append(out, iv)
		}
	}
	return out
}

// waitTurnInFlight waits until the seat's turn for msg has started on
// incarnation (the probe saw the completion start and the seat reports a
// turn) and has not ended yet.
func (c *company) waitTurnInFlight(probe string, msg crewlet.Message, incarnation string) {
	c.t.Helper()
	testenv.Eventually(c.t, 20*time.Second, "turn for "+msg.Body+" in flight on "+incarnation, func() error {
		runs := probeRuns(c.t, probe, msg.To, msg.EventID)
		if len(runs) == 0 {
			return fmt.Errorf("completion of %s not started yet", msg.EventID)
		}
		if runs[0].node != incarnation || runs[0].ended {
			c.t.Fatalf("completion of %s: got node %s ended=%v; want in flight on %s", msg.EventID, runs[0].node, runs[0].ended, incarnation)
		}
		if st, err := c.tryState(msg.To); err != nil || st.Turn == nil {
			return fmt.Errorf("seat %s reports no turn (status %s, %v)", msg.To, st.Status, err)
		}
		return nil
	})
}

// tryState returns a seat's live state, or an error while it has none.
func (c *company) tryState(handle string) (crewlet.SeatState, error) {
	var d api.SeatDetail
	if err := c.call(http.MethodGet, "/seats/"+handle, nil, &d); err != nil {
		return crewlet.SeatState{}, err
	}
	if d.State == nil {
		return crewlet.SeatState{}, fmt.Errorf("seat %s has no state: %s", handle, d.StateError)
	}
	return *d.State, nil
}

// sendAll sends one message to each seat.
func (c *company) sendAll(handles []string, text string) []crewlet.Message {
	c.t.Helper()
	var out []crewlet.Message
	for _, h := range handles {
		out = append(out, c.send(h, text+" "+h))
	}
	return out
}

// assertMovedTo checks that every seat of before now runs on incarnation at a
// higher epoch.
func (c *company) assertMovedTo(before map[string]api.SeatSummary, incarnation string) {
	c.t.Helper()
	after := c.seatMap()
	for h, b := range before {
		if b.Kind != "agent" {
			continue
		}
		a := after[h]
		if a.Node != incarnation || a.Epoch <= b.Epoch {
			c.t.Errorf("seat %s: before epoch %d on %s, after epoch %d on %q; want a higher epoch on %s",
				h, b.Epoch, b.Node, a.Epoch, a.Node, incarnation)
		}
	}
}

func TestSigtermDrainFinishesTheTurnInFlightAndMovesEverySeat(t *testing.T) {
	const seats = 6
	c := newCompany(t, fleetOrg(t, seats, 2*time.Second))
	probe := filepath.Join(t.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env(), "CREWLET_NODES_DRAIN_TIMEOUT=20s", "CREWLET_NODES_REBALANCE_INTERVAL=1h")
	c.apiServer()
	n1 := c.worker("n1")
	c.waitAttached(30 * time.Second)
	c.worker("n2")
	inc1, inc2 := c.liveIncarnation("n1"), c.liveIncarnation("n2")
	before := c.allOn(inc1)

	msg := c.send("s01", "in flight at drain")
	c.waitTurnInFlight(probe, msg, inc1)
	stoppedAt := time.Now()
	n1.signal(t, syscall.SIGTERM)
	if code := n1.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("n1 after SIGTERM: got exit code %d; want 0", code)
	}
	t.Logf("n1 drained and exited in %s", time.Since(stoppedAt).Round(time.Millisecond))
	if out := n1.out.String(); !strings.Contains(out, "node_drained") {
		t.Errorf("n1 output has no node_drained: its drain did not complete\n%s", out)
	}

	c.assertExactlyOneReply(t, []crewlet.Message{msg}, 20*time.Second)
	runs := probeRuns(t, probe, "s01", msg.EventID)
	if len(runs) != 1 || runs[0].node != inc1 || !runs[0].ended {
		var got []string
		for _, r := range runs {
			got = append(got, fmt.Sprintf("%s ended=%v", r.node, r.ended))
		}
		t.Fatalf("completions of the in-flight message: got %v; want exactly one, finished on %s", got, inc1)
	}

	c.waitAttached(30 * time.Second)
	c.assertMovedTo(before, inc2)
	c.assertExactlyOneReply(t, c.sendAll(seatNames(seats), "after drain"), 30*time.Second)
}

func TestDrainThroughTheAPIMovesSeatsAndStopsTheNode(t *testing.T) {
	const seats = 4
	c := newCompany(t, fleetOrg(t, seats, 200*time.Millisecond))
	c.setenv("CREWLET_NODES_DRAIN_TIMEOUT=20s", "CREWLET_NODES_REBALANCE_INTERVAL=1h")
	c.apiServer()
	n1 := c.worker("n1")
	c.waitAttached(30 * time.Second)
	n2 := c.worker("n2")
	inc1, inc2 := c.liveIncarnation("n1"), c.liveIncarnation("n2")
	before := c.allOn(inc1)

	status, body, err := c.raw(http.MethodPost, "/nodes/n1/drain", nil)
	if err != nil {
		t.Fatal(err)
	}
	var resp api.DrainNodeResponse
	if status != http.StatusAccepted || json.Unmarshal(body, &resp) != nil || len(resp.Draining) != 1 || resp.Draining[0] != inc1 {
		t.Fatalf("POST /nodes/n1/drain: got %d %s; want 202 {\"draining\":[%q]}", status, body, inc1)
	}
	// Asking again while it drains (409) or once it left (404) is an error.
	assertAPIError(t, c, "/nodes/n1/drain", http.StatusConflict, http.StatusNotFound)
	if code := n1.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("n1 after POST /nodes/n1/drain: got exit code %d; want 0", code)
	}
	c.waitAttached(30 * time.Second)
	c.assertMovedTo(before, inc2)
	assertAPIError(t, c, "/nodes/n1/drain", http.StatusNotFound)
	assertAPIError(t, c, "/nodes/"+inc1+"/drain", http.StatusNotFound)
	assertAPIError(t, c, "/nodes/no-such-node/drain", http.StatusNotFound)

	// The CLI drains by incarnation, and reports an unknown node.
	c.worker("n3")
	inc3 := c.liveIncarnation("n3")
	before = c.seatMap()
	out, err := c.cli("nodes", "drain", inc2)
	if err != nil || !strings.Contains(out, "draining "+inc2) {
		t.Fatalf("crewlet nodes drain %s: got %v, output %q; want success naming %s", inc2, err, out, inc2)
	}
	if code := n2.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("n2 after `crewlet nodes drain`: got exit code %d; want 0", code)
	}
	c.waitAttached(30 * time.Second)
	c.assertMovedTo(before, inc3)
	out, err = c.cli("nodes", "drain", "no-such-node")
	if err == nil || !strings.Contains(out, "no-such-node") {
		t.Fatalf("crewlet nodes drain no-such-node: got err %v, output %q; want a failure naming the node", err, out)
	}
	c.assertExactlyOneReply(t, c.sendAll(seatNames(seats), "after drains"), 30*time.Second)
}

// assertAPIError posts a drain and checks it fails with one of the statuses
// and a JSON error body.
func assertAPIError(t *testing.T, c *company, path string, statuses ...int) {
	t.Helper()
	status, body, err := c.raw(http.MethodPost, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}
	ok := false
	for _, s := range statuses {
		ok = ok || status == s
	}
	if !ok || json.Unmarshal(body, &e) != nil || e.Error == "" || e.Detail == "" {
		t.Fatalf("POST %s: got %d %s; want one of %v with a JSON error body", path, status, body, statuses)
	}
}

func TestJoiningNodeGetsItsShareUnderTraffic(t *testing.T) {
	const seats = 20
	c := newCompany(t, fleetOrg(t, seats, 100*time.Millisecond))
	c.setenv("CREWLET_NODES_REBALANCE_INTERVAL=2s")
	c.apiServer()
	c.worker("n1")
	c.waitAttached(60 * time.Second)
	inc1 := c.liveIncarnation("n1")
	c.allOn(inc1)

	tr := startTraffic(c, seatNames(seats), 40*time.Millisecond)
	joined := time.Now()
	c.worker("n2")
	inc2 := c.liveIncarnation("n2")
	// Ten moves at four a pass every 2 s: a handful of passes.
	var last map[string]int
	testenv.Eventually(t, 30*time.Second, "each node holds 10±1 seats", func() error {
		last = map[string]int{}
		for _, n := range c.nodes().Nodes {
			if n.Live {
				last[n.Incarnation] = len(n.SeatsHeld)
			}
		}
		if len(last) != 2 || last[inc1] < 9 || last[inc1] > 11 || last[inc2] < 9 || last[inc2] > 11 {
			return fmt.Errorf("seats held: got %v; want 10±1 on each of %s and %s", last, inc1, inc2)
		}
		return nil
	})
	t.Logf("balanced %v in %s after the join", last, time.Since(joined).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	sent := tr.finish(t)
	t.Logf("sent %d messages", len(sent))
	c.assertExactlyOneReply(t, sent, 60*time.Second)
	c.waitAttached(30 * time.Second)
	held := map[string]int{}
	for _, s := range c.seats() {
		held[s.Node]++
	}
	if held[inc1] < 9 || held[inc1] > 11 || held[inc2] < 9 || held[inc2] > 11 || held[inc1]+held[inc2] != seats {
		t.Fatalf("seats per node after traffic: got %v; want 10±1 on each of %s and %s", held, inc1, inc2)
	}

	out, err := c.cli("nodes", "ls")
	if err != nil || !strings.Contains(out, inc1) || !strings.Contains(out, inc2) {
		t.Fatalf("crewlet nodes ls: got err %v, output:\n%s\nwant both %s and %s listed", err, out, inc1, inc2)
	}
}

// A seat no live node matches shows unplaceable, with its reason, in its
// state, GET /seats and its health, and backs off (doubling to a minute);
// a node with its labels joining wakes it, so it is placed at once rather
// than at the end of its wait.
func TestPinnedSeatWaitsForANodeWithItsLabels(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 2, 100*time.Millisecond, "{ handle: g1, role: gitter }"))
	probe := filepath.Join(t.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env(), "CREWLET_HEALTH_INTERVAL=1s")
	c.apiServer()
	c.worker("n1")
	inc1 := c.liveIncarnation("n1")

	if got := c.nodes().Unplaceable; len(got) != 1 || got[0] != "g1" {
		t.Fatalf("GET /nodes unplaceable with only an unlabelled node: got %v; want [g1]", got)
	}
	testenv.Eventually(t, 20*time.Second, "g1 reports why it cannot be placed", func() error {
		st, err := c.tryState("g1")
		if err != nil {
			return err
		}
		if st.Status != crewlet.StatusUnplaceable || !strings.Contains(st.LastError, "none of the 1 live nodes carries its placement labels") || st.Unplaceable == nil {
			return fmt.Errorf("g1: got status %s, last_error %q, unplaceable %+v; want unplaceable, no live node with its labels", st.Status, st.LastError, st.Unplaceable)
		}
		t.Logf("g1: %s, %q", st.Status, st.LastError)
		return nil
	})
	testenv.Eventually(t, 20*time.Second, "GET /seats shows g1 unplaceable and why", func() error {
		g1 := c.seatMap()["g1"]
		if g1.Status != string(crewlet.StatusUnplaceable) || g1.Health != crewlet.HealthUnplaceable ||
			!strings.Contains(g1.HealthCause, "no live node matches its placement labels") {
			return fmt.Errorf("g1: got status %s, health %s (%s); want unplaceable, no node matching its labels", g1.Status, g1.Health, g1.HealthCause)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "s01 and s02 attached on n1", func() error {
		s := c.seatMap()
		for _, h := range []string{"s01", "s02"} {
			if s[h].Status != string(crewlet.StatusIdle) || s[h].Node != inc1 {
				return fmt.Errorf("seat %s is %s on %q", h, s[h].Status, s[h].Node)
			}
		}
		return nil
	})
	sending := time.Now()
	msg := c.send("g1", "needs git")
	c.waitWakeHandled("g1", sending, replyWait)
	if r := c.repliesTo(msg); len(r) != 0 {
		t.Fatalf("g1 answered %q with no node labelled tools=git alive; want no reply", r)
	}
	if st := c.state("g1"); st.Node != "" || st.Epoch != 0 {
		t.Fatalf("g1 with no matching node: got node %q epoch %d; want none", st.Node, st.Epoch)
	}

	// Join while g1's next try is well ahead (its waits double: 16 s, then
	// 32 s), so a placement before it can only be the join's wake.
	var next time.Time
	var waits int
	testenv.Eventually(t, 60*time.Second, "g1 backed off to a wait of 16 s or more", func() error {
		st, err := c.tryState("g1")
		if err != nil {
			return err
		}
		if u := st.Unplaceable; u == nil || time.Until(u.Retry) < 8*time.Second {
			return fmt.Errorf("g1's next try: %+v", st.Unplaceable)
		}
		next, waits = st.Unplaceable.Retry, st.Unplaceable.Waits
		return nil
	})
	joined := time.Now()
	n2 := c.worker("n2", "--labels", "tools=git")
	live := time.Now()
	inc2 := c.liveIncarnation("n2")
	var placed time.Time
	testenv.Eventually(t, 20*time.Second, "g1 placed on n2", func() error {
		st, err := c.tryState("g1")
		if err != nil {
			return err
		}
		if st.Node != inc2 {
			return fmt.Errorf("g1 is %s on %q", st.Status, st.Node)
		}
		placed = time.Now()
		return nil
	})
	t.Logf("g1 (%d waits so far) placed %s after n2 was live, %s after it started; its own next try was %s after the join",
		waits, placed.Sub(live).Round(time.Millisecond), placed.Sub(joined).Round(time.Millisecond), next.Sub(joined).Round(time.Millisecond))
	if !placed.Before(next) {
		t.Fatalf("g1 placed at %s, not before its own next try at %s: the joining node did not wake it", placed.Format(time.RFC3339Nano), next.Format(time.RFC3339Nano))
	}
	// A beat is nodes.heartbeat_timeout/3 (1 s here).
	if beats := float64(placed.Sub(live)) / float64(time.Second); beats > 2 {
		t.Fatalf("g1 placed %.1f beats after n2 was live; want within two", beats)
	}
	if woken := linesWith(n2.out.String(), "unplaceable_woken"); len(woken) != 1 || !strings.Contains(woken[0], "g1") {
		t.Fatalf("n2 logged %q; want one unplaceable_woken naming g1", woken)
	}
	c.assertExactlyOneReply(t, []crewlet.Message{msg}, 20*time.Second)
	t.Logf("g1 answered %s after the labelled node joined", time.Since(joined).Round(time.Millisecond))
	st := c.state("g1")
	if st.Node != inc2 || st.Epoch != 1 || st.Counters.Establishes != 1 || st.Unplaceable != nil || st.LastError != "" {
		t.Fatalf("g1 after n2 joined: got node %q epoch %d establishes %d unplaceable %+v last_error %q; want its first tenure (epoch 1) on %s and nothing left of the wait",
			st.Node, st.Epoch, st.Counters.Establishes, st.Unplaceable, st.LastError, inc2)
	}
	// The model call itself may run on any node; the tenure is what is pinned.
	if runs := probeRuns(t, probe, "g1", msg.EventID); len(runs) != 1 {
		t.Fatalf("g1's model ran %d times; want once", len(runs))
	}
	for _, n := range c.nodes().Nodes {
		if n.Incarnation == inc1 && slices.Contains(n.SeatsHeld, "g1") {
			t.Fatalf("n1 holds g1: %v; want g1 only on %s", n.SeatsHeld, inc2)
		}
	}
	if got := c.nodes().Unplaceable; len(got) != 0 {
		t.Fatalf("GET /nodes unplaceable with a node labelled tools=git: got %v; want none", got)
	}
}

func TestWatchdogEndsAWedgedNodeAndSparesADrainingOne(t *testing.T) {
	// A 12 s turn: the second node's drain waits for it.
	const turn = 12 * time.Second
	c := newCompany(t, fleetOrg(t, 1, turn))
	probe := filepath.Join(t.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env(), "CREWLET_NODES_DRAIN_TIMEOUT=30s")
	c.apiServer()

	started := time.Now()
	wedged := c.workerWithEnv("w1", []string{testhook.Hooks{WedgeAfter: time.Second}.Env()})
	if code := wedged.wait(t, 15*time.Second); code != 75 {
		t.Fatalf("wedged worker: got exit code %d; want 75", code)
	}
	t.Logf("wedged worker exited after %s", time.Since(started).Round(time.Millisecond))
	if lines := linesWith(wedged.out.String(), "watchdog"); len(lines) != 1 {
		t.Fatalf("wedged worker printed %d lines about the watchdog: %q; want exactly one", len(lines), lines)
	}

	// A node shutting down may block its loops: here its presence loop
	// wedges 7 s after it starts, in the middle of a drain that waits for the
	// turn in flight. With the watchdog disarmed for the shutdown, the node
	// finishes the turn, hands the seat back and exits 0: no 75, no hang.
	const wedgeAfter = 7 * time.Second
	started = time.Now()
	n2 := c.workerWithEnv("n2", []string{testhook.Hooks{WedgeAfter: wedgeAfter}.Env()})
	inc2 := c.liveIncarnation("n2")
	c.waitAttached(30 * time.Second)
	msg := c.send("s01", "in flight at shutdown")
	c.waitTurnInFlight(probe, msg, inc2)
	n2.signal(t, syscall.SIGTERM)
	if at := time.Since(started); at > wedgeAfter-time.Second {
		t.Fatalf("SIGTERM sent %s after the node started; the test needs it before the wedge at %s", at, wedgeAfter)
	}
	if code := n2.wait(t, turn+15*time.Second); code != 0 {
		t.Fatalf("worker wedged during its drain: got exit code %d after %s; want 0", code, time.Since(started).Round(time.Millisecond))
	}
	t.Logf("wedged-while-draining worker exited 0 after %s", time.Since(started).Round(time.Millisecond))
	out := n2.out.String()
	if lines := linesWith(out, "watchdog"); len(lines) != 0 {
		t.Fatalf("draining worker printed %q; want nothing from the watchdog", lines)
	}
	if !strings.Contains(out, "node_wedged_by_test_hook") || !strings.Contains(out, "node_drained") {
		t.Fatalf("draining worker output lacks node_wedged_by_test_hook or node_drained: the wedge did not fall in the drain\n%s", out)
	}
	c.assertExactlyOneReply(t, []crewlet.Message{msg}, 5*time.Second)
}

// waitLogged waits until each of procs has logged a line with word.
func waitLogged(t testing.TB, timeout time.Duration, word string, procs ...*proc) {
	t.Helper()
	testenv.Eventually(t, timeout, "every process logging "+word, func() error {
		for _, p := range procs {
			if len(linesWith(p.out.String(), word)) == 0 {
				return fmt.Errorf("%s has not logged %s", p.name, word)
			}
		}
		return nil
	})
}

func linesWith(out, word string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, word) {
			lines = append(lines, l)
		}
	}
	return lines
}

// A seat workflow for a handle no node's org has (started straight through
// Temporal, as config skew or a hand-started run leaves one): the node it
// is placed on refuses the tenure. It used to loop place → refused →
// unplaceable with no wait, hundreds of placements a second; it shows
// unplaceable with the refusal and backs off, its history growing by a
// constant per wait. The reconcile duty stops a seat the org does not have
// ("not in the org"); its pass, once a minute by default, could come during
// the back-off, so here it runs once an hour.
func TestSeatNoOrgHasBacksOff(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 100*time.Millisecond))
	c.setenv("CREWLET_NODES_RECONCILE_INTERVAL=1h")
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	const ghost = "ghost"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: crewlet.SeatWorkflowID(ghost), TaskQueue: c.taskQueue,
		TypedSearchAttributes: workflows.SeatSearchAttributes(ghost, "worker"),
	}, crewlet.WorkflowSeat, crewlet.SeatInput{Handle: ghost, Role: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	state := func() (crewlet.SeatState, error) {
		var st crewlet.SeatState
		v, err := c.temporal.QueryWorkflow(ctx, run.GetID(), "", crewlet.QueryState)
		if err == nil {
			err = v.Get(&st)
		}
		return st, err
	}
	var st crewlet.SeatState
	testenv.Eventually(t, 40*time.Second, "ghost backed off four times", func() (err error) {
		if st, err = state(); err != nil {
			return err
		}
		if st.Unplaceable == nil || st.Unplaceable.Waits < 4 {
			return fmt.Errorf("ghost is %s: %+v", st.Status, st.Unplaceable)
		}
		return nil
	})
	if st.Status != crewlet.StatusUnplaceable || !strings.Contains(st.LastError, "has no agent seat ghost") {
		t.Fatalf("ghost: got status %s, last error %q; want unplaceable, refused by the node's org file", st.Status, st.LastError)
	}
	// The waits were 1, 2, 4 and 8 s; each cost one placement, and the
	// first refusal one retry at once.
	if st.Unplaceable.Attempts > st.Unplaceable.Waits+2 {
		t.Fatalf("ghost made %d attempts in %d waits; want one per wait", st.Unplaceable.Attempts, st.Unplaceable.Waits)
	}
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	events := desc.GetWorkflowExecutionInfo().GetHistoryLength()
	// Per wait: a placement marker, the timer started and fired, a
	// workflow task (3 events); the start and the version marker besides.
	if most := int64(20 + 8*st.Unplaceable.Attempts); events > most {
		t.Fatalf("ghost's history has %d events after %d attempts; want at most %d", events, st.Unplaceable.Attempts, most)
	}
	t.Logf("ghost: %d attempts, %d waits, %d history events since %s; last error %q", st.Unplaceable.Attempts,
		st.Unplaceable.Waits, events, time.Since(st.Unplaceable.Since).Round(time.Millisecond), st.LastError)
}
