package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// TestRecordBudgetHoldAndContinueAsNew drives two seat paths no other e2e
// test reaches, a budget hold and a continue-as-new, so that their
// histories can join the replay corpus in workflows/testdata. It runs only
// when CREWLET_E2E_HISTORIES names where the harness keeps histories
// (docs/versioning.md, "Recording a history").
func TestRecordBudgetHoldAndContinueAsNew(t *testing.T) {
	if os.Getenv("CREWLET_E2E_HISTORIES") == "" {
		t.Skip("records histories for the replay corpus; set CREWLET_E2E_HISTORIES=DIR to run it")
	}
	org := filepath.Join(t.TempDir(), "org.yaml")
	if err := os.WriteFile(org, []byte(`company: { name: corpus }
profiles:
  quick: { provider: scripted, rules: [ { match: ".", reply: "Noted." } ] }
roles:
  capped: { charter: "You answer briefly.", profile: quick, budget: { tokens_per_day: 10 } }
  plain: { charter: "You answer briefly.", profile: quick }
seats:
  - { handle: capped-1, role: capped }
  - { handle: plain-1, role: plain }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCompany(t, org)
	c.serve()

	// The first turn spends more than the day's cap; the second is held.
	c.waitReply(c.send("capped-1", "first"), 30*time.Second)
	c.send("capped-1", "second")
	testenv.Eventually(t, 30*time.Second, "capped-1 held by its budget", func() error {
		if st := c.state("capped-1"); st.Budget == nil {
			return fmt.Errorf("capped-1 is %s with no budget hold", st.Status)
		}
		return nil
	})

	// Every wake is a loop cycle; the run hands over after cyclesPerRun.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testenv.Eventually(t, 3*time.Minute, "plain-1 continued as new", func() error {
		for range 20 {
			if err := c.temporal.SignalWorkflow(ctx, crewlet.SeatWorkflowID("plain-1"), "", crewlet.SignalWake, nil); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond) // one cycle per wake, not one per batch of them
		}
		if runs := c.state("plain-1").Counters.ContinuedRuns; runs == 0 {
			return fmt.Errorf("plain-1 has not continued as new yet")
		}
		return nil
	})
	c.waitReply(c.send("plain-1", "after the hand-over"), 30*time.Second)
}
