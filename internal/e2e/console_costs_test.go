package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

const costsPageOrg = `company: { name: costpageco, budget: { tokens_per_day: 1000, usd_per_day: 0.00001 } }
profiles: { local: { provider: scripted, rules: [ { match: ".", reply: "ok" } ] } }
roles:
  lead: { charter: leads, profile: local }
  engineer: { charter: fixes, profile: local }
seats:
  - { handle: cto, role: lead }
  - { handle: eng-1, role: engineer }
  - { handle: alice, kind: human }
`

// The costs page draws, as SVG in the page, the spend of each day of the
// range (a day nothing was spent on at 0), the seats and the models by
// spend, and the company's token and money budgets of the day used against
// their caps;
// the tickets page shows what alice's ticket cost with eng-1's sub-ticket,
// and its breakdown. The receipts are written as a model round writes
// them: two days ago cto spent 4000 nano-dollars; today eng-1 1500 on its
// sub-ticket and cto 1000 on alice's ticket.
func TestConsoleCostsPageChartsTheSpend(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", costsPageOrg))
	c.serve()
	c.waitAttached(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := c.store()
	root, _, err := st.CreateTicket(ctx, "costs-page-root", crewlet.Ticket{From: "alice", To: "cto", Task: "get a fix", Conversation: "costs-page"})
	if err != nil {
		t.Fatal(err)
	}
	sub, _, err := st.CreateTicket(ctx, "costs-page-sub", crewlet.Ticket{From: "cto", FromSeat: true, To: "eng-1", Task: "please fix", Conversation: "costs-page", Parent: root.ID})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, r := range []wire.RoundRow{
		{Seat: "cto", Role: "lead", WorkKey: "earlier", Round: 1, Model: "lead-model", NanoUSD: 4000, InputTokens: 300, OutputTokens: 30, Priced: true, PriceVersion: "v1", RecordedAt: now.Add(-48 * time.Hour)},
		{Seat: "eng-1", Role: "engineer", WorkKey: crewlet.ThreadKey(sub.RequestEvent), Round: 1, Model: "fixer-model", NanoUSD: 1500, InputTokens: 100, OutputTokens: 50, Priced: true, PriceVersion: "v1", RecordedAt: now},
		{Seat: "cto", Role: "lead", WorkKey: crewlet.ThreadKey(root.RequestEvent), Round: 1, Model: "lead-model", NanoUSD: 1000, InputTokens: 200, OutputTokens: 50, Priced: true, PriceVersion: "v1", RecordedAt: now},
	} {
		r.Profile = "local"
		if _, _, err := st.RecordRoundAnswer(ctx, r, time.UTC, nil); err != nil {
			t.Fatal(err)
		}
	}
	days := []string{now.Add(-48 * time.Hour).Format(time.DateOnly), now.Add(-24 * time.Hour).Format(time.DateOnly), now.Format(time.DateOnly)}

	b := c.browser()
	b.openPage(fmt.Sprintf("costs?since=%s&until=%s", days[0], days[2]), "costs")
	b.waitText("#cost-totals", "$0.00000650 from "+days[0]+" to "+days[2])
	attrs := func(sel, attr string) string {
		return strings.Join(eval[[]string](b, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(g => g.getAttribute("data-key") + "=" + g.getAttribute(%q))`, sel, attr)), " ")
	}
	heights := eval[[]float64](b, `[...document.querySelectorAll("#spend-by-day svg g.day rect.bar")].map(r => r.height.baseVal.value)`)
	for _, check := range []struct{ what, got, want string }{
		{"spend per day", attrs("#spend-by-day svg g.day", "data-nano"), fmt.Sprintf("%s=4000 %s=0 %s=2500", days[0], days[1], days[2])},
		{"day bars' heights", fmt.Sprint(heights), "[140 0 88]"},
		{"top seats", attrs("#top-seats svg g.row", "data-value"), "cto=5000 eng-1=1500"},
		{"top models", attrs("#top-models svg g.row", "data-value"), "lead-model=5000 fixer-model=1500"},
		{"the day's token budget", attrs(`#budget-use svg g.meter[data-key="company day tokens"]`, "data-used") + " of " +
			attrs(`#budget-use svg g.meter[data-key="company day tokens"]`, "data-cap"), "company day tokens=400 of company day tokens=1000"},
		{"the day's money budget", attrs(`#budget-use svg g.meter[data-key="company day money"]`, "data-used") + " of " +
			attrs(`#budget-use svg g.meter[data-key="company day money"]`, "data-cap"), "company day money=2500 of company day money=10000"},
	} {
		if check.got != check.want {
			t.Errorf("%s: %s; want %s", check.what, check.got, check.want)
		}
	}
	// What the bars say: SVG text, which has no innerText to wait on.
	for sel, want := range map[string]string{
		`#top-seats svg g.row[data-key="cto"] text.value`:                   "$0.00000500",
		`#budget-use svg g.meter[data-key="company day tokens"] text.value`: "400 of 1000 (40%)",
	} {
		if got := eval[string](b, fmt.Sprintf(`document.querySelector(%q).textContent`, sel)); got != want {
			t.Errorf("%s says %q; want %q", sel, got, want)
		}
	}
	b.screenshot("costs")

	b.openPage("tickets", "tickets")
	card := fmt.Sprintf(`li[data-ticket=%q]`, root.ID)
	b.waitText(card+" .cost .amount", "Cost $0.00000250")
	b.click(card + ` button[data-action="breakdown"]`)
	b.waitText(card+" .cost-chain", sub.ID)
	rows := eval[[]string](b, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(tr => [...tr.cells].map(td => td.textContent.trim()).join(" | "))`, card+" .cost-chain tbody tr"))
	want := []string{
		root.ID + " | cto | pending | $0.00000100 · 1 calls | $0.00000250",
		"└ " + sub.ID + " | eng-1 | pending | $0.00000150 · 1 calls | $0.00000150",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("breakdown:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	b.screenshot("ticket-cost")
}
