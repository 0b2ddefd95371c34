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

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/control"
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
	db := testenv.Database(t)
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
	return &Host{
		Store: e.store, Incarnation: incarnation, NodeID: strings.Split(incarnation, ":")[0],
		Beat: 50 * time.Millisecond, Watchdog: watchdog.New(time.Second, io.Discard, func(int) {}), Log: discard,
	}
}

// wantErrorType fails unless err is a non-retryable Temporal application
// error of the given type.
func wantErrorType(t *testing.T, what string, err error, errType string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("%s: got error %v (%T); want a non-retryable ApplicationError of type %q", what, err, err, errType)
	}
	if appErr.Type() != errType || !appErr.NonRetryable() {
		t.Fatalf("%s: got ApplicationError type %q non-retryable=%v (%v); want type %q non-retryable=true",
			what, appErr.Type(), appErr.NonRetryable(), err, errType)
	}
}

func TestStaleEpochSetSeatStatusIsFencedAndChangesNothing(t *testing.T) {
	e := setupZombie(t)
	e.seat(t, "cto")
	old := e.attach(t, "cto", "n1:aaaa")
	seats := &Seats{Store: e.store, Org: &config.Config{}, LiveWithin: time.Second, Log: discard}
	if err := seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Handle: "cto", Epoch: old, Status: "paused"}); err != nil {
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

	err = seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Handle: "cto", Epoch: old, Status: "drained"})
	wantErrorType(t, "SetSeatStatus with stale epoch", err, crewlet.ErrorTypeFenced)

	after, err := e.store.Seat(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != before.Status || after.Epoch != cur || after.Node != "n2:bbbb" || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("seat row after a fenced SetSeatStatus: got status %q epoch %d node %q updated %s; want status %q epoch %d node n2:bbbb updated %s",
			after.Status, after.Epoch, after.Node, after.UpdatedAt, before.Status, cur, before.UpdatedAt)
	}
	// The current tenure still writes.
	if err := seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Handle: "cto", Epoch: cur, Status: "drained"}); err != nil {
		t.Fatalf("SetSeatStatus at the current epoch %d: %v", cur, err)
	}
	if row, _ := e.store.Seat(e.ctx, "cto"); row.Status != "drained" {
		t.Fatalf("status after the current tenure's write: got %q; want drained", row.Status)
	}
}

func TestStaleEpochMailActivitiesAreFencedAndMailStaysPending(t *testing.T) {
	e := setupZombie(t)
	e.seat(t, "cto")
	mail := &Mail{Store: e.store, Mailbox: e.mb, Log: discard}
	old := e.attach(t, "cto", "n1:aaaa")
	for _, id := range []string{"ev-1", "ev-2"} {
		if _, _, err := e.mb.Publish(e.ctx, crewlet.Message{EventID: id, Type: crewlet.MessageChat, From: "ceo", To: "cto",
			Conversation: "c1", Body: "hello " + id, SentAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// The old tenure reads the first entry: it is now pending, unacked.
	read, err := mail.ReadMail(e.ctx, crewlet.ReadMailInput{Handle: "cto", Epoch: old, Consumer: "n1:e1", Max: 1})
	if err != nil {
		t.Fatalf("ReadMail at the current epoch: %v", err)
	}
	if len(read.Mail) != 1 || read.Mail[0].EventID != "ev-1" {
		t.Fatalf("ReadMail at the current epoch: got %+v; want ev-1", read.Mail)
	}
	e.attach(t, "cto", "n2:bbbb")

	t.Run("AckMail", func(t *testing.T) {
		err := mail.AckMail(e.ctx, crewlet.AckMailInput{Handle: "cto", Epoch: old, StreamIDs: []string{read.Mail[0].StreamID}})
		wantErrorType(t, "AckMail with stale epoch", err, crewlet.ErrorTypeFenced)
		if n, err := e.mb.Pending(e.ctx, "cto"); err != nil || n != 1 {
			t.Fatalf("pending entries after a fenced AckMail: got %d (%v); want 1 (still pending for the next tenure)", n, err)
		}
	})
	t.Run("ReadMail", func(t *testing.T) {
		out, err := mail.ReadMail(e.ctx, crewlet.ReadMailInput{Handle: "cto", Epoch: old, Consumer: "n1:e1", Max: 16})
		wantErrorType(t, "ReadMail with stale epoch", err, crewlet.ErrorTypeFenced)
		if len(out.Mail) != 0 {
			t.Fatalf("fenced ReadMail handed out %d entries; want none", len(out.Mail))
		}
		// Nothing was read for the zombie: ev-2 is still never delivered,
		// ev-1 still the one pending entry.
		if n, err := e.mb.Pending(e.ctx, "cto"); err != nil || n != 1 {
			t.Fatalf("pending entries after a fenced ReadMail: got %d (%v); want 1", n, err)
		}
	})
	t.Run("NoSuchSeat", func(t *testing.T) {
		err := mail.AckMail(e.ctx, crewlet.AckMailInput{Handle: "nobody", Epoch: 1, StreamIDs: []string{"0-1"}})
		wantErrorType(t, "AckMail for a seat with no row", err, crewlet.ErrorTypeFenced)
	})
}

func TestHostRefusesSeatsItDoesNotHost(t *testing.T) {
	e := setupZombie(t)
	e.seat(t, "cto")
	n1 := newHost(e, "n1:aaaa")
	n2 := newHost(e, "n2:bbbb")
	turns, err := NewTurns(n1, &config.Config{}, e.store, e.mb, nil, nil, control.NewProfiles(nil, e.store, &config.Config{}, discard), discard)
	if err != nil {
		t.Fatal(err)
	}

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
			return n2.Hold(e.ctx, crewlet.HoldInput{Handle: "cto", Epoch: a1.Epoch})
		}},
		{"CheckHosted of an unknown seat", func() error { return n1.CheckHosted("nobody", 1) }},
		// n1 still believes it hosts cto at its old epoch (a zombie): the
		// turn is refused by the epoch fence in Postgres.
		{"BeginTurn on the zombie tenure", func() error {
			_, err := turns.BeginTurn(e.ctx, crewlet.BeginTurnInput{Handle: "cto", Epoch: a1.Epoch, TurnID: "turn/cto/x", WorkKey: "x",
				Mail: []crewlet.MailRef{{StreamID: "0-1", EventID: "ev-1"}}})
			return err
		}},
		{"ModelRound on the zombie tenure", func() error {
			_, err := turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Handle: "cto", Epoch: a1.Epoch, WorkKey: "x", Round: 1})
			return err
		}},
		{"ToolCall on the zombie tenure", func() error {
			_, err := turns.ToolCall(e.ctx, crewlet.ToolCallInput{Handle: "cto", Epoch: a1.Epoch, WorkKey: "x", Round: 1,
				Call: crewlet.ToolCallRef{Name: "diary_write"}})
			return err
		}},
		{"FinishTurn on the zombie tenure", func() error {
			_, err := turns.FinishTurn(e.ctx, crewlet.FinishTurnInput{Handle: "cto", Epoch: a1.Epoch, TurnID: "turn/cto/x", WorkKey: "x"})
			return err
		}},
		// A tool call at the current epoch on a node that does not host it.
		{"ToolCall on a node that does not host the seat", func() error {
			_, err := turns.ToolCall(e.ctx, crewlet.ToolCallInput{Handle: "cto", Epoch: a2.Epoch, WorkKey: "y", Round: 1,
				Call: crewlet.ToolCallRef{Name: "diary_write"}})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErrorType(t, tc.name, tc.run(), crewlet.ErrorTypeFenced)
		})
	}
	// The refused turn ran nothing: the ledger holds nothing for cto.
	if rows, err := e.store.LedgerRows(e.ctx, "cto"); err != nil || len(rows) != 0 {
		t.Fatalf("ledger rows for cto after refused turns: got %d (%v); want 0", len(rows), err)
	}
	// The real host passes its own check.
	if err := n2.CheckHosted("cto", a2.Epoch); err != nil {
		t.Fatalf("CheckHosted on the node that hosts the seat: %v; want nil", err)
	}
}

func TestDrainingHostRefusesAttach(t *testing.T) {
	e := setupZombie(t)
	e.seat(t, "cto")
	h := newHost(e, "n1:aaaa")
	before, err := e.store.Seat(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	h.SetDraining()
	_, err = h.Attach(e.ctx, crewlet.AttachInput{Handle: "cto"})
	wantErrorType(t, "Attach on a draining host", err, crewlet.ErrorTypeRefused)
	after, err := e.store.Seat(e.ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if after.Epoch != before.Epoch || after.Node != before.Node {
		t.Fatalf("seat row after a refused Attach: got epoch %d node %q; want epoch %d node %q", after.Epoch, after.Node, before.Epoch, before.Node)
	}
	if got := h.Hosted(); len(got) != 0 {
		t.Fatalf("draining host hosts %v after a refused Attach; want nothing", got)
	}
}

// A node whose org file lacks the seat (it runs an older one) refuses it,
// touching nothing, so the seat places itself where its turns can run.
func TestHostRefusesASeatItsOrgDoesNotKnow(t *testing.T) {
	e := setupZombie(t)
	e.seat(t, "cto")
	h := newHost(e, "n1:aaaa")
	h.Knows = func(handle string) bool { return handle == "cfo" }
	_, err := h.Attach(e.ctx, crewlet.AttachInput{Handle: "cto"})
	wantErrorType(t, "Attach of a seat the node's org lacks", err, crewlet.ErrorTypeRefused)
	if !strings.Contains(err.Error(), "has no agent seat cto") {
		t.Fatalf("refusal %q; want it to name the seat", err)
	}
	if got := h.Hosted(); len(got) != 0 {
		t.Fatalf("host hosts %v after refusing; want nothing", got)
	}
}

// A placement that chose the node running it attaches the seat there and
// reports the tenure; one that chose another node only reserves it, for
// that node's Attach on its host queue. An attach in place that the node
// refuses is reported, not hidden: the seat places itself elsewhere.
func TestPlaceSeatAttachesInPlaceOnlyOnTheNodeItChose(t *testing.T) {
	e := setupZombie(t)
	org, err := config.Parse([]byte(`
company: { name: acme }
profiles: { local: { provider: scripted } }
roles: { clerk: { profile: local } }
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
	if got := n1.Hosted(); len(got) != 0 {
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

	n1.SetDraining()
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
	e := setupZombie(t)
	var yaml strings.Builder
	yaml.WriteString("company: { name: acme }\nprofiles: { local: { provider: scripted } }\nroles: { clerk: { profile: local } }\nseats:\n")
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

// A node ends its tenures that moved on from what it reads each beat, the
// tenures begun elsewhere since its last read; and, once a sweep is due,
// from a check of every tenure it hosts, which finds a tenure whose Attach
// committed too late for the beats' reads. A tenure begun again on the
// node itself is its own, not one that moved on.
func TestReconcileEndsTheTenuresThatMovedOnAndOnlyThose(t *testing.T) {
	e := setupZombie(t)
	n1, n2 := newHost(e, "n1:aaaa"), newHost(e, "n2:bbbb")
	stopped := map[string]int{}
	n1.StartTools = func(_ context.Context, handle string) (ToolSession, error) {
		return &closeCounter{handle: handle, closed: stopped}, nil
	}
	epochs := map[string]int64{}
	for _, h := range []string{"moved", "again", "stays", "late"} {
		e.seat(t, h)
		out, err := n1.Attach(e.ctx, crewlet.AttachInput{Handle: h})
		if err != nil {
			t.Fatal(err)
		}
		epochs[h] = out.Epoch
	}
	reconcile := func() {
		t.Helper()
		if err := n1.Reconcile(e.ctx, e.store); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	reconcile()
	if len(stopped) != 0 || n1.HostedCount() != 4 {
		t.Fatalf("after a Reconcile with nothing moved: stopped %v, %d hosted; want none stopped, 4 hosted", stopped, n1.HostedCount())
	}

	if _, err := n2.Attach(e.ctx, crewlet.AttachInput{Handle: "moved"}); err != nil {
		t.Fatal(err)
	}
	again, err := n1.Attach(e.ctx, crewlet.AttachInput{Handle: "again"})
	if err != nil {
		t.Fatal(err)
	}
	stopped["again"] = 0 // its earlier tenure's tools stopped when it attached again
	if _, err := n2.Attach(e.ctx, crewlet.AttachInput{Handle: "late"}); err != nil {
		t.Fatal(err)
	}
	// As if late's Attach had begun long before it committed.
	conn, err := pgx.Connect(e.ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	if _, err := conn.Exec(e.ctx, `UPDATE seats SET acquired_at = now() - interval '1 hour' WHERE handle = 'late'`); err != nil {
		t.Fatal(err)
	}

	reconcile()
	if n1.Hosts("moved", epochs["moved"]) || stopped["moved"] != 1 {
		t.Fatalf("moved, established on n2: n1 hosts it %v, its tools stopped %d times; want let go and stopped once",
			n1.Hosts("moved", epochs["moved"]), stopped["moved"])
	}
	if !n1.Hosts("again", again.Epoch) || stopped["again"] != 0 {
		t.Fatalf("again, attached again on n1: hosted at its new epoch %v, tools stopped %d times since; want hosted, never stopped",
			n1.Hosts("again", again.Epoch), stopped["again"])
	}
	if !n1.Hosts("stays", epochs["stays"]) || stopped["stays"] != 0 {
		t.Fatalf("stays: hosted %v, stopped %d; want hosted, never stopped", n1.Hosts("stays", epochs["stays"]), stopped["stays"])
	}
	if !n1.Hosts("late", epochs["late"]) {
		t.Fatal("late was let go by a beat's read, which cannot see a tenure stamped an hour back; the test no longer tells the sweep apart")
	}

	n1.sweptAt = time.Time{} // the sweep is due
	reconcile()
	if n1.Hosts("late", epochs["late"]) || stopped["late"] != 1 {
		t.Fatalf("late, after the sweep: hosted %v, stopped %d; want let go and stopped once", n1.Hosts("late", epochs["late"]), stopped["late"])
	}
	if n1.HostedCount() != 2 {
		t.Fatalf("n1 hosts %d seats after the sweep; want 2 (again, stays)", n1.HostedCount())
	}
}

// closeCounter is a tool session that counts, per seat, how often it was
// stopped.
type closeCounter struct {
	handle string
	closed map[string]int
}

func (s *closeCounter) Tools() []tools.Tool { return nil }

func (s *closeCounter) Call(context.Context, string, json.RawMessage, string) (tools.Result, error) {
	return tools.Result{}, errors.New("not callable")
}

func (s *closeCounter) Close() error {
	s.closed[s.handle]++
	return nil
}

func TestUnprovenTeardownKeepsTheSeatUntilItSucceeds(t *testing.T) {
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
		_, err := env.ExecuteActivity(host.Detach, crewlet.DetachInput{Handle: "s01", Epoch: out.Epoch, Reason: "move"})
		done <- err
	}()
	testenv.Eventually(t, 5*time.Second, "teardown reported unproven while the seat stays", func() error {
		if _, ok := host.Unproven(time.Now())["s01"]; !ok {
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
	if host.Hosts("s01", out.Epoch) || len(host.Unproven(time.Now())) != 0 {
		t.Fatalf("after a proven teardown: hosted %v, unproven %v; want neither", host.Hosts("s01", out.Epoch), host.Unproven(time.Now()))
	}
}

func TestPrepareTurnSkipsTriggersTheLedgerHoldsByEventOrChatID(t *testing.T) {
	e := setupZombie(t)
	e.seat(t, "s01")
	epoch := e.attach(t, "s01", "n1:aaaa")
	mail := &Mail{Store: e.store, Mailbox: e.mb, Log: discard}
	publish := func(eventID, chatID string) crewlet.MailRef {
		id, _, err := e.mb.Publish(e.ctx, crewlet.Message{EventID: eventID, ChatID: chatID, Type: crewlet.MessageChat,
			From: "operator", To: "s01", Conversation: "c", Body: eventID, SentAt: time.Now()})
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
	out, err := mail.PrepareTurn(e.ctx, crewlet.PrepareTurnInput{Handle: "s01", Epoch: epoch, Mail: []crewlet.MailRef{done, again, fresh}})
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
