package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// A worker that cannot take the active config revision (a profile it adds
// names a key variable unset in that worker's environment) stays on its
// revision, and while live workers run different revisions no seat is
// stopped and no mailbox stamped absent: neither s02, which the new
// revision removed, by the worker on it, nor s03, which it added, by the
// worker still on the old one. s03 answers without a restart. Once the worker on the
// old revision is gone, the next reconcile pass stops s02 and the next
// maintenance pass stamps its mailbox.
func TestWorkersOnDifferentRevisionsStopNoSeat(t *testing.T) {
	both := fleetOrg(t, 2, 0)
	next := withoutSeat(t, both, "s02")
	body, err := os.ReadFile(next)
	if err != nil {
		t.Fatal(err)
	}
	next = writeFile(t, "next.yaml", strings.Replace(strings.Replace(string(body),
		"seats:\n", "seats:\n  - { handle: s03, role: worker }\n", 1),
		"roles:\n", "  extra: { provider: openai, model: gpt-4o-mini, api_key_env: CREWLET_E2E_EXTRA_KEY }\nroles:\n", 1))
	withKey := []string{"CREWLET_E2E_EXTRA_KEY=sk-test"}
	c := newCompany(t, both)
	c.setenv("CREWLET_MAINTENANCE_INTERVAL=1s", "CREWLET_NODES_RECONCILE_INTERVAL=1s")
	c.apiServerWithEnv(withKey)
	stale := c.worker("n1")
	c.waitAttached(30 * time.Second)
	n1 := c.liveIncarnation("n1")
	current := c.workerWithEnv("n2", withKey)

	if out, err := c.cli("config", "apply", next); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	testenv.Eventually(t, 30*time.Second, "n1 refuses the revision and n2 defers its stop of s02", func() error {
		if len(linesWith(stale.out.String(), "config_revision_refused")) == 0 {
			return fmt.Errorf("n1 has not refused revision 2")
		}
		deferred := linesWith(current.out.String(), "seat_stops_deferred")
		if len(deferred) == 0 || !strings.Contains(deferred[0], "s02") || !strings.Contains(deferred[0], n1) {
			return fmt.Errorf("n2 logged no deferred stop of s02 naming %s: %q", n1, deferred)
		}
		return nil
	})
	c.waitReply(c.send("s03", "new here?"), replyWait)
	testenv.Eventually(t, 30*time.Second, "n1's maintenance defers its stops and sweep", func() error {
		for _, l := range linesWith(stale.out.String(), "mailbox_sweep_deferred") {
			if strings.Contains(l, "on config revision 1 of 2") {
				return nil
			}
		}
		return fmt.Errorf("n1 logged no sweep deferred for running an old revision")
	})
	var state wire.ConfigState
	if err := c.call(http.MethodGet, "/config", nil, &state); err != nil {
		t.Fatal(err)
	}
	refused := false
	for _, p := range state.Processes {
		if p.Revision == 1 && strings.Contains(p.Problem, "CREWLET_E2E_EXTRA_KEY") {
			refused = true
		}
	}
	if state.Revision != 2 || !refused {
		t.Fatalf("GET /config = revision %d, processes %+v; want 2, one process on 1 naming the unset key", state.Revision, state.Processes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range []string{"s02", "s03"} {
		if _, missing, err := c.store().MailboxRegistry(ctx, h); err != nil || missing != nil {
			t.Fatalf("%s's mailbox stamped absent at %v (%v) while live workers disagree", h, missing, err)
		}
		if row, err := c.store().Seat(ctx, h); err != nil || row.Status == "stopped" {
			t.Fatalf("%s is %q (%v); want running", h, row.Status, err)
		}
	}

	// Every live worker now runs revision 2: the next passes stop s02 and
	// stamp its mailbox.
	stale.signal(t, os.Interrupt)
	if code := stale.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("n1 exited %d; want 0", code)
	}
	testenv.Eventually(t, 30*time.Second, "s02 stopped and its mailbox stamped absent", func() error {
		if row, err := c.store().Seat(ctx, "s02"); err != nil || row.Status != "stopped" {
			return fmt.Errorf("s02 is %q (%v)", row.Status, err)
		}
		if _, missing, err := c.store().MailboxRegistry(ctx, "s02"); err != nil || missing == nil {
			return fmt.Errorf("s02's mailbox not stamped absent (%v)", err)
		}
		return nil
	})
}
