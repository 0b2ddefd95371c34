package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
	"github.com/crewlet/crewlet/internal/wire"
)

// openPage moves the signed-in console to route (a hash route such as
// "approvals") and waits for the page to say it is drawn.
func (b *browser) openPage(route, ready string) {
	b.t.Helper()
	eval[string](b, fmt.Sprintf(`location.hash = %q`, "#/"+route))
	b.waitVisible(fmt.Sprintf(`main[data-ready=%q]`, ready))
}

// A gated ledger write waits for olga; the approvals page shows it with its
// arguments as text (markup and all), its seat and its conversation; an
// operator the policy does not name sees no buttons; olga approves in the
// page and the write runs, once. A second call she denies in the page with
// a reason, which the model gets as the result; a third, decided through
// the API while her page still offers it, shows the API's refusal; a
// fourth she approves and remembers, and the same call again runs without
// asking.
func TestConsoleApprovalDecidedInThePageRunsTheCall(t *testing.T) {
	c, countFile := newApprovalsCompany(t)
	c.worker("n1")
	c.waitAttached(60 * time.Second)

	msg := c.send("s01", "record invoice 42 <img src=x onerror=alert(1)>", from("olga"))
	asked := c.pendingApproval("s01", "invoice 42")
	card := fmt.Sprintf(`li[data-approval=%q]`, asked.ID)
	if asked.Conversation != msg.Conversation {
		t.Fatalf("approval %s in conversation %q; want the message's %s", asked.ID, asked.Conversation, msg.Conversation)
	}

	ops := c.browser()
	ops.signIn(approvalOpsToken)
	ops.openPage("approvals", "approvals")
	ops.waitText(card, "Only olga or an admin may decide it.")
	if n := eval[int](ops, `document.querySelectorAll("#pending-approvals button").length`); n != 0 {
		t.Fatalf("ops, whom the policy does not name, sees %d buttons; want none", n)
	}

	b := c.browser()
	b.signIn(approvalOlgaToken)
	b.openPage("approvals", "approvals")
	b.waitText(card+" pre.args", `"text": "invoice 42 <img src=x onerror=alert(1)>"`)
	if n := eval[int](b, `document.querySelectorAll("#pending-approvals img").length`); n != 0 {
		t.Fatalf("the arguments' markup made %d elements; want it shown as text", n)
	}
	links := eval[[]string](b, `[...document.querySelectorAll(`+fmt.Sprintf("%q", card+" dl a")+`)].map(a => a.getAttribute("href"))`)
	if want := []string{"#/seats/s01", "#/conversations/" + msg.Conversation}; strings.Join(links, " ") != strings.Join(want, " ") {
		t.Fatalf("the approval links %v; want the seat and the conversation %v", links, want)
	}
	b.screenshot("approvals")
	if n := len(toolstest.Writes(t, countFile)); n != 0 {
		t.Fatalf("%d writes before the decision; want none", n)
	}
	b.click(card + ` button[data-action="approve"]`)
	if reply := c.waitReply(msg, 60*time.Second); reply != "recorded: written: invoice 42 <img src=x onerror=alert(1)>" {
		t.Fatalf("reply %q; want the write's result after the page's approval", reply)
	}
	if writes := toolstest.Writes(t, countFile); len(writes) != 1 {
		t.Fatalf("the write ran %d times (%v); want once", len(writes), writes)
	}
	b.waitText(`#decided-approvals `+card, "approved")
	b.waitText(`#decided-approvals `+card, "by olga")

	deny := c.send("s01", "record invoice 43", from("olga"))
	denied := c.pendingApproval("s01", "invoice 43")
	card = fmt.Sprintf(`#pending-approvals li[data-approval=%q]`, denied.ID)
	b.openPage("company", "company")
	b.openPage("approvals", "approvals")
	b.click(card + ` form button[type="submit"]`)
	b.waitText(card+" form .said", "is required")
	b.typeText(card+" form input", "wrong customer")
	b.click(card + ` form button[type="submit"]`)
	if reply := c.waitReply(deny, 60*time.Second); reply != "recorded: denied by olga: wrong customer" {
		t.Fatalf("reply %q; want the page's denial as the call's result", reply)
	}

	late := c.send("s01", "record invoice 44", from("olga"))
	stale := c.pendingApproval("s01", "invoice 44")
	card = fmt.Sprintf(`#pending-approvals li[data-approval=%q]`, stale.ID)
	b.openPage("company", "company")
	b.openPage("approvals", "approvals")
	b.waitVisible(card + ` button[data-action="approve"]`)
	c.decide(stale.ID, "deny", wire.ApprovalDecision{Reason: "decided elsewhere"})
	b.click(card + ` button[data-action="approve"]`)
	b.waitText(card+" .said .error", "is denied already (by olga)")
	if reply := c.waitReply(late, 60*time.Second); reply != "recorded: denied by olga: decided elsewhere" {
		t.Fatalf("reply %q; want the first decision to stand", reply)
	}
	if writes := toolstest.Writes(t, countFile); len(writes) != 1 {
		t.Fatalf("the write ran %d times after a denial and a refused approval; want once", len(writes))
	}

	// Approve and remember, for these arguments: the same call again runs
	// without asking.
	kept := c.send("s01", "record invoice 45", from("olga"))
	remembered := c.pendingApproval("s01", "invoice 45")
	card = fmt.Sprintf(`li[data-approval=%q]`, remembered.ID)
	b.openPage("company", "company")
	b.openPage("approvals", "approvals")
	b.click(`#pending-approvals ` + card + ` button[data-action="remember"]`)
	b.waitText(`#decided-approvals `+card, "Remembered until")
	b.waitText(`#decided-approvals `+card, "these arguments only")
	if reply := c.waitReply(kept, 60*time.Second); reply != "recorded: written: invoice 45" {
		t.Fatalf("reply %q; want the remembered write's result", reply)
	}
	if reply := c.waitReply(c.send("s01", "record invoice 45", from("olga")), 60*time.Second); reply != "recorded: written: invoice 45" {
		t.Fatalf("reply %q; want the same call again to run on the grant", reply)
	}
	var asked45 []crewlet.Approval
	if err := c.call(http.MethodGet, "/approvals?seat=s01&status=all", nil, &asked45); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range asked45 {
		if strings.Contains(a.Args, "invoice 45") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d approvals asked for invoice 45; want the one remembered", n)
	}
}

// listsTicketsOrg: cto delegates to eng-1 without waiting and reports what
// the ticket's notice says; eng-1 asks which config to use and puts the
// answer in its reply.
const listsTicketsOrg = `company: { name: ticketpageco }
auth:
  tokens:
    - { name: ann, role: admin, token_env: CREWLET_E2E_TOKEN_ADMIN }
    - { name: vic, role: viewer, token_env: CREWLET_E2E_TOKEN_VIEWER }
profiles:
  lead:
    provider: scripted
    rules:
      - match: '^get a fix for (.*)'
        tools: [ { name: delegate, args: { to: eng-1, task: 'please fix {{index .Groups 1}}' } } ]
        reply: 'Delegated: {{index .Results 0}}'
      - match: '(?s)^Ticket (\S+) to (\S+) is done\. Reply:\s*(.*?)\s*The task was'
        reply: 'Update: {{index .Groups 2}} reports: {{index .Groups 3}}'
      - { match: '.', reply: 'noted' }
  eng:
    provider: scripted
    rules:
      - match: '^please fix (.*)'
        tools: [ { name: ask, args: { question: 'which config should I use for {{index .Groups 1}}?' } } ]
        reply: 'Fixed {{index .Groups 1}}. {{.Last}}'
roles:
  lead: { charter: leads and delegates, profile: lead }
  engineer: { charter: fixes what it is given, profile: eng }
seats:
  - { handle: cto, role: lead }
  - { handle: eng-1, role: engineer }
`

const (
	listsAdminToken  = "e2e-lists-admin-0123456789"
	listsViewerToken = "e2e-lists-viewer-0123456789"
)

// cto delegates a fix to eng-1, which asks a question; the tickets page
// shows the open ticket under asking with its chain (cto → eng-1) and the
// question as text; a viewer gets no answer form; an admin answers in the
// page for cto, eng-1's reply carries the answer, and the notice of the
// done ticket reaches cto, which reports it in the conversation.
func TestConsoleTicketAnsweredInThePageReachesTheDelegator(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", listsTicketsOrg))
	c.setenv("CREWLET_E2E_TOKEN_ADMIN="+listsAdminToken, "CREWLET_E2E_TOKEN_VIEWER="+listsViewerToken)
	c.token = listsAdminToken
	c.serve()
	c.waitAttached(30 * time.Second)

	conv := "page-" + testenv.Suffix()
	c.send("cto", "get a fix for the <i>build</i>", inConversation(conv))
	var tk crewlet.Ticket
	testenv.Eventually(t, 30*time.Second, "cto's ticket asking", func() error {
		ts := c.tickets("from=cto")
		if len(ts) != 1 || ts[0].Phase != crewlet.TicketAsking {
			return fmt.Errorf("tickets %+v", ts)
		}
		tk = ts[0]
		return nil
	})
	card := fmt.Sprintf(`li[data-ticket=%q]`, tk.ID)

	viewer := c.browser()
	viewer.signIn(listsViewerToken)
	viewer.openPage("tickets", "tickets")
	viewer.waitText(`#open-tickets [data-phase="asking"] `+card, "which config should I use for the <i>build</i>?")
	// The cost breakdown only reads, which a viewer may; nothing that acts.
	if n := eval[int](viewer, `document.querySelectorAll('#open-tickets form, #open-tickets button:not([data-action="breakdown"])').length`); n != 0 {
		t.Fatalf("a viewer sees %d forms and buttons that act on the tickets page; want none", n)
	}
	if n := eval[int](viewer, `document.querySelectorAll('#open-tickets button[data-action="breakdown"]').length`); n == 0 {
		t.Fatalf("a viewer sees no cost breakdown on the tickets page")
	}

	b := c.browser()
	b.signIn(listsAdminToken)
	b.openPage("tickets", "tickets")
	b.waitText(card+" .chain", "cto → eng-1")
	if n := eval[int](b, `document.querySelectorAll("#open-tickets i").length`); n != 0 {
		t.Fatalf("the ticket's markup made %d elements; want it shown as text", n)
	}
	links := eval[[]string](b, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(a => a.getAttribute("href"))`, card+" .chain a"))
	if strings.Join(links, " ") != "#/seats/cto #/seats/eng-1" {
		t.Fatalf("the chain links %v; want cto and eng-1", links)
	}
	b.screenshot("tickets")
	b.typeText(card+" textarea", "use the staging config")
	b.click(card + ` form:first-of-type button[type="submit"]`)
	update := c.waitTranscript(conv, "cto", "Update:", 60*time.Second)
	if !strings.Contains(update, "Fixed the <i>build</i>.") || !strings.Contains(update, "use the staging config") {
		t.Fatalf("cto's report %q; want eng-1's reply carrying the page's answer", update)
	}
	done := c.tickets("from=cto")[0]
	if done.Phase != crewlet.TicketDone || done.Answer != "use the staging config" || done.AnsweredBy != "ann" {
		t.Fatalf("ticket %+v; want done, answered by ann in the page", done)
	}
	b.openPage("company", "company")
	b.openPage("tickets", "tickets")
	b.waitText(`#recent-tickets [data-phase="done"] `+card, "use the staging config")
	t.Logf("cto's report after the page's answer: %q", update)

	// More open tickets than a page: the page shows the first hundred and
	// reads the rest on "more", from the API's cursor.
	if err := c.call(http.MethodPost, "/seats/eng-1/pause", crewlet.PauseRequest{Reason: "holding tickets"}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 101 {
		if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "eng-1", Task: fmt.Sprintf("please fix page %d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	b.openPage("company", "company")
	b.openPage("tickets", "tickets")
	if n := eval[int](b, `document.querySelectorAll("#open-tickets li.ticket").length`); n != 100 {
		t.Fatalf("the first page of open tickets shows %d; want 100", n)
	}
	b.click(`#open-tickets .more button`)
	b.waitText(`#open-tickets`, "please fix page 0")
	if n := eval[int](b, `document.querySelectorAll("#open-tickets li.ticket").length`); n != 101 {
		t.Fatalf("after more, the page shows %d open tickets; want 101", n)
	}
}

// fleetPagesOrg: s01 answers anything but "malformed", which the provider
// refuses, so that message is dead-lettered at once; one schedule that
// never comes due in a test.
const fleetPagesOrg = `company: { name: fleetpageco }
auth:
  tokens:
    - { name: ann, role: admin, token_env: CREWLET_E2E_TOKEN_ADMIN }
    - { name: vic, role: viewer, token_env: CREWLET_E2E_TOKEN_VIEWER }
profiles:
  local:
    provider: scripted
    rules:
      - { match: '^malformed', fail: 'the provider refuses this request' }
      - { match: '.', reply: 'ok' }
roles: { worker: { charter: works, profile: local } }
seats:
  - { handle: s01, role: worker }
schedules:
  - { name: nightly, cron: "0 3 * * *", timezone: UTC, to: s01, text: "nightly <b>report</b>" }
`

// The fleet's pages: a viewer sees the dead letters and schedules but no
// button that steers, and no audit page; an admin requeues a dead letter,
// fires and pauses a schedule from its page, and finds those actions in
// the audit log filtered by action.
func TestConsoleFleetPagesSteerForWhoMay(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", fleetPagesOrg))
	c.setenv("CREWLET_E2E_TOKEN_ADMIN="+listsAdminToken, "CREWLET_E2E_TOKEN_VIEWER="+listsViewerToken)
	c.token = listsAdminToken
	c.serve()
	c.waitAttached(30 * time.Second)

	for _, text := range []string{"malformed 1", "malformed <i>2</i>"} {
		c.send("s01", text)
	}
	var dls []mailbox.DeadLetter
	testenv.Eventually(t, 30*time.Second, "two dead letters", func() error {
		if err := c.call(http.MethodGet, "/deadletters", nil, &dls); err != nil {
			return err
		}
		if len(dls) != 2 {
			return fmt.Errorf("%d dead letters", len(dls))
		}
		return nil
	})

	viewer := c.browser()
	viewer.signIn(listsViewerToken)
	viewer.openPage("deadletters", "deadletters")
	viewer.waitText(fmt.Sprintf(`li[data-id=%q] pre`, dls[0].ID), "malformed <i>2</i>")
	viewer.openPage("schedules/nightly", "schedule")
	viewer.waitText("#schedule pre", "nightly <b>report</b>")
	if n := eval[int](viewer, `document.querySelectorAll("main button, main form, main i, main b").length`); n != 0 {
		t.Fatalf("a viewer's schedule page has %d buttons, forms or markup elements; want none", n)
	}
	viewer.openPage("deadletters", "deadletters")
	if n := eval[int](viewer, `document.querySelectorAll("main button, main i").length`); n != 0 {
		t.Fatalf("a viewer's dead-letters page has %d buttons or markup elements; want none", n)
	}
	if nav := viewer.text("#nav"); strings.Contains(nav, "Audit") {
		t.Fatalf("a viewer's page list %q offers the audit log", nav)
	}
	eval[string](viewer, `location.hash = "#/audit"`)
	viewer.waitText("main h1", "Not here")

	b := c.browser()
	b.signIn(listsAdminToken)
	b.openPage("deadletters", "deadletters")
	letter := fmt.Sprintf(`li[data-id=%q]`, dls[1].ID)
	b.click(letter + ` button[data-action="requeue"]`)
	b.waitText(letter, "Requeued to s01.")
	b.screenshot("deadletters")

	b.openPage("schedules", "schedules")
	b.click(`#schedules a[href="#/schedules/nightly"]`)
	b.waitVisible(`main[data-ready="schedule"] button[data-action="trigger"]`)
	b.click(`button[data-action="trigger"]`)
	testenv.Eventually(t, 30*time.Second, "the fire the page asked for answered", func() error {
		var d wire.ScheduleDetail
		if err := c.call(http.MethodGet, "/schedules/nightly", nil, &d); err != nil {
			return err
		}
		if len(d.History) == 0 || d.History[0].HandledAt == nil {
			return fmt.Errorf("history %+v", d.History)
		}
		return nil
	})
	b.typeText(`#schedule form input`, "quiet week")
	b.click(`#schedule form button[type="submit"]`)
	b.waitText("#schedule", "Unpause")
	b.waitText("#schedule dl", "paused")
	b.openPage("schedules", "schedules")
	b.openPage("schedules/nightly", "schedule")
	b.waitText("#schedule", "s01")
	b.screenshot("schedule")

	b.open("/ui/#/audit?action=" + url.QueryEscape("POST /schedules/{name}/trigger"))
	b.waitVisible(`main[data-ready="audit"]`)
	b.waitText("#audit tbody", "POST /schedules/{name}/trigger")
	if rows := eval[int](b, `document.querySelectorAll("#audit tbody tr").length`); rows != 1 {
		t.Fatalf("the audit page filtered by the trigger's action shows %d rows; want 1", rows)
	}
	b.screenshot("audit")
}
