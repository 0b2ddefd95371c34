package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

func setup(t *testing.T) (*store.Store, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return testenv.Store(t, testenv.MigratedDatabase(t)), ctx
}

func TestMigrateIsRerunnable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := st.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Applied) == 0 {
		t.Fatal("first migrate applied nothing")
	}
	second, err := st.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Applied) != 0 {
		t.Fatalf("second migrate applied %v, want nothing", second.Applied)
	}
}

func TestConcurrentMigrateAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Database(t)
	errs := make(chan error, 3)
	applied := make(chan int, 3)
	for range 3 {
		go func() {
			st, err := store.Open(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			names, err := st.Migrate(ctx)
			applied <- len(names.Applied)
			errs <- err
		}()
	}
	total := 0
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		total += <-applied
	}
	st, _ := store.Open(ctx, url)
	defer st.Close()
	again, _ := st.Migrate(ctx)
	if len(again.Applied) != 0 {
		t.Fatalf("after concurrent migrates, another applied %v", again.Applied)
	}
	if total == 0 {
		t.Fatal("no migrate applied anything")
	}
}

func TestAttachBumpsEpochAndFencesStaleWrites(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	if err := st.EnsureSeat(ctx, "cto", "executive", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	first, err := st.Attach(ctx, "cto", "n1:aa", "n1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := st.Attach(ctx, "cto", "n2:bb", "n2")
	if err != nil {
		t.Fatal(err)
	}
	if first.Epoch != 1 || second.Epoch != 2 {
		t.Fatalf("epochs = %d, %d; want 1, 2", first.Epoch, second.Epoch)
	}
	if second.Node != "n2:bb" || second.AcquiredAt == nil || second.AcquiredAt.Before(*first.AcquiredAt) {
		t.Fatalf("second tenure = %+v; want node n2:bb and a later acquired_at than %v", second, first.AcquiredAt)
	}

	err = st.SetStatus(ctx, "cto", first.Epoch, "paused")
	if got := crewlet.ErrorCode(err); got != crewlet.EFENCED {
		t.Fatalf("stale SetStatus error code = %q (%v); want %q", got, err, crewlet.EFENCED)
	}
	if err := st.CheckEpoch(ctx, "cto", first.Epoch); crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("CheckEpoch(stale) = %v; want fenced", err)
	}
	row, err := st.Seat(ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != "active" {
		t.Fatalf("status after stale write = %q; want unchanged %q", row.Status, "active")
	}
	if err := st.SetStatus(ctx, "cto", second.Epoch, "paused"); err != nil {
		t.Fatalf("current-epoch SetStatus: %v", err)
	}

	// Refreshing the seat from the org never touches the tenure.
	if err := st.EnsureSeat(ctx, "cto", "engineer", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	row, _ = st.Seat(ctx, "cto")
	if row.Epoch != 2 || row.Role != "engineer" || !row.AcquiredAt.Equal(*second.AcquiredAt) {
		t.Fatalf("after EnsureSeat row = %+v; want epoch 2, role engineer, acquired_at kept", row)
	}
}

func TestLedgerAndTranscriptAreKeyedOnTheWork(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	if err := st.LedgerRecord(ctx, "cto", "wk1", "turn/cto/wk1", []string{"e1", "e2"}); err != nil {
		t.Fatal(err)
	}
	if err := st.LedgerRecord(ctx, "cto", "wk1", "turn/cto/wk1", []string{"e1", "e2"}); err != nil {
		t.Fatal(err)
	}
	rows, err := st.LedgerRows(ctx, "cto")
	n := len(rows)
	if err != nil || n != 2 {
		t.Fatalf("ledger rows = %d (%v); want 2", n, err)
	}
	done, err := st.LedgerRecorded(ctx, "cto", []string{"e1", "e3"})
	if err != nil || !done["e1"] || done["e3"] {
		t.Fatalf("recorded = %v (%v); want e1 only", done, err)
	}

	msg := crewlet.Message{EventID: "e1", Type: crewlet.MessageChat, From: "operator", To: "cto", Conversation: "c1", Body: "hi", SentAt: time.Now()}
	reply := crewlet.Message{EventID: "r1", Type: crewlet.MessageReply, From: "cto", To: "operator", Conversation: "c1", InReplyTo: "e1", Body: "hello", SentAt: time.Now()}
	for range 2 {
		if err := st.AppendMessages(ctx, "wk1", msg, reply); err != nil {
			t.Fatal(err)
		}
	}
	conv, err := st.Conversation(ctx, "c1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(conv) != 2 || conv[0].ID != "e1" || conv[1].InReplyTo != "e1" {
		t.Fatalf("conversation = %+v; want e1 then its reply, once each", conv)
	}
	if _, err := st.Conversation(ctx, "nope", 0, 0); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("unknown conversation error = %v; want not found", err)
	}
}

// TrimLedger removes the rows older than the retention and keeps the rest.
// The old row is backdated rather than aged by a sleep, so a slow machine
// cannot age the new row past the retention too.
func TestTrimLedgerDropsOnlyOldRows(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	for _, id := range []string{"old", "new"} {
		if err := st.LedgerRecord(ctx, "cto", "wk-"+id, "turn/cto/wk-"+id, []string{id}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.TrimLedger(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("trim with an hour's retention removed %d (%v); want 0", n, err)
	}
	sqlExec(t, db, ctx, `UPDATE completion_ledger SET recorded_at = now() - interval '2 hours' WHERE trigger_key = 'old'`)
	if n, err := st.TrimLedger(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("trimmed %d (%v); want the one older row", n, err)
	}
	if rows, _ := st.LedgerRows(ctx, "cto"); len(rows) != 1 || rows["new"] == "" {
		t.Fatalf("ledger after trim = %v; want only new", rows)
	}
}

func TestConcurrentPlacementsDoNotExhaustASmallPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := testenv.MigratedDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	// Each placement holds a connection for its transaction while it waits
	// on the placement lock; the reads must not need a second one.
	st := testenv.Store(t, url+sep+"pool_max_conns=2")
	if err := st.RegisterNode(ctx, store.NodeRow{Incarnation: "n1:a", NodeID: "n1", HostQueue: "q"}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := range 8 {
		handle := fmt.Sprintf("s%d", i)
		if err := st.EnsureSeat(ctx, handle, "worker", crewlet.SeatAgent); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := st.Reserve(ctx, []string{handle}, time.Minute, func(nodes []store.NodeRow, _ []store.RoleLoad, _, _ map[string]string) map[string]string {
				time.Sleep(10 * time.Millisecond)
				return map[string]string{handle: nodes[0].Incarnation}
			})
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("placement: %v", err)
		}
	}
	hosts, _, err := st.SeatHosts(ctx)
	if err != nil || len(hosts) != 8 || hosts["s7"] != "n1:a" {
		t.Fatalf("hosts %v (%v); want all 8 seats reserved on n1:a", hosts, err)
	}
}

// NodesOnAnotherOrg names the live incarnations whose org names other seats:
// not this node's own, not stopped or silent ones, and a node that recorded
// no digest (started before migration 0018) counts as another org.
func TestNodesOnAnotherOrg(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	for _, n := range []store.NodeRow{
		{Incarnation: "self:old", NodeID: "self", SeatsDigest: "before"},
		{Incarnation: "self:new", NodeID: "self", SeatsDigest: "now"},
		{Incarnation: "same:a", NodeID: "same", SeatsDigest: "now"},
		{Incarnation: "other:a", NodeID: "other", SeatsDigest: "before"},
		{Incarnation: "unversioned:a", NodeID: "unversioned"},
		{Incarnation: "stopped:a", NodeID: "stopped", SeatsDigest: "before"},
		{Incarnation: "silent:a", NodeID: "silent", SeatsDigest: "before"},
	} {
		n.HostQueue = "q-" + n.Incarnation
		if err := st.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.StopNode(ctx, "stopped:a"); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, db, ctx, `UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE incarnation = 'silent:a'`)
	others, err := st.NodesOnAnotherOrg(ctx, 10*time.Second, "self", "now")
	if err != nil || fmt.Sprint(others) != "[other:a unversioned:a]" {
		t.Fatalf("nodes on another org = %v (%v); want [other:a unversioned:a]", others, err)
	}
	if others, err := st.NodesOnAnotherOrg(ctx, 10*time.Second, "other", "before"); err != nil || fmt.Sprint(others) != "[same:a self:new unversioned:a]" {
		t.Fatalf("seen from other = %v (%v); want [same:a self:new unversioned:a]", others, err)
	}
}
