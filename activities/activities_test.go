package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/liveness"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/watchdog"
)

// Zombie tests: a tenure that lost its seat (a later Attach bumped the epoch,
// or the node no longer hosts it) still has activities in flight. Every one
// of them must be refused with the non-retryable fenced error the seat
// workflow recognises, and must change nothing.

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

type zombieEnv struct {
	ctx   context.Context
	db    string
	store *store.Store
	mb    *mailbox.Mailbox
}

func setupZombie(t testing.TB) zombieEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db := testenv.MigratedDatabase(t)
	st := testenv.Store(t, db)
	mb, err := mailbox.Open(ctx, testenv.Stack(t).RedisURL, "acttest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	return zombieEnv{ctx: ctx, db: db, store: st, mb: mb}
}

// seat creates the seat's row and mailbox.
func (e zombieEnv) seat(t testing.TB, handle string) {
	t.Helper()
	if err := e.store.EnsureSeat(e.ctx, handle, "worker", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	if err := e.mb.Ensure(e.ctx, handle); err != nil {
		t.Fatal(err)
	}
}

// attach bumps the seat's epoch as node would and returns the new epoch.
func (e zombieEnv) attach(t *testing.T, handle, node string) int64 {
	t.Helper()
	row, err := e.store.Attach(e.ctx, handle, node, strings.Split(node, ":")[0])
	if err != nil {
		t.Fatalf("attach %s on %s: %v", handle, node, err)
	}
	return row.Epoch
}

func newHost(e zombieEnv, incarnation string) *Host {
	h := &Host{
		Store: e.store, Incarnation: incarnation, NodeID: strings.Split(incarnation, ":")[0],
		Beat: 50 * time.Millisecond, Watchdog: watchdog.New(time.Second, io.Discard, func(int) {}), Log: discard,
	}
	h.Tenures = liveness.NewTenures(incarnation, liveness.RealClock{}, h.Teardown, discard, nil)
	return h
}

func TestStaleEpochSetSeatStatusIsFencedAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	e.seat(t, "cto")
	old := e.attach(t, "cto", "n1:aaaa")
	seats := &Seats{Store: e.store, Org: &config.Config{}, LiveWithin: time.Second, Log: discard}
	if err := seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: old}, Status: "paused"}); err != nil {
		t.Fatalf("SetSeatStatus at the current epoch %d: %v; want it recorded", old, err)
	}
	cur := e.attach(t, "cto", "n2:bbbb")
	if cur <= old {
		t.Fatalf("second Attach: got epoch %d; want more than %d", cur, old)
	}
	before, err := e.store.Seat(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}

	err = seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: old}, Status: "drained"})
	testenv.WantErrorType(t, "SetSeatStatus with stale epoch", err, crewlet.ErrorTypeFenced)

	after, err := e.store.Seat(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != before.Status || after.Epoch != cur || after.Node != "n2:bbbb" || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("seat row after a fenced SetSeatStatus: got status %q epoch %d node %q updated %s; want status %q epoch %d node n2:bbbb updated %s",
			after.Status, after.Epoch, after.Node, after.UpdatedAt, before.Status, cur, before.UpdatedAt)
	}
	// The current tenure still writes.
	if err := seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: cur}, Status: "drained"}); err != nil {
		t.Fatalf("SetSeatStatus at the current epoch %d: %v", cur, err)
	}
	if row, _ := e.store.Seat(e.ctx, "cto"); row.Status != "drained" {
		t.Fatalf("status after the current tenure's write: got %q; want drained", row.Status)
	}
}

func TestHostRefusesSeatsItDoesNotHost(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	e.seat(t, "cto")
	n1 := newHost(e, "n1:aaaa")
	n2 := newHost(e, "n2:bbbb")
	a1, err := n1.Attach(e.ctx, crewlet.AttachInput{Handle: "cto"})
	if err != nil {
		t.Fatalf("Attach on n1: %v", err)
	}
	a2, err := n2.Attach(e.ctx, crewlet.AttachInput{Handle: "cto"})
	if err != nil {
		t.Fatalf("Attach on n2: %v", err)
	}
	if a2.Epoch <= a1.Epoch || a2.Node != "n2:bbbb" {
		t.Fatalf("second Attach: got epoch %d node %s; want more than %d on n2:bbbb", a2.Epoch, a2.Node, a1.Epoch)
	}

	cases := []struct {
		name string
		run  func() error
	}{
		// n2 never hosted the seat at n1's epoch.
		{"CheckHosted on a node that does not host the seat", func() error { return n2.CheckHosted("cto", a1.Epoch) }},
		{"Hold on a node that does not host the seat", func() error {
			return n2.Hold(e.ctx, crewlet.HoldInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: a1.Epoch}})
		}},
		{"CheckHosted of an unknown seat", func() error { return n1.CheckHosted("nobody", 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testenv.WantErrorType(t, tc.name, tc.run(), crewlet.ErrorTypeFenced)
		})
	}
	// The real host passes its own check.
	if err := n2.CheckHosted("cto", a2.Epoch); err != nil {
		t.Fatalf("CheckHosted on the node that hosts the seat: %v; want nil", err)
	}
}

func TestDrainingHostRefusesAttach(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	e.seat(t, "cto")
	h := newHost(e, "n1:aaaa")
	before, err := e.store.Seat(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	h.Tenures.SetDraining()
	_, err = h.Attach(e.ctx, crewlet.AttachInput{Handle: "cto"})
	testenv.WantErrorType(t, "Attach on a draining host", err, crewlet.ErrorTypeRefused)
	after, err := e.store.Seat(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if after.Epoch != before.Epoch || after.Node != before.Node {
		t.Fatalf("seat row after a refused Attach: got epoch %d node %q; want epoch %d node %q", after.Epoch, after.Node, before.Epoch, before.Node)
	}
	if got := h.Tenures.Hosted(); len(got) != 0 {
		t.Fatalf("draining host hosts %v after a refused Attach; want nothing", got)
	}
}

// A node whose org file lacks the seat (it runs an older one) refuses it,
// touching nothing, so the seat places itself where its turns can run.
func TestHostRefusesASeatItsOrgDoesNotKnow(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	e.seat(t, "cto")
	h := newHost(e, "n1:aaaa")
	h.Knows = func(handle string) bool { return handle == "cfo" }
	_, err := h.Attach(e.ctx, crewlet.AttachInput{Handle: "cto"})
	testenv.WantErrorType(t, "Attach of a seat the node's org lacks", err, crewlet.ErrorTypeRefused)
	if !strings.Contains(err.Error(), "has no agent seat cto") {
		t.Fatalf("refusal %q; want it to name the seat", err)
	}
	if got := h.Tenures.Hosted(); len(got) != 0 {
		t.Fatalf("host hosts %v after refusing; want nothing", got)
	}
}

// A placement that chose the node running it attaches the seat there and
// reports the tenure; one that chose another node only reserves it, for
// that node's Attach on its host queue. An attach in place that the node
// refuses is reported, not hidden: the seat places itself elsewhere.
func TestPlaceSeatAttachesInPlaceOnlyOnTheNodeItChose(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	org, err := config.Parse([]byte(`
company: { name: acme }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk }, { handle: cfo, role: clerk }, { handle: ceo, role: clerk } ]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"cto", "cfo", "ceo"} {
		e.seat(t, h)
	}
	if err := e.store.RegisterNode(e.ctx, store.NodeRow{Incarnation: "n1:aaaa", NodeID: "n1", HostQueue: "crewlet.host.n1:aaaa"}); err != nil {
		t.Fatal(err)
	}
	n1, elsewhere := newHost(e, "n1:aaaa"), newHost(e, "n2:bbbb")
	place := func(here *Host, handle string) crewlet.PlaceSeatOutput {
		t.Helper()
		seats := &Seats{Store: e.store, Org: org, LiveWithin: time.Minute, Here: here, Log: discard}
		out, err := seats.PlaceSeat(e.ctx, crewlet.PlaceSeatInput{Handle: handle})
		if err != nil {
			t.Fatalf("place %s: %v", handle, err)
		}
		return out
	}

	reserved := place(elsewhere, "cto")
	if reserved.Node != "n1:aaaa" || reserved.Attached != nil || reserved.AttachError != "" {
		t.Fatalf("placement run on n2 that chose n1: got %+v; want n1 reserved and nothing attached", reserved)
	}
	if got := n1.Tenures.Hosted(); len(got) != 0 {
		t.Fatalf("n1 hosts %v after another node placed a seat on it; want nothing until its Attach", got)
	}

	inPlace := place(n1, "cfo")
	if inPlace.Attached == nil || inPlace.Attached.Node != "n1:aaaa" || inPlace.AttachError != "" {
		t.Fatalf("placement run on n1 that chose n1: got %+v; want the seat attached there", inPlace)
	}
	row, err := e.store.Seat(e.ctx, "cfo")
	if err != nil {
		t.Fatal(err)
	}
	if row.Epoch != inPlace.Attached.Epoch || row.Node != "n1:aaaa" {
		t.Fatalf("seat row after the attach in place: epoch %d node %q; want epoch %d on n1:aaaa", row.Epoch, row.Node, inPlace.Attached.Epoch)
	}
	if err := n1.CheckHosted("cfo", inPlace.Attached.Epoch); err != nil {
		t.Fatalf("n1 after attaching cfo in place: %v; want it to host the tenure", err)
	}

	n1.Tenures.SetDraining()
	refused := place(n1, "ceo")
	if refused.Attached != nil || !strings.Contains(refused.AttachError, "draining") {
		t.Fatalf("placement on a node that refuses the attach: got %+v; want the refusal reported", refused)
	}
	if err := n1.CheckHosted("ceo", 1); err == nil {
		t.Fatal("n1 hosts ceo after refusing its attach")
	}
}

// Seats that ask for placement at once are placed together, and each sees
// the ones placed before it: 40 seats asking at the same moment of two
// empty nodes end up 20 on each, as 40 placements one after another would.
func TestSeatsPlacedTogetherKeepFairShares(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	var yaml strings.Builder
	yaml.WriteString("company: { name: acme }\nprofiles: { local: { provider: scripted } }\nroles: { clerk: { charter: works as clerk, profile: local } }\nseats:\n")
	var handles []string
	for i := range 40 {
		h := fmt.Sprintf("s%02d", i)
		handles = append(handles, h)
		fmt.Fprintf(&yaml, "  - { handle: %s, role: clerk }\n", h)
		e.seat(t, h)
	}
	org, err := config.Parse([]byte(yaml.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1:aaaa", "n2:bbbb"} {
		if err := e.store.RegisterNode(e.ctx, store.NodeRow{Incarnation: n, NodeID: strings.Split(n, ":")[0], HostQueue: "crewlet.host." + n}); err != nil {
			t.Fatal(err)
		}
	}
	seats := &Seats{Store: e.store, Org: org, LiveWithin: time.Minute, Log: discard}
	var wg sync.WaitGroup
	errs := make(chan error, len(handles))
	for _, h := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := seats.PlaceSeat(e.ctx, crewlet.PlaceSeatInput{Handle: h}); err != nil {
				errs <- fmt.Errorf("place %s: %w", h, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	hosts, _, err := e.store.SeatHosts(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, h := range handles {
		per[hosts[h]]++
	}
	if per["n1:aaaa"] != 20 || per["n2:bbbb"] != 20 {
		t.Fatalf("40 seats placed at once on two nodes: %v; want 20 on each", per)
	}
}

func TestUnprovenTeardownKeepsTheSeatUntilItSucceeds(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	e.seat(t, "s01")
	host := newHost(e, "n1:aaaa")
	host.StartTools = func(context.Context, string) (ToolSession, error) {
		return &stubbornSession{failures: 3}, nil
	}
	out, err := host.Attach(e.ctx, crewlet.AttachInput{Handle: "s01"})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(host.Detach)
	done := make(chan error, 1)
	go func() {
		_, err := env.ExecuteActivity(host.Detach, crewlet.DetachInput{Tenure: crewlet.Tenure{Handle: "s01", Epoch: out.Epoch}, Reason: "move"})
		done <- err
	}()
	testenv.Eventually(t, 5*time.Second, "teardown reported unproven while the seat stays", func() error {
		if _, ok := host.Tenures.Unproven()["s01"]; !ok {
			return errors.New("not reported unproven")
		}
		if !host.Hosts("s01", out.Epoch) {
			return errors.New("seat released before its teardown was proven")
		}
		return nil
	})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Detach: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Detach did not finish after the teardown succeeded")
	}
	if host.Hosts("s01", out.Epoch) || len(host.Tenures.Unproven()) != 0 {
		t.Fatalf("after a proven teardown: hosted %v, unproven %v; want neither", host.Hosts("s01", out.Epoch), host.Tenures.Unproven())
	}
}

func TestPrepareTurnSkipsTriggersTheLedgerHoldsByEventOrChatID(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	e.seat(t, "s01")
	epoch := e.attach(t, "s01", "n1:aaaa")
	mail := &Mail{Store: e.store, Mailbox: e.mb, Log: discard}
	publish := func(eventID, chatID string) crewlet.MailRef {
		id, _, err := e.mb.Publish(e.ctx, crewlet.Message{EventID: eventID, ChatID: chatID, Type: crewlet.MessageChat,
			From: "operator", To: "s01", Conversation: "c", Body: eventID, SentAt: time.Now()}, mailbox.Quotas{})
		if err != nil {
			t.Fatal(err)
		}
		return crewlet.MailRef{StreamID: id, EventID: eventID}
	}
	done := publish("e-done", "")
	again := publish("e-redelivered-by-the-bridge", "slack-42")
	fresh := publish("e-new", "slack-43")
	if err := e.store.LedgerRecord(e.ctx, "s01", "wk", "turn/s01/wk", []string{"e-done", "chat:slack-42"}); err != nil {
		t.Fatal(err)
	}
	out, err := mail.PrepareTurn(e.ctx, crewlet.PrepareTurnInput{Tenure: crewlet.Tenure{Handle: "s01", Epoch: epoch}, Mail: []crewlet.MailRef{done, again, fresh}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Run) != 1 || out.Run[0] != fresh || len(out.Skipped) != 2 {
		t.Fatalf("run %v skipped %v; want only %v to run", out.Run, out.Skipped, fresh)
	}
	events, err := e.store.SeatEvents(e.ctx, "s01", 10)
	if err != nil || len(events) != 2 || events[0].Kind != "turn_trigger_skipped" {
		t.Fatalf("seat events %+v (%v); want two turn_trigger_skipped", events, err)
	}
}

// stubbornSession is a tool session whose first Closes fail, as an MCP child
// that will not stop does.
type stubbornSession struct {
	mu       sync.Mutex
	failures int
}

func (s *stubbornSession) Tools() []tools.Tool { return nil }

func (s *stubbornSession) Call(context.Context, string, json.RawMessage, string) (tools.Result, error) {
	return tools.Result{}, errors.New("not callable")
}

func (s *stubbornSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures > 0 {
		s.failures--
		return errors.New("mcp child would not stop")
	}
	return nil
}

// The turn steps on a reply's path cost no read of the epoch of their own
// (workers/fence.go, inStep): each refuses a stale epoch in its own first
// statement, before it records, calls the model or sends anything; the
// current tenure goes on with the same turn.
func TestReplyPathStepsRefuseAStaleEpochInTheirOwnStatement(t *testing.T) {
	t.Parallel()
	e := setupTurns(t, nil)
	e.begin(t, "k1", e.publish(t, "m1", "hello"))
	stale := crewlet.Tenure{Handle: "cto", Epoch: e.epoch}
	cur := crewlet.Tenure{Handle: "cto", Epoch: e.attach(t, "cto", "n2:bbbb")}
	thread := crewlet.WorkKey([]string{"m1"})

	_, err := e.turns.BeginTurn(e.ctx, crewlet.BeginTurnInput{Tenure: stale, TurnID: crewlet.TurnWorkflowID("cto", "k2"), WorkKey: "k2",
		Mail: []crewlet.MailRef{e.publish(t, "m2", "again")}})
	if crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("BeginTurn at a stale epoch: %v; want fenced", err)
	}
	if _, err := e.store.Turn(e.ctx, "cto", "k2"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("the turn a stale BeginTurn was refused: %v; want no turn recorded", err)
	}
	if _, err := e.turns.AcquireProfile(e.ctx, crewlet.AcquireProfileInput{Tenure: stale, TurnID: crewlet.TurnWorkflowID("cto", "k1"), WorkKey: "k1"}); crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("AcquireProfile at a stale epoch: %v; want fenced", err)
	}
	if _, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: stale, WorkKey: "k1", Round: 1}); crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("ModelRound at a stale epoch: %v; want fenced", err)
	}
	if rounds, err := e.store.TurnRounds(e.ctx, "cto", thread); err != nil || len(rounds) != 0 {
		t.Fatalf("rounds after a stale ModelRound: %v (%v); want none", rounds, err)
	}
	finish := crewlet.FinishTurnInput{TurnID: crewlet.TurnWorkflowID("cto", "k1"), WorkKey: "k1", Status: crewlet.TurnDone, Rounds: 1}
	finish.Tenure = stale
	if _, err := e.turns.FinishTurn(e.ctx, finish); crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("FinishTurn at a stale epoch: %v; want fenced", err)
	}
	if done, err := e.store.LedgerRecorded(e.ctx, "cto", []string{"m1"}); err != nil || done["m1"] {
		t.Fatalf("ledger after a stale FinishTurn: %v (%v); want m1 not recorded", done, err)
	}

	if _, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: cur, WorkKey: "k1", Round: 1}); err != nil {
		t.Fatalf("ModelRound at the current epoch: %v", err)
	}
	finish.Tenure = cur
	if _, err := e.turns.FinishTurn(e.ctx, finish); err != nil {
		t.Fatalf("FinishTurn at the current epoch: %v", err)
	}
	if done, err := e.store.LedgerRecorded(e.ctx, "cto", []string{"m1"}); err != nil || !done["m1"] {
		t.Fatalf("ledger after the current FinishTurn: %v (%v); want m1 recorded", done, err)
	}
}
