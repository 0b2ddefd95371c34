package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
)

// consoleSeatOrg is a company of one agent seat run by a scripted model
// that streams its answer slowly enough to be seen growing, with an
// operator's and a viewer's token.
const consoleSeatOrg = `company: { name: seatco }
auth:
  tokens:
    - { name: olga, role: operator, token_env: CREWLET_E2E_TOKEN_OPERATOR }
    - { name: vic, role: viewer, token_env: CREWLET_E2E_TOKEN_VIEWER }
    - { name: al, role: member, seat: alice, token_env: CREWLET_E2E_TOKEN_MEMBER }
profiles:
  local: { provider: scripted, delay: 200ms }
  slow: { provider: scripted, delay: 4s }
roles:
  lead: { charter: answers, profile: local }
  thinker: { charter: answers slowly, profile: slow }
seats:
  - { handle: cto, role: lead }
  - { handle: deep, role: thinker }
  - { handle: alice, kind: human }
`

// waitJS waits until the JavaScript predicate expr is true in the page,
// checking on every change of the DOM.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	inPage(b, "wait for "+what, chromedp.PollFunction[bool]("() => { return "+expr+"; }",
		chromedp.WithPollingMutation(),
		chromedp.WithPollingTimeout(browserTimeout),
	))
}

const (
	seatOperator = "e2e-operator-token-0123456789"
	seatViewer   = "e2e-viewer-token-0123456789"
	seatMember   = "e2e-member-token-0123456789"
)

// seatCompany runs consoleSeatOrg: the API and one worker apart, so that a
// test can restart the API alone. Its own calls are the operator's.
func seatCompany(t *testing.T) (*company, *proc) {
	c := newCompany(t, writeFile(t, "org.yaml", consoleSeatOrg))
	c.setenv("CREWLET_E2E_TOKEN_OPERATOR="+seatOperator, "CREWLET_E2E_TOKEN_VIEWER="+seatViewer, "CREWLET_E2E_TOKEN_MEMBER="+seatMember,
		"CREWLET_STREAM_HEARTBEAT=1s")
	c.token = seatOperator
	apiProc := c.apiServer()
	c.worker("n1")
	c.waitAttached(60 * time.Second)
	return c, apiProc
}

// An operator on the seat page: a message sent from the page is answered
// in its live stream, and shown as the text it is, markup and all; its
// turn's transcript opens in place; pause and resume work from the page,
// and a refused one says why; the page says when the API goes away and
// picks its stream up again once the API is back; the conversation page
// shows the exchange and grows with it.
func TestConsoleSeatPageSendsAndFollowsTheSeat(t *testing.T) {
	c, apiProc := seatCompany(t)

	b := c.browser()
	b.signIn(seatOperator)
	b.open("/ui/#/seats/cto")
	b.waitVisible(`main[data-ready="seat"]`)
	b.waitJS("the live stream", `document.getElementById("live").textContent === "live"`)
	if n := eval[int](b, `document.querySelectorAll("#actions button").length`); n != 5 {
		t.Errorf("an operator sees %d action buttons; want 5 (send, pause, stop turn, resume, drain)", n)
	}

	markup := `<script>alert(1)</script><b>x</b>`
	b.typeText("#send-text", markup)
	b.click("#send")
	b.waitText("#action-result", "Sent")
	b.waitVisible(`#stream [data-kind="answer_sent"] .reply`)
	if got := eval[string](b, `document.querySelector("#stream .msg.sent").textContent`); got != markup {
		t.Errorf("the sent message shows as %q; want the text %q", got, markup)
	}
	if n := eval[int](b, `document.querySelectorAll("main b, main script").length`); n != 0 {
		t.Errorf("the page made %d elements of the message's markup; want it shown as text", n)
	}
	for _, kind := range []string{"turn_started", "round_started", "turn_finished"} {
		b.waitVisible(fmt.Sprintf(`#stream [data-kind=%q]`, kind))
	}
	b.waitVisible("#stream .output")
	reply := eval[string](b, `document.querySelector('#stream [data-kind="answer_sent"] .reply').textContent`)
	if reply == "" {
		t.Fatal("the reply in the live stream is empty")
	}
	b.waitText("#turns", markup)
	b.click("#turns details summary")
	b.waitText("#turns .transcript", "Charter receipts")
	b.waitText("#turns .transcript ol.messages", markup)

	// Pause from the page; pausing again is refused, and the page says
	// why in the API's words; resume lifts it.
	b.click("#pause")
	b.waitText("#action-result", "Pause: asked")
	c.waitPaused("cto", true)
	b.click("#pause")
	b.waitText("#action-result .error", "already paused")
	b.click("#resume")
	b.waitText("#action-result", "Resume: asked")
	c.waitPaused("cto", false)

	// The API goes away: the header says so; it comes back: the same page
	// is live again, and the next turn shows once, after the first.
	apiProc.kill(t)
	b.waitJS("the header to say disconnected", `document.getElementById("live").textContent.startsWith("disconnected")`)
	t.Logf("while the API is down the header says %q", b.text("#live"))
	c.apiServer()
	b.waitJS("the stream live again", `document.getElementById("live").textContent === "live"`)
	c.send("cto", "after the restart")
	b.waitJS("the second turn's reply", `document.querySelectorAll('#stream [data-kind="answer_sent"]').length === 2`)
	b.waitJS("the second turn's end", `document.querySelectorAll('#stream [data-kind="turn_finished"]').length === 2`)
	if n := eval[int](b, `document.querySelectorAll('#stream [data-kind="turn_started"]').length`); n != 2 {
		t.Errorf("the stream shows %d turn_started after the restart; want 2, each turn once", n)
	}
	// The list of turns is read again; the transcript opened stays open.
	b.waitJS("both turns listed", `document.querySelectorAll("#turns details").length === 2`)
	b.waitText("#turns details[open] .transcript", "Charter receipts")
	b.screenshot("seat")

	// The conversation page, reached from the stream's link.
	conv := eval[string](b, `document.querySelector("#stream .note a").getAttribute("href")`)
	if !strings.HasPrefix(conv, "#/conversations/") {
		t.Fatalf("the sent message links to %q; want its conversation", conv)
	}
	b.click("#stream .note a")
	b.waitVisible(`main[data-ready="conversation"]`)
	b.waitText("#messages", reply)
	if got := eval[string](b, `document.querySelector("#messages .message pre").textContent`); got != markup {
		t.Errorf("the conversation's first message shows as %q; want the text %q", got, markup)
	}
	if n := eval[int](b, `document.querySelectorAll("main b, main script").length`); n != 0 {
		t.Errorf("the conversation page made %d elements of the message's markup; want it shown as text", n)
	}
	// It grows as the conversation does.
	c.send("cto", "a follow-up", inConversation(strings.TrimPrefix(conv, "#/conversations/")))
	b.waitText("#messages", "[cto] a follow-up")
	b.waitVisible(`#stream [data-kind="answer_sent"]`)
	if n := eval[int](b, `document.querySelectorAll("#messages .message").length`); n != 4 {
		t.Errorf("the conversation page shows %d messages; want 4, each once", n)
	}
	b.screenshot("conversation")
}

// Readers on the seat page: a viewer who opens it while a turn runs sees
// that turn from its start; a viewer sees no action, and an action forged
// from the page's own context with its token is refused; a member sees its
// own seat with no action and asks for nothing it may not read.
func TestConsoleSeatPageShowsItsReaderOnlyWhatItMay(t *testing.T) {
	c, _ := seatCompany(t)
	// The browser starts before the turn does: on a loaded machine its
	// start alone can outlast the turn.
	v := c.browser()
	v.signIn(seatViewer)

	// A page opened while a turn runs shows that turn from its start.
	c.send("deep", "take your time")
	testenv.Eventually(t, 30*time.Second, "deep's turn running", func() error {
		var d api.SeatDetail
		if err := c.call(http.MethodGet, "/seats/deep", nil, &d); err != nil {
			return err
		}
		if d.State == nil || d.State.Turn == nil {
			return fmt.Errorf("no turn yet: %+v", d.State)
		}
		return nil
	})
	eval[string](v, `location.hash = "#/seats/deep"`)
	v.waitVisible(`#stream [data-kind="turn_started"]`)
	v.waitVisible(`#stream [data-kind="round_started"]`)
	v.waitText(`#stream [data-kind="answer_sent"]`, "take your time")

	// A viewer: the same page without one action, and an action forged
	// from the page's own context with the viewer's token is refused.
	eval[string](v, `location.hash = "#/seats/cto"`)
	v.waitText("main h1", "cto")
	v.waitVisible("#tenure dl")
	if n := eval[int](v, `document.querySelectorAll("#actions button, #actions textarea, main form").length`); n != 0 {
		t.Errorf("a viewer sees %d action controls; want none", n)
	}
	for _, path := range []string{"/seats/cto/pause", "/seats/cto/messages"} {
		status := eval[int](v, fmt.Sprintf(`fetch(%q, {method: "POST", credentials: "omit",
			headers: {"Authorization": "Bearer " + sessionStorage.getItem("crewlet.token"), "Content-Type": "application/json"},
			body: JSON.stringify({text: "forged"})}).then((r) => r.status)`, path))
		if status != http.StatusForbidden {
			t.Errorf("POST %s from the viewer's page: %d; want 403", path, status)
		}
	}
	v.screenshot("seat-viewer")

	// A member: its own seat's page, with nothing it may not do and
	// nothing asked that it may not read; another seat's page asks nothing.
	m := c.browser()
	m.signIn(seatMember)
	eval[string](m, `location.hash = "#/seats/alice"`)
	m.waitVisible(`main[data-ready="seat"] #tenure dl`)
	m.waitJS("the member's live stream", `document.getElementById("live").textContent === "live"`)
	if n := eval[int](m, `document.querySelectorAll("#actions button, #actions textarea, main form").length`); n != 0 {
		t.Errorf("a member sees %d action controls on its own seat's page; want none", n)
	}
	eval[string](m, `location.hash = "#/seats/cto"`)
	m.waitText("#not-yours", "signed in for seat alice")
	type request struct {
		Path   string `json:"path"`
		Status int    `json:"status"`
	}
	for _, r := range eval[[]request](m, `performance.getEntriesByType("resource").map(e => ({path: new URL(e.name).pathname, status: e.responseStatus}))`) {
		if strings.HasPrefix(r.Path, "/ui/") || r.Path == "/me" && r.Status == http.StatusUnauthorized {
			continue
		}
		if r.Status >= 400 || strings.HasPrefix(r.Path, "/deadletters") || strings.HasPrefix(r.Path, "/seats/cto") {
			t.Errorf("the member's pages asked %s and got %d; want only what a member may read", r.Path, r.Status)
		}
	}
}

// waitPaused waits until the seat's live state says it is paused, or not.
func (c *company) waitPaused(handle string, paused bool) {
	c.t.Helper()
	testenv.Eventually(c.t, 30*time.Second, fmt.Sprintf("seat %s paused: %v", handle, paused), func() error {
		var d api.SeatDetail
		if err := c.call(http.MethodGet, "/seats/"+handle, nil, &d); err != nil {
			return err
		}
		if d.State == nil || (d.State.Pause != nil) != paused {
			return fmt.Errorf("state %+v", d.State)
		}
		return nil
	})
}
