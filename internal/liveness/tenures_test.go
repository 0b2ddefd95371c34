package liveness

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// teardowns is a tenure teardown that counts its calls per seat and fails
// for the seats in failing.
type teardowns struct {
	calls   map[string]int
	failing map[string]bool
}

func newTeardowns() *teardowns {
	return &teardowns{calls: map[string]int{}, failing: map[string]bool{}}
}

func (td *teardowns) stop(handle string) error {
	td.calls[handle]++
	if td.failing[handle] {
		return errors.New("child would not stop")
	}
	return nil
}

func TestTenuresHostAndActForASeatOnlyAtItsEpoch(t *testing.T) {
	t.Parallel()
	tenures := NewTenures("n1:aaaa", NewFakeClock(time.Unix(0, 0)), nil, discard, nil)
	tenures.Begin("cto", 3)
	tenures.Begin("cfo", 1)
	cases := []struct {
		name   string
		handle string
		epoch  int64
		want   bool
	}{
		{"the hosted epoch", "cto", 3, true},
		{"an older epoch (a zombie's)", "cto", 2, false},
		{"a newer epoch (begun elsewhere)", "cto", 4, false},
		{"a seat never hosted here", "ceo", 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tenures.Hosts(tc.handle, tc.epoch); got != tc.want {
				t.Errorf("Hosts(%s, %d) = %v; want %v", tc.handle, tc.epoch, got, tc.want)
			}
			if got := tenures.ActsFor(tc.handle, tc.epoch); got != tc.want {
				t.Errorf("ActsFor(%s, %d) = %v; want %v", tc.handle, tc.epoch, got, tc.want)
			}
		})
	}
	if got := tenures.HostedCount(); got != 2 {
		t.Fatalf("HostedCount = %d; want 2", got)
	}
}

// A self-fenced node stops every tenure's children, hosts nothing, acts
// for no seat (not even one whose teardown failed and so stays hosted),
// and takes seats again only once unfenced.
func TestFenceSelfLetsEverySeatGoAndActsForNone(t *testing.T) {
	t.Parallel()
	td := newTeardowns()
	td.failing["stuck"] = true
	tenures := NewTenures("n1:aaaa", NewFakeClock(time.Unix(0, 0)), td.stop, discard, nil)
	tenures.Begin("cto", 3)
	tenures.Begin("stuck", 5)

	let := tenures.FenceSelf()
	slices.Sort(let)
	if strings.Join(let, ",") != "cto,stuck" {
		t.Fatalf("FenceSelf let go %v; want cto and stuck", let)
	}
	if td.calls["cto"] != 1 || td.calls["stuck"] != 1 {
		t.Fatalf("teardowns %v; want one each", td.calls)
	}
	if !tenures.SelfFenced() {
		t.Fatal("SelfFenced after FenceSelf = false; want true")
	}
	if tenures.Hosts("cto", 3) {
		t.Error("cto still hosted after its teardown succeeded")
	}
	if !tenures.Hosts("stuck", 5) {
		t.Error("stuck let go although its teardown failed: it would be half-owned")
	}
	if tenures.ActsFor("stuck", 5) {
		t.Error("a self-fenced node acts for stuck; want it to act for no seat")
	}
	if !tenures.Unfence() {
		t.Fatal("first Unfence reported the node was not fenced")
	}
	if tenures.Unfence() {
		t.Fatal("second Unfence reported the node was still fenced")
	}
	if !tenures.ActsFor("stuck", 5) {
		t.Error("unfenced node does not act for the seat it still hosts")
	}
}

func TestEndKeepsATenureWhoseTeardownFailsAndAlarmsEveryMinute(t *testing.T) {
	t.Parallel()
	clock := NewFakeClock(time.Unix(0, 0))
	td := newTeardowns()
	td.failing["s01"] = true
	var log testenv.Log
	tenures := NewTenures("n1:aaaa", clock, td.stop, slog.New(slog.NewTextHandler(&log, nil)), nil)
	tenures.Begin("s01", 2)

	if tenures.End("s01", 2, "detached: move") {
		t.Fatal("End reported the tenure ended although its teardown failed")
	}
	alarms := func() int { return strings.Count(log.String(), "seat_still_unproven") }
	steps := []struct {
		advance      time.Duration
		wantAlarms   int
		wantUnproven int64
	}{
		{0, 1, 0},
		{30 * time.Second, 1, 30},
		{30 * time.Second, 2, 60},
		{59 * time.Second, 2, 119},
		{time.Second, 3, 120},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		tenures.AlarmUnproven()
		if got := alarms(); got != s.wantAlarms {
			t.Fatalf("step %d: %d alarms; want %d", i, got, s.wantAlarms)
		}
		if got := tenures.Unproven()["s01"]; got != s.wantUnproven {
			t.Fatalf("step %d: unproven for %ds; want %ds", i, got, s.wantUnproven)
		}
	}
	if !tenures.Hosts("s01", 2) {
		t.Fatal("s01 let go while its teardown is unproven")
	}

	td.failing["s01"] = false
	if !tenures.End("s01", 2, "detached: move") {
		t.Fatal("End failed after the teardown succeeded")
	}
	if tenures.Hosts("s01", 2) || len(tenures.Unproven()) != 0 {
		t.Fatalf("after a proven teardown: hosted %v, unproven %v; want neither", tenures.Hosts("s01", 2), tenures.Unproven())
	}
	if !strings.Contains(log.String(), "seat_release_recovered") {
		t.Fatal("no seat_release_recovered line after the teardown succeeded")
	}
}

// Ending a tenure at an epoch this node no longer hosts the seat at (it
// attached it again since) stops the children but keeps the newer tenure.
func TestEndOfAnOlderEpochKeepsTheNewerTenure(t *testing.T) {
	t.Parallel()
	td := newTeardowns()
	tenures := NewTenures("n1:aaaa", NewFakeClock(time.Unix(0, 0)), td.stop, discard, nil)
	tenures.Begin("cto", 4)
	if !tenures.End("cto", 3, "tenure moved on") {
		t.Fatal("End of the older epoch reported failure")
	}
	if !tenures.Hosts("cto", 4) {
		t.Fatal("ending epoch 3 let go of the tenure at epoch 4")
	}
}

// A node ends its tenures that moved on from what it reads each beat, the
// tenures begun elsewhere since its last read; and, once a sweep is due
// (a minute on the node's clock), from a check of every tenure it hosts,
// which finds a tenure whose Attach committed too late for the beats'
// reads. A tenure begun again on the node itself is its own, not one that
// moved on.
func TestReconcileEndsTheTenuresThatMovedOnAndOnlyThose(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Database(t)
	st := testenv.Store(t, db)
	clock := NewFakeClock(time.Now())
	td := newTeardowns()
	n1 := NewTenures("n1:aaaa", clock, td.stop, discard, nil)
	attach := func(handle, node string) int64 {
		t.Helper()
		row, err := st.Attach(ctx, handle, node, strings.Split(node, ":")[0])
		if err != nil {
			t.Fatalf("attach %s on %s: %v", handle, node, err)
		}
		if node == "n1:aaaa" {
			n1.Begin(handle, row.Epoch)
		}
		return row.Epoch
	}
	epochs := map[string]int64{}
	for _, h := range []string{"moved", "again", "stays", "late"} {
		if err := st.EnsureSeat(ctx, h, "worker", crewlet.SeatAgent); err != nil {
			t.Fatal(err)
		}
		epochs[h] = attach(h, "n1:aaaa")
	}
	reconcile := func() {
		t.Helper()
		if err := n1.Reconcile(ctx, st); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	reconcile()
	if len(td.calls) != 0 || n1.HostedCount() != 4 {
		t.Fatalf("after a Reconcile with nothing moved: stopped %v, %d hosted; want none stopped, 4 hosted", td.calls, n1.HostedCount())
	}

	attach("moved", "n2:bbbb")
	again := attach("again", "n1:aaaa")
	attach("late", "n2:bbbb")
	// As if late's Attach had begun long before it committed.
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE seats SET acquired_at = now() - interval '1 hour' WHERE handle = 'late'`); err != nil {
		t.Fatal(err)
	}

	clock.Advance(time.Second)
	reconcile()
	if n1.Hosts("moved", epochs["moved"]) || td.calls["moved"] != 1 {
		t.Fatalf("moved, established on n2: n1 hosts it %v, its tools stopped %d times; want let go and stopped once",
			n1.Hosts("moved", epochs["moved"]), td.calls["moved"])
	}
	if !n1.Hosts("again", again) || td.calls["again"] != 0 {
		t.Fatalf("again, attached again on n1: hosted at its new epoch %v, tools stopped %d times; want hosted, never stopped",
			n1.Hosts("again", again), td.calls["again"])
	}
	if !n1.Hosts("stays", epochs["stays"]) || td.calls["stays"] != 0 {
		t.Fatalf("stays: hosted %v, stopped %d; want hosted, never stopped", n1.Hosts("stays", epochs["stays"]), td.calls["stays"])
	}
	if !n1.Hosts("late", epochs["late"]) {
		t.Fatal("late was let go by a beat's read, which cannot see a tenure stamped an hour back; the test no longer tells the sweep apart")
	}

	clock.Advance(movedOnSweep)
	reconcile()
	if n1.Hosts("late", epochs["late"]) || td.calls["late"] != 1 {
		t.Fatalf("late, after the sweep: hosted %v, stopped %d; want let go and stopped once", n1.Hosts("late", epochs["late"]), td.calls["late"])
	}
	if n1.HostedCount() != 2 {
		t.Fatalf("n1 hosts %d seats after the sweep; want 2 (again, stays)", n1.HostedCount())
	}
}
