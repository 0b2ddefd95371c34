package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
)

// costChainOrg is a delegation chain on priced scripted models: cto
// delegates to eng-1 and to a seat spawned of eng, and eng-1 to another
// spawned one, each waiting. The spawned seats answer slowly, so a node
// can be killed while the chain is under way. Roles are pinned to nodes
// labelled for them.
const costChainOrg = `company: { name: costco }
nodes: { reconcile_interval: 1s }
profiles:
  lead:
    provider: scripted
    model: lead-model
    rules:
      - match: '^get a fix for (.*)'
        tools:
          - { name: delegate, args: { to: eng-1, task: 'please fix {{index .Groups 1}}', wait: true } }
          - { name: delegate, args: { to: 'spawn:eng', task: 'please test {{index .Groups 1}}', wait: true } }
        reply: 'cto says: {{.Last}}'
  fixer:
    provider: scripted
    model: fixer-model
    rules:
      - match: '^please fix (.*)'
        tools: [ { name: delegate, args: { to: 'spawn:eng', task: 'please test {{index .Groups 1}}', wait: true } } ]
        reply: 'Fixed {{index .Groups 1}}; {{.Last}}'
  builder:
    provider: scripted
    model: builder-model
    delay: 3s
    rules:
      - match: '^please test (.*)'
        reply: 'Tested {{index .Groups 1}}.'
prices:
  - { model: lead-model, input_mtok: 3, output_mtok: 15 }
  - { model: fixer-model, input_mtok: 1, output_mtok: 5 }
  - { model: builder-model, input_mtok: 0.5, output_mtok: 2 }
roles:
  lead: { charter: leads, profile: lead, may: { spawn: [eng] }, placement: { labels: { side: lead } } }
  engineer: { charter: fixes, profile: fixer, may: { spawn: [eng] }, placement: { labels: { side: eng } } }
  eng: { charter: builds, profile: builder, placement: { labels: { side: eng } } }
pools: [ { role: eng, max_seats: 4, idle_reap_after: 1h } ]
seats:
  - { handle: cto, role: lead }
  - { handle: eng-1, role: engineer }
  - { handle: alice, kind: human }
`

// roundsSpent reads every model round the company recorded, straight from
// turn_rounds: how many, and their amounts summed.
func (c *company) roundsSpent() (rounds, nanoUSD int64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(nano_usd), 0)::bigint FROM turn_rounds`).Scan(&rounds, &nanoUSD); err != nil {
		c.t.Fatal(err)
	}
	return rounds, nanoUSD
}

// A person's ticket to cto fans out: cto → eng-1 → a spawned seat, and
// cto → another spawned seat. eng-1's node is killed with -9 while eng-1
// waits on its sub-ticket; eng-1 fails over and its turn goes on. Once
// the person's ticket is done, its cost is every model round the company
// ran (read from turn_rounds), none counted twice; the chain lists each
// ticket with its depth, its own cost and its total; and GET /tickets
// lists the person's request at the same cost.
func TestTicketCostIsTheWholeChainAcrossANodeKill(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", costChainOrg))
	c.apiServer()
	c.worker("lead", "--labels", "side=lead")
	engNodes := map[string]*proc{"e1": c.worker("e1", "--labels", "side=eng"), "e2": c.worker("e2", "--labels", "side=eng")}
	c.waitAttached(60 * time.Second)

	var root crewlet.Ticket
	if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "cto", Task: "get a fix for the build", From: "alice",
		Conversation: "cost-chain-" + testenv.Suffix()}, &root); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "eng-1 waiting on its sub-ticket", func() error {
		st := c.state("eng-1")
		if st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Waiting == nil {
			return fmt.Errorf("eng-1 not waiting yet")
		}
		return nil
	})
	victim := c.nodeOf("eng-1")
	engNodes[victim].kill(t)
	t.Logf("killed %s while eng-1 waited on its sub-ticket", victim)

	var view api.TicketView
	testenv.Eventually(t, 120*time.Second, "the person's ticket done", func() error {
		if err := c.call(http.MethodGet, "/tickets/"+root.ID, nil, &view); err != nil {
			return err
		}
		if view.Phase != crewlet.TicketDone {
			return fmt.Errorf("ticket is %s", view.Phase)
		}
		return nil
	})
	if !strings.HasPrefix(view.Reply, "cto says:") {
		t.Errorf("reply %q; want cto's answer", view.Reply)
	}
	if got := c.nodeOf("eng-1"); got == victim {
		t.Errorf("eng-1 still on the killed node %s", got)
	}

	rounds, spent := c.roundsSpent()
	if spent == 0 || view.Cost.NanoUSD != spent || view.Cost.Rounds != rounds || view.Cost.UnpricedTokens != 0 {
		t.Fatalf("the person's ticket cost %+v; want every round the company ran: %d rounds, %d nano-dollars, all priced", view.Cost, rounds, spent)
	}
	// The day's spend, charged once per new round, agrees: GET /costs by
	// seat sums to the same amount, over the seats of the chain.
	var spend api.Costs
	yesterday := time.Now().UTC().Add(-24 * time.Hour).Format(time.DateOnly)
	if err := c.call(http.MethodGet, "/costs?by=seat&since="+yesterday, nil, &spend); err != nil {
		t.Fatal(err)
	}
	if spend.Total.NanoUSD != spent || spend.Total.Rounds != rounds || len(spend.Rows) != 4 || spend.Rows[0].Key != "cto" {
		t.Errorf("GET /costs by seat = %+v; want cto first of the chain's 4 seats, %d rounds, %d nano-dollars", spend, rounds, spent)
	}
	// cto's ticket, eng-1's and one spawned seat's under each.
	byDepth := map[int][]crewlet.TicketLink{}
	for _, l := range view.CostChain {
		byDepth[l.Depth] = append(byDepth[l.Depth], l)
		if l.Phase != crewlet.TicketDone || l.Own.Rounds == 0 || l.Own.NanoUSD == 0 || l.Total.NanoUSD < l.Own.NanoUSD {
			t.Errorf("link %+v; want a done ticket whose own rounds cost something, within its total", l)
		}
	}
	if len(byDepth[0]) != 1 || byDepth[0][0].Ticket != root.ID || len(byDepth[1]) != 2 || len(byDepth[2]) != 1 ||
		byDepth[2][0].Parent == root.ID || !strings.HasPrefix(byDepth[2][0].To, "eng-") || byDepth[0][0].Total != view.Cost {
		t.Fatalf("chain %+v; want the person's ticket, two under it (eng-1, a spawned seat) and one under eng-1's", view.CostChain)
	}
	t.Logf("the chain cost $%.9f over %d rounds: %+v", view.Cost.USD, view.Cost.Rounds, view.CostChain)

	var listed []api.ListedTicket
	if err := c.call(http.MethodGet, "/tickets?from=alice", nil, &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != root.ID || listed[0].Cost != view.Cost {
		t.Errorf("alice's requests = %+v; want her one ticket at %+v", listed, view.Cost)
	}
}
