package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// A money budget with on_limit: ask, end to end: the first turn's spend
// crosses the share, so the next turn puts one question to olga and goes
// on; no is answered through the API a person uses, and the seat's next
// turn is held, its state naming the money cap and who said no, its mail
// waiting and nothing dead-lettered.
func TestMoneyBudgetAsksAPersonAndHoldsOnNo(t *testing.T) {
	org := filepath.Join(t.TempDir(), "org.yaml")
	// $0.01 a token, a $100 day asked about at 0.1 %: the first turn's
	// tokens cross the share, and no three turns reach the cap.
	if err := os.WriteFile(org, []byte(`company: { name: money }
profiles:
  quick: { provider: scripted, model: dear-model, rules: [ { match: ".", reply: "Noted." } ] }
prices:
  - { model: dear-model, input_mtok: 10000, output_mtok: 10000 }
roles:
  spender: { charter: "You answer briefly.", profile: quick, budget: { usd_per_day: 100, on_limit: ask, ask: { to: olga, at: 0.001 } } }
seats:
  - { handle: spender-1, role: spender }
  - { handle: olga, kind: human }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCompany(t, org)
	c.serve()

	c.waitReply(c.send("spender-1", "first"), 30*time.Second)
	c.waitReply(c.send("spender-1", "second"), 30*time.Second) // goes on while the question waits
	var asks []crewlet.Ticket
	if err := c.call(http.MethodGet, "/tickets?to=spender-1", nil, &asks); err != nil {
		t.Fatal(err)
	}
	if len(asks) != 1 || asks[0].From != "olga" || asks[0].Phase != crewlet.TicketAsking || !strings.Contains(asks[0].Question, "May it go on to the cap?") {
		t.Fatalf("tickets to spender-1: %+v; want one question to olga", asks)
	}
	var answered crewlet.Ticket
	if err := c.call(http.MethodPost, "/tickets/"+asks[0].ID+"/answer", map[string]string{"text": "No."}, &answered); err != nil {
		t.Fatal(err)
	}
	if answered.Phase != crewlet.TicketDone || !strings.Contains(answered.Reply, "Read as no") {
		t.Fatalf("answered: %+v; want done, read as no", answered)
	}

	held := c.send("spender-1", "third")
	var st crewlet.SeatState
	testenv.Eventually(t, 30*time.Second, "spender-1 held by its money budget", func() error {
		if st = c.state("spender-1"); st.Budget == nil {
			return fmt.Errorf("spender-1 is %s with no budget hold", st.Status)
		}
		return nil
	})
	// The harness answers with the operator's token, for olga.
	if h := st.Budget; h.Unit != crewlet.UnitNanoUSD || h.Cap != 100_000_000_000 || !strings.Contains(h.Reason, answered.AnsweredBy+" answered no") {
		t.Fatalf("budget_hold %+v; want the $100 day cap in nano-dollars, saying %s answered no", h, answered.AnsweredBy)
	}
	if r := c.repliesTo(held); len(r) != 0 {
		t.Fatalf("a held seat answered %q", r)
	}
	if err := c.call(http.MethodGet, "/tickets?to=spender-1", nil, &asks); err != nil || len(asks) != 1 {
		t.Fatalf("tickets to spender-1 after the hold: %+v, %v; want still the one", asks, err)
	}
	var dead []map[string]any
	if err := c.call(http.MethodGet, "/deadletters", nil, &dead); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters: %+v, %v; want none", dead, err)
	}
}
