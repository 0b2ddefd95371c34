package config

import (
	"context"
	"strings"
	"testing"
)

// A lookup that misses on a Live catches up with the active revision once
// and looks again: a seat added by a revision the process has not taken yet
// is found. Misses in quick succession catch up once.
func TestKnownCatchesUpBeforeCallingASeatAbsent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	next := mustParse(t, strings.Replace(changesBase, "  - { handle: cto, role: eng }\n", "  - { handle: cto, role: eng }\n  - { handle: eng-2, role: eng }\n", 1))
	catchUps := 0
	var live *Live
	live = NewLive(Revision{Number: 1, Org: mustParse(t, changesBase)}, func(context.Context) error {
		catchUps++
		live.Set(Revision{Number: 2, Org: next})
		return nil
	})
	if _, err := SeatIn(ctx, live, "eng-2"); err != nil {
		t.Fatalf("eng-2 after catching up: %v", err)
	}
	if _, err := SeatIn(ctx, live, "nobody"); err == nil || !strings.Contains(err.Error(), `no seat "nobody"`) {
		t.Fatalf("nobody: %v; want not found", err)
	}
	if catchUps != 1 {
		t.Fatalf("caught up %d times; want once for two misses within %s", catchUps, catchUpEvery)
	}
	if _, err := SeatIn(ctx, next, "nobody"); err == nil {
		t.Fatal("a *Config found a seat it does not have")
	}
}
