package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
)

// consoleOrg has a viewer's token and a member's bound to alice, beside
// three agent seats of two roles.
const consoleOrg = `company: { name: consoleco }
auth:
  tokens:
    - { name: vic, role: viewer, token_env: CREWLET_E2E_TOKEN_VIEWER }
    - { name: al, role: member, seat: alice, token_env: CREWLET_E2E_TOKEN_MEMBER }
profiles: { local: { provider: scripted, rules: [ { match: ".", reply: "noted" } ] } }
roles:
  lead: { charter: leads, profile: local }
  engineer: { charter: builds, profile: local }
seats:
  - { handle: cto, role: lead }
  - { handle: eng-1, role: engineer }
  - { handle: eng-2, role: engineer }
  - { handle: alice, kind: human }
`

const (
	consoleViewer = "e2e-console-viewer-0123456789"
	consoleMember = "e2e-console-member-0123456789"
)

func consoleCompany(t *testing.T) *company {
	c := newCompany(t, writeFile(t, "org.yaml", consoleOrg))
	c.setenv("CREWLET_E2E_TOKEN_VIEWER="+consoleViewer, "CREWLET_E2E_TOKEN_MEMBER="+consoleMember)
	c.token = consoleViewer
	c.serve()
	c.waitAttached(30 * time.Second)
	return c
}

// The company page lists every seat of the org, grouped by role, each
// with the status GET /seats gives it; a viewer sees the fleet's parts
// (budget, nodes, profiles) too.
func TestConsoleCompanyPageListsEverySeatWithItsStatus(t *testing.T) {
	c := consoleCompany(t)
	b := c.browser()
	b.signIn(consoleViewer)
	b.waitVisible(`main[data-ready="company"]`)
	testenv.Eventually(t, 30*time.Second, "every seat on the page with the API's status", func() error {
		var seats []api.SeatSummary
		if err := c.call(http.MethodGet, "/seats", nil, &seats); err != nil {
			return err
		}
		shown := eval[map[string]string](b, `Object.fromEntries([...document.querySelectorAll("#seats .seat")].map(e => [e.dataset.handle, e.dataset.status]))`)
		if len(shown) != len(seats) {
			return fmt.Errorf("the page shows %d seats %v; the org has %d", len(shown), shown, len(seats))
		}
		for _, s := range seats {
			if shown[s.Handle] != s.Status {
				return fmt.Errorf("%s is %q on the page and %q in GET /seats", s.Handle, shown[s.Handle], s.Status)
			}
		}
		return nil
	})
	roles := eval[[]string](b, `[...document.querySelectorAll("#seats .role h3")].map(e => e.firstChild.textContent)`)
	if !slices.Equal(roles, []string{"engineer", "lead", "people"}) {
		t.Errorf("roles on the page %v; want engineer, lead, people", roles)
	}
	for _, part := range []string{"#usage table", "#nodes table", "#profiles table"} {
		b.waitVisible(part)
	}
	b.screenshot("company")
}

// A member's company page asks the API only for what a member may read:
// no fleet route is requested, no request is refused, and the fleet's
// parts are not drawn.
func TestConsoleAsksNothingItsReaderMayNotRead(t *testing.T) {
	c := consoleCompany(t)
	b := c.browser()
	b.signIn(consoleMember)
	b.waitVisible(`main[data-ready="company"]`)
	b.waitText("#seats", "eng-2")
	type request struct {
		Path   string `json:"path"`
		Status int    `json:"status"`
	}
	requests := eval[[]request](b, `performance.getEntriesByType("resource").map(e => ({path: new URL(e.name).pathname, status: e.responseStatus}))`)
	var asked []string
	for _, r := range requests {
		if strings.HasPrefix(r.Path, "/ui/") {
			continue
		}
		asked = append(asked, r.Path)
		if r.Path == "/me" && r.Status == http.StatusUnauthorized {
			// Before the sign-in: the page asks who it is and, told
			// nobody, shows the form.
			continue
		}
		if r.Status >= 400 {
			t.Errorf("the member's page asked %s and got %d", r.Path, r.Status)
		}
		if slices.Contains([]string{"/nodes", "/profiles", "/usage", "/deadletters", "/schedules", "/audit"}, r.Path) {
			t.Errorf("the member's page asked the fleet route %s", r.Path)
		}
	}
	if !slices.Contains(asked, "/me") || !slices.Contains(asked, "/seats") {
		t.Errorf("the member's page asked %v; want /me and /seats among them", asked)
	}
	if n := eval[int](b, `document.querySelectorAll("#usage, #nodes, #profiles").length`); n != 0 {
		t.Errorf("the member's company page draws %d fleet parts; want none", n)
	}
	if who := b.text("#who"); !strings.Contains(who, "al (member of alice)") {
		t.Errorf("header %q; want al (member of alice)", who)
	}
}

// The console is usable by keyboard alone: Tab reaches the page list, and
// Enter on a page's link opens it.
func TestConsoleIsReachableByKeyboard(t *testing.T) {
	c := consoleCompany(t)
	b := c.browser()
	b.signIn(consoleViewer)
	b.waitVisible(`main[data-ready="company"]`)
	for range 20 {
		if eval[string](b, `document.activeElement.getAttribute("href") || ""`) == "#/tickets" {
			break
		}
		b.run("press Tab", chromedp.KeyEvent(kb.Tab))
	}
	if got := eval[string](b, `document.activeElement.getAttribute("href") || ""`); got != "#/tickets" {
		t.Fatalf("20 Tabs from the company page never reached the Tickets link (focus on %q)", got)
	}
	b.run("press Enter", chromedp.KeyEvent(kb.Enter))
	b.waitVisible(`main[data-ready="tickets"]`)
	if focused := eval[string](b, `document.activeElement.id`); focused != "main" {
		t.Errorf("after opening a page the focus is on %q; want the page's main, so the next Tab starts there", focused)
	}
}
