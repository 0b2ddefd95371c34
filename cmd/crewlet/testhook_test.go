package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/testhook"
)

// A process started with a test hook it cannot honour refuses to start,
// naming the hook, before it reads its config or reaches a server.
func TestBadTestHookRefusesToStart(t *testing.T) {
	t.Setenv(testhook.Env, "wedge_after=soon")
	for _, args := range [][]string{{"worker", "--config", "no-such.yaml"}, {"serve"}, {"seats", "ls"}} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `wedge_after="soon"`) {
			t.Errorf("crewlet %s with a bad hook: %v; want an error naming wedge_after", strings.Join(args, " "), err)
		}
	}
}

// The node hooks reach the node's options once the process loaded them.
func TestNodeHooksReachTheNode(t *testing.T) {
	// Registered first, it runs last: after the variable is restored.
	t.Cleanup(func() { _, _ = testhook.Load() })
	t.Setenv(testhook.Env, testhook.Hooks{WedgeAfter: 2 * time.Second, CutStoreAfter: time.Second}.String())
	if _, err := testhook.Load(); err != nil {
		t.Fatal(err)
	}
	opts, err := nodeOptions("n1", "", 0, io.Discard)
	if err != nil || opts.WedgeAfter != 2*time.Second || opts.CutStoreAfter != time.Second {
		t.Fatalf("nodeOptions = %+v, %v; want wedge_after 2s, cut_store_after 1s", opts, err)
	}
}
