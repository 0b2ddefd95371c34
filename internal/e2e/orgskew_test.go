package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/testenv"
)

// While a changed org file rolls out, live workers disagree about which
// seats exist, and nothing says which file is stale. A worker started on a
// file without s02, while a worker on the file with it is live, stops no
// seat and stamps no mailbox absent: s02 keeps answering. Once no live node
// disagrees, the next reconcile pass stops it and the next maintenance pass
// stamps its mailbox.
func TestWorkersOnDifferentOrgFilesStopNoSeat(t *testing.T) {
	both := fleetOrg(t, 2, 0)
	onlyFirst := withoutSeat(t, both, "s02")
	c := newCompany(t, both)
	c.setenv("CREWLET_MAINTENANCE_INTERVAL=1s", "CREWLET_NODES_RECONCILE_INTERVAL=1s")
	c.apiServer()
	current := c.worker("n1")
	c.waitAttached(30 * time.Second)
	n1 := c.liveIncarnation("n1")

	c.config = onlyFirst
	stale := c.worker("n2")
	testenv.Eventually(t, 30*time.Second, "n2's reconcile and a maintenance pass wait for agreement", func() error {
		deferred := linesWith(stale.out.String(), "seat_stops_deferred")
		if len(deferred) == 0 || !strings.Contains(deferred[0], "s02") || !strings.Contains(deferred[0], n1) {
			return fmt.Errorf("n2 logged no deferred stop of s02 naming %s: %q", n1, deferred)
		}
		if len(linesWith(current.out.String()+stale.out.String(), "mailbox_sweep_deferred")) == 0 {
			return fmt.Errorf("no maintenance pass has deferred its sweep yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, missing, err := c.store().MailboxRegistry(ctx, "s02"); err != nil || missing != nil {
		t.Fatalf("s02's mailbox stamped absent at %v (%v) while a live worker's org has it", missing, err)
	}
	if row, err := c.store().Seat(ctx, "s02"); err != nil || row.Status == "stopped" {
		t.Fatalf("s02 is %q (%v); want running", row.Status, err)
	}
	c.waitReply(c.send("s02", "still here?"), replyWait)

	// Every live worker now runs the file without s02: the next passes stop
	// it and stamp its mailbox.
	current.signal(t, os.Interrupt)
	if code := current.wait(t, 30*time.Second); code != 0 {
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
