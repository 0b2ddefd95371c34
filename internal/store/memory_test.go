package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

func TestDuplicateMemoryFromTwoNodesCollapses(t *testing.T) {
	ctx := context.Background()
	url := testenv.Database(t)
	var nodes [2]*store.Store
	for i := range nodes {
		nodes[i] = testenv.Store(t, url)
	}
	// Both "nodes" write the memory of the same work at once, twice each.
	var wg sync.WaitGroup
	for _, st := range nodes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := st.RecordEpisode(ctx, store.Episode{Seat: "cto", WorkKey: "wk1", TurnID: "turn/cto/wk1", Summary: "s"}); err != nil {
					t.Error(err)
				}
				if err := st.CountInteraction(ctx, "cto", "alice", "wk1"); err != nil {
					t.Error(err)
				}
				if err := st.WriteDiary(ctx, "cto", "learned the deploy steps"); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	// Unkeyed episodes are never collapsed; a new work key counts again.
	for range 2 {
		if err := nodes[0].RecordEpisode(ctx, store.Episode{Seat: "cto", TurnID: "turn/cto/scheduled", Summary: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[1].CountInteraction(ctx, "cto", "alice", "wk2"); err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].WriteDiary(ctx, "cto", "learned the deploy steps."); err != nil {
		t.Fatal(err)
	}
	m, err := nodes[0].Memory(ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if m.Episodes != 3 || m.Interactions["alice"] != 2 || m.Diary != 2 {
		t.Fatalf("memory = %+v; want 3 episodes (1 keyed + 2 unkeyed), 2 interactions with alice (wk1 once, wk2), 2 diary entries", m)
	}
}

func TestMailboxRetirementIsCompareAndSet(t *testing.T) {
	st, ctx := setup(t)
	for _, seat := range []string{"cto", "gone", "back"} {
		if err := st.EnsureMailbox(ctx, seat, "s:"+seat, "seat-"+seat); err != nil {
			t.Fatal(err)
		}
	}
	absent, returned, err := st.SweepMailboxes(ctx, []string{"cto"})
	if err != nil || len(absent) != 2 || len(returned) != 0 {
		t.Fatalf("first sweep: absent %v returned %v (%v); want gone and back absent", absent, returned, err)
	}
	absent, _, _ = st.SweepMailboxes(ctx, []string{"cto"})
	if len(absent) != 0 {
		t.Fatalf("second sweep stamped %v again; the clock starts at the first sweep", absent)
	}
	// "back" is added to the org again within the grace.
	if _, returned, _ = st.SweepMailboxes(ctx, []string{"cto", "back"}); len(returned) != 1 || returned[0] != "back" {
		t.Fatalf("returned = %v; want [back]", returned)
	}
	if expired, _ := st.ExpiredMailboxes(ctx, time.Hour); len(expired) != 0 {
		t.Fatalf("expired within the grace: %v", expired)
	}
	time.Sleep(1100 * time.Millisecond)
	expired, err := st.ExpiredMailboxes(ctx, time.Second)
	if err != nil || len(expired) != 1 || expired[0] != "gone" {
		t.Fatalf("expired = %v (%v); want [gone]", expired, err)
	}
	deleted := 0
	del := func(context.Context) error { deleted++; return nil }
	if ok, err := st.RetireMailbox(ctx, "gone", time.Second, del); err != nil || !ok {
		t.Fatalf("retire gone = %v, %v; want retired", ok, err)
	}
	if ok, _ := st.RetireMailbox(ctx, "gone", time.Second, del); ok {
		t.Fatal("a second retirement of the same mailbox ran; want nothing to do")
	}
	if ok, _ := st.RetireMailbox(ctx, "back", time.Second, del); ok {
		t.Fatal("retired a mailbox whose seat came back")
	}
	if deleted != 1 {
		t.Fatalf("stream deleted %d times; want once", deleted)
	}
}
