package store_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

func TestDuplicateMemoryFromTwoNodesCollapses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.MigratedDatabase(t)
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
	t.Parallel()
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

// memoryDB is a migrated database for the memory readers, with a raw
// connection for what the store does not write (a diary work key, a fixed
// last_seen).
func memoryDB(t *testing.T) (*store.Store, *pgx.Conn, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	url := testenv.MigratedDatabase(t)
	st := testenv.Store(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return st, conn, ctx
}

func TestDiaryPagesNewestFirst(t *testing.T) {
	t.Parallel()
	st, conn, ctx := memoryDB(t)
	for i := range 7 {
		if err := st.WriteDiary(ctx, "cto", fmt.Sprintf("entry %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.WriteDiary(ctx, "cfo", "not cto's"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE agent_diary SET work_key = 'wk-5' WHERE content = 'entry 5'`); err != nil {
		t.Fatal(err)
	}
	contents := func(p store.Page[store.DiaryItem]) []string {
		var out []string
		for _, d := range p.Items {
			out = append(out, d.Content)
		}
		return out
	}

	p1, err := st.Diary(ctx, "cto", "", 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(p1); !slices.Equal(got, []string{"entry 6", "entry 5", "entry 4"}) || p1.Next == "" {
		t.Fatalf("page 1 = %v next %q; want entries 6, 5, 4 and a next cursor", got, p1.Next)
	}
	if p1.Items[1].WorkKey != "wk-5" || p1.Items[0].WorkKey != "" || p1.Items[0].RecordedAt.IsZero() {
		t.Fatalf("page 1 items %+v; want entry 5 keyed wk-5, entry 6 unkeyed, both timestamped", p1.Items)
	}

	// An entry written while an operator pages does not shift the pages
	// after the one they read.
	if err := st.WriteDiary(ctx, "cto", "entry 7"); err != nil {
		t.Fatal(err)
	}
	p2, err := st.Diary(ctx, "cto", p1.Next, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(p2); !slices.Equal(got, []string{"entry 3", "entry 2", "entry 1"}) || p2.Next == "" {
		t.Fatalf("page 2 = %v next %q; want entries 3, 2, 1 and a next cursor", got, p2.Next)
	}
	again, err := st.Diary(ctx, "cto", p1.Next, 3)
	if err != nil || !slices.Equal(contents(again), contents(p2)) || again.Next != p2.Next {
		t.Fatalf("page 2 read again = %v next %q (%v); want %v next %q", contents(again), again.Next, err, contents(p2), p2.Next)
	}
	p3, err := st.Diary(ctx, "cto", p2.Next, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(p3); !slices.Equal(got, []string{"entry 0"}) || p3.Next != "" {
		t.Fatalf("page 3 = %v next %q; want entry 0 and no next", got, p3.Next)
	}

	// A page that ends exactly at the last entry has no next.
	full, err := st.Diary(ctx, "cto", "", 8)
	if err != nil || len(full.Items) != 8 || full.Next != "" {
		t.Fatalf("limit 8 of 8 = %d items next %q (%v); want 8 and no next", len(full.Items), full.Next, err)
	}
}

func TestEpisodesPage(t *testing.T) {
	t.Parallel()
	st, _, ctx := memoryDB(t)
	for _, e := range []store.Episode{
		{Seat: "cto", WorkKey: "wk1", TurnID: "turn/cto/wk1", Summary: "first"},
		{Seat: "cto", TurnID: "turn/cto/scheduled", Summary: "unkeyed"},
		{Seat: "cto", WorkKey: "wk3", TurnID: "turn/cto/wk3", Summary: "third"},
	} {
		if err := st.RecordEpisode(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	p1, err := st.Episodes(ctx, "cto", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Items) != 2 || p1.Items[0].Summary != "third" || p1.Items[0].WorkKey != "wk3" || p1.Items[0].TurnID != "turn/cto/wk3" ||
		p1.Items[1].Summary != "unkeyed" || p1.Items[1].WorkKey != "" || p1.Next == "" {
		t.Fatalf("page 1 = %+v next %q; want third (wk3) then unkeyed, and a next cursor", p1.Items, p1.Next)
	}
	p2, err := st.Episodes(ctx, "cto", p1.Next, 2)
	if err != nil || len(p2.Items) != 1 || p2.Items[0].Summary != "first" || p2.Next != "" {
		t.Fatalf("page 2 = %+v next %q (%v); want first and no next", p2.Items, p2.Next, err)
	}
}

func TestCounterpartiesKeyset(t *testing.T) {
	t.Parallel()
	st, conn, ctx := memoryDB(t)
	for _, who := range []string{"a", "b", "c", "d", "e"} {
		if err := st.CountInteraction(ctx, "cto", who, "wk-"+who); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CountInteraction(ctx, "cto", "b", "wk-again"); err != nil {
		t.Fatal(err)
	}
	// b, c and d were last seen at the same instant: the name breaks the tie,
	// and a page boundary inside the tie must neither repeat nor skip one.
	tie := time.Now().Add(-24 * time.Hour).Truncate(time.Microsecond)
	if _, err := conn.Exec(ctx, `
		UPDATE counterparty_profiles SET last_seen = CASE counterparty
		    WHEN 'a' THEN $1::timestamptz - interval '1 hour'
		    WHEN 'e' THEN $1::timestamptz + interval '1 hour'
		    ELSE $1::timestamptz END
		WHERE seat = 'cto'`, tie); err != nil {
		t.Fatal(err)
	}
	names := func(p store.Page[store.CounterpartyItem]) []string {
		var out []string
		for _, c := range p.Items {
			out = append(out, c.Counterparty)
		}
		return out
	}

	p1, err := st.Counterparties(ctx, "cto", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(p1); !slices.Equal(got, []string{"e", "b"}) || p1.Next == "" {
		t.Fatalf("page 1 = %v next %q; want e, b and a next cursor", got, p1.Next)
	}
	if b := p1.Items[1]; b.InteractionCount != 2 || !b.LastSeen.Equal(tie) || b.FirstSeen.IsZero() {
		t.Fatalf("b = %+v; want 2 interactions, last seen %v, a first-seen time", b, tie)
	}
	// Someone new shows up between pages: they go to the front, and the next
	// page is the one the cursor named.
	if err := st.CountInteraction(ctx, "cto", "zed", "wk-z"); err != nil {
		t.Fatal(err)
	}
	p2, err := st.Counterparties(ctx, "cto", p1.Next, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(p2); !slices.Equal(got, []string{"c", "d"}) || p2.Next == "" {
		t.Fatalf("page 2 = %v next %q; want c, d and a next cursor", got, p2.Next)
	}
	p3, err := st.Counterparties(ctx, "cto", p2.Next, 2)
	if err != nil || !slices.Equal(names(p3), []string{"a"}) || p3.Next != "" {
		t.Fatalf("page 3 = %v next %q (%v); want a and no next", names(p3), p3.Next, err)
	}
	first, err := st.Counterparties(ctx, "cto", "", 10)
	if err != nil || !slices.Equal(names(first), []string{"zed", "e", "b", "c", "d", "a"}) {
		t.Fatalf("everyone = %v (%v); want zed, e, b, c, d, a", names(first), err)
	}
}

func TestMemoryReadsOfAnEmptySeat(t *testing.T) {
	t.Parallel()
	st, _, ctx := memoryDB(t)
	d, err := st.Diary(ctx, "cto", "", 20)
	if err != nil || d.Items == nil || len(d.Items) != 0 || d.Next != "" {
		t.Fatalf("diary = %#v (%v); want empty, not nil, items and no next", d, err)
	}
	e, err := st.Episodes(ctx, "cto", "", 20)
	if err != nil || e.Items == nil || len(e.Items) != 0 || e.Next != "" {
		t.Fatalf("episodes = %#v (%v); want empty, not nil, items and no next", e, err)
	}
	c, err := st.Counterparties(ctx, "cto", "", 20)
	if err != nil || c.Items == nil || len(c.Items) != 0 || c.Next != "" {
		t.Fatalf("counterparties = %#v (%v); want empty, not nil, items and no next", c, err)
	}
}

func TestMemoryCursorsMustBeOnesTheStoreHandedOut(t *testing.T) {
	t.Parallel()
	st, _, ctx := memoryDB(t)
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tt := range []struct {
		kind, before, want string
	}{
		{"diary", "abc", "positive id"},
		{"diary", "0", "positive id"},
		{"episodes", "-4", "positive id"},
		{"counterparties", "%%%", "previous counterparties page"},
		{"counterparties", b64("yesterday|alice"), "previous counterparties page"},
		{"counterparties", b64("1700000000000000|"), "previous counterparties page"},
		{"counterparties", b64("1700000000000000"), "previous counterparties page"},
	} {
		var err error
		switch tt.kind {
		case "diary":
			_, err = st.Diary(ctx, "cto", tt.before, 5)
		case "episodes":
			_, err = st.Episodes(ctx, "cto", tt.before, 5)
		case "counterparties":
			_, err = st.Counterparties(ctx, "cto", tt.before, 5)
		}
		if crewlet.ErrorCode(err) != crewlet.EINVALID || !strings.Contains(crewlet.ErrorMessage(err), tt.want) {
			t.Errorf("%s before %q: %v; want %s naming %q", tt.kind, tt.before, err, crewlet.EINVALID, tt.want)
		}
	}
}

func TestMemoryReadsWhenTheDatabaseIsNotThere(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	bare, err := store.Open(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Close)
	behind, conn, _ := memoryDB(t)
	if _, err := conn.Exec(ctx, `ALTER TABLE agent_diary DROP COLUMN work_key`); err != nil {
		t.Fatal(err)
	}
	closed, err := store.Open(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()

	diary := func(st *store.Store) error { _, err := st.Diary(ctx, "cto", "", 5); return err }
	episodes := func(st *store.Store) error { _, err := st.Episodes(ctx, "cto", "", 5); return err }
	counterparties := func(st *store.Store) error { _, err := st.Counterparties(ctx, "cto", "", 5); return err }
	for _, tt := range []struct {
		name  string
		st    *store.Store
		reads []func(*store.Store) error
		want  string
	}{
		{"no schema", bare, []func(*store.Store) error{diary, episodes, counterparties}, "crewlet migrate"},
		{"diary schema behind", behind, []func(*store.Store) error{diary}, "crewlet migrate"},
		{"closed pool", closed, []func(*store.Store) error{diary, episodes, counterparties}, "cannot be reached"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, read := range tt.reads {
				err := read(tt.st)
				msg := crewlet.ErrorMessage(err)
				if crewlet.ErrorCode(err) != crewlet.EUNAVAILABLE || !strings.Contains(msg, tt.want) {
					t.Fatalf("error %v; want %s saying %q", err, crewlet.EUNAVAILABLE, tt.want)
				}
				if strings.Contains(msg, "SELECT") || strings.Contains(msg, "SQLSTATE") || strings.Contains(msg, "closed pool") {
					t.Fatalf("message %q carries the database's own text; that belongs in the log", msg)
				}
			}
		})
	}
}
