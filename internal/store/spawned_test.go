package store_test

import (
	"context"
	"regexp"
	"sync"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// Spawns racing from two processes (two pools of connections) never pass
// the pool's max; a reaped seat frees its place and changes the version.
func TestSpawnSeatNeverPassesMax(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.MigratedDatabase(t)
	stores := []*store.Store{testenv.Store(t, url), testenv.Store(t, url)}
	const max, tries = 3, 12
	var mu sync.Mutex
	var spawned []string
	conflicts := 0
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			seat, err := stores[i%2].SpawnSeat(ctx, "eng", "tester", max, func(string) bool { return false })
			mu.Lock()
			defer mu.Unlock()
			switch {
			case crewlet.ErrorCode(err) == crewlet.ECONFLICT:
				conflicts++
			case err != nil:
				t.Errorf("spawn: %v", err)
			default:
				spawned = append(spawned, seat.Handle)
			}
		})
	}
	wg.Wait()
	if len(spawned) != max || conflicts != tries-max {
		t.Fatalf("spawned %v and %d refused; want %d spawned, %d refused", spawned, conflicts, max, tries-max)
	}
	before, err := stores[0].SpawnedVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := stores[0].ReapSeat(ctx, spawned[0]); err != nil || !ok {
		t.Fatalf("reap %s: %v, %v", spawned[0], ok, err)
	}
	if after, err := stores[0].SpawnedVersion(ctx); err != nil || after <= before {
		t.Fatalf("version after a reap %d (%v); want above %d", after, err, before)
	}
	if _, err := stores[1].SpawnSeat(ctx, "eng", "tester", max, func(string) bool { return false }); err != nil {
		t.Fatalf("spawn after a reap freed a place: %v", err)
	}
	live, err := stores[1].SpawnedSeats(ctx)
	if err != nil || len(live) != max {
		t.Fatalf("live spawned seats %d (%v); want %d", len(live), err, max)
	}
}

// A role's spawned names never run out: each is ROLE and 48 random bits,
// a reaped name is never handed out again, and 200 spawn-and-reap rounds
// of one role all get a name of their own at the first tries (with 16 bits
// a long-lived pool filled its names and then could not spawn).
func TestSpawnedNamesDoNotRunOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	name := regexp.MustCompile(`^eng-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 200 {
		seat, err := st.SpawnSeat(ctx, "eng", "tester", 1, func(string) bool { return false })
		if err != nil {
			t.Fatalf("spawn after %d: %v", len(seen), err)
		}
		if !name.MatchString(seat.Handle) || seen[seat.Handle] {
			t.Fatalf("spawned %q (seen before: %v); want eng- and 12 hex digits, new", seat.Handle, seen[seat.Handle])
		}
		seen[seat.Handle] = true
		if ok, err := st.ReapSeat(ctx, seat.Handle); err != nil || !ok {
			t.Fatalf("reap %s: %v, %v", seat.Handle, ok, err)
		}
	}
}
