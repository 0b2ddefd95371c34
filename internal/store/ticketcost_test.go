package store_test

import (
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

// A ticket's cost is the rounds of the thread that served it plus its
// sub-tickets' costs, at any depth; a round recorded twice (a retry) counts
// once, a round of another thread of the same seat not at all, and a
// ticket to a remote agent costs 0 and says it is remote.
func TestTicketCostRollsUpTheChainOnce(t *testing.T) {
	st, ctx := setup(t)
	open := func(key, to, parent string) crewlet.Ticket {
		t.Helper()
		tk, created, err := st.CreateTicket(ctx, key, crewlet.Ticket{From: "alice", To: to, Task: "task " + key, Conversation: "conv-cost", Parent: parent})
		if err != nil || !created {
			t.Fatalf("CreateTicket(%s) = created %v, %v", key, created, err)
		}
		return tk
	}
	round := func(seat, workKey string, n int, nano, in, out, cached int64, priced bool) {
		t.Helper()
		if _, _, err := st.RecordRoundAnswer(ctx, wire.RoundRow{Seat: seat, WorkKey: workKey, Round: n, Profile: "p",
			InputTokens: in, OutputTokens: out, CachedTokens: cached, NanoUSD: nano, Priced: priced, Model: "m", Role: "r"}, time.UTC, nil); err != nil {
			t.Fatalf("RecordRoundAnswer(%s %d): %v", seat, n, err)
		}
	}
	serving := func(tk crewlet.Ticket) string { return crewlet.ThreadKey(tk.RequestEvent) }

	root := open("cost-root", "cto", "")
	a := open("cost-a", "eng-1", root.ID)
	far := open("cost-far", "a2a:far", a.ID)
	b := open("cost-b", "eng-2", root.ID)
	other := open("cost-other", "cto", "")
	if a.Parent != root.ID {
		t.Fatalf("sub-ticket's parent = %q; want %s", a.Parent, root.ID)
	}

	round(root.To, serving(root), 1, 1000, 100, 10, 0, true)
	round(root.To, serving(root), 2, 2000, 200, 20, 50, true)
	round(root.To, serving(root), 2, 2000, 200, 20, 50, true) // a retried round
	round(a.To, serving(a), 1, 300, 30, 3, 0, true)
	round(a.To, serving(a), 2, 0, 40, 4, 0, false)
	round(b.To, serving(b), 1, 5, 1, 1, 0, true)
	round(other.To, serving(other), 1, 999_999, 9, 9, 0, true) // cto's other work

	links, truncated, err := st.TicketChain(ctx, root.ID)
	if err != nil || truncated {
		t.Fatalf("TicketChain = truncated %v, %v", truncated, err)
	}
	type row struct {
		ticket     string
		depth      int
		own, total int64
		rounds     int64
		unpriced   int64
		remote     bool
	}
	want := map[string]row{
		root.ID: {root.ID, 0, 3000, 3305, 5, 44, false},
		a.ID:    {a.ID, 1, 300, 300, 2, 44, false},
		far.ID:  {far.ID, 2, 0, 0, 0, 0, true},
		b.ID:    {b.ID, 1, 5, 5, 1, 0, false},
	}
	if len(links) != len(want) || links[0].Ticket != root.ID {
		t.Fatalf("chain = %+v; want the root first, then %d tickets under it", links, len(want)-1)
	}
	for i, l := range links {
		w, ok := want[l.Ticket]
		got := row{l.Ticket, l.Depth, l.Own.NanoUSD, l.Total.NanoUSD, l.Total.Rounds, l.Total.UnpricedTokens, l.Remote}
		if !ok || got != w {
			t.Errorf("link %d = %+v; want %+v", i, got, w)
		}
		if i > 0 && l.Parent == "" {
			t.Errorf("link %d (%s) has no parent", i, l.Ticket)
		}
	}
	if c := links[0].Total; c.InputTokens != 371 || c.OutputTokens != 38 || c.CachedTokens != 50 || c.USD != 3305e-9 {
		t.Errorf("root's total = %+v; want 371 in, 38 out, 50 cached, $0.000003305", c)
	}

	costs, err := st.TicketCosts(ctx, []string{root.ID, a.ID, far.ID, other.ID})
	if err != nil {
		t.Fatal(err)
	}
	for id, nano := range map[string]int64{root.ID: 3305, a.ID: 300, far.ID: 0, other.ID: 999_999} {
		if costs[id].NanoUSD != nano {
			t.Errorf("listed cost of %s = %+v; want %d nano-dollars", id, costs[id], nano)
		}
	}

	if _, _, err := st.TicketChain(ctx, "t-nosuch"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Errorf("chain of no ticket: %v; want ENOTFOUND", err)
	}
}
