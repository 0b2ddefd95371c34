package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
)

// ticketsOrg: cto delegates to the engineers by role and reports what a
// ticket's notice says; the engineers fix things, or answer nothing.
const ticketsOrg = `company: { name: delegco }
profiles:
  lead:
    provider: scripted
    rules:
      - match: '^get a fix for (.*)'
        tools: [ { name: delegate, args: { to: 'role:engineer', task: 'please fix {{index .Groups 1}}' } } ]
        reply: 'Delegated: {{index .Results 0}}'
      - match: '(?s)^Ticket (\S+) to (\S+) is done\. Reply:\s*(.*?)\s*The task was'
        reply: 'Update: {{index .Groups 2}} reports: {{index .Groups 3}}'
      - match: '(?s)^Ticket (\S+) to (\S+) is failed: (.*?)\s*The task was'
        reply: 'Trouble with {{index .Groups 1}}: {{index .Groups 3}}'
  eng:
    provider: scripted
    rules:
      - { match: '^please fix (.*)', reply: 'Fixed {{index .Groups 1}}' }
      - { match: '^stay silent', reply: '{{if false}}never{{end}}' }
roles:
  lead: { charter: leads and delegates, profile: lead }
  engineer: { charter: fixes what it is given, profile: eng }
seats:
  - { handle: cto, role: lead }
  - { handle: eng-1, role: engineer }
  - { handle: eng-2, role: engineer }
  - { handle: alice, kind: human }
`

func (c *company) tickets(query string) []crewlet.Ticket {
	c.t.Helper()
	var out []crewlet.Ticket
	if err := c.call(http.MethodGet, "/tickets?"+query, nil, &out); err != nil {
		c.t.Fatalf("GET /tickets?%s: %v", query, err)
	}
	return out
}

// waitNote waits until a person's inbox holds a ticket note that starts
// with prefix, and returns it.
func (c *company) waitNote(person, prefix string) string {
	c.t.Helper()
	var body string
	testenv.Eventually(c.t, 20*time.Second, person+"'s note "+prefix, func() error {
		var inbox []crewlet.Message
		if err := c.call(http.MethodGet, "/seats/"+person+"/inbox", nil, &inbox); err != nil {
			return err
		}
		for _, m := range inbox {
			if m.Type == crewlet.MessageTicketNotice && strings.HasPrefix(m.Body, prefix) {
				body = m.Body
				return nil
			}
		}
		return fmt.Errorf("none in %d messages", len(inbox))
	})
	return body
}

// waitTranscript waits until conversation conv holds a message from sender
// whose body starts with prefix, and returns it.
func (c *company) waitTranscript(conv, sender, prefix string, timeout time.Duration) string {
	c.t.Helper()
	var body string
	testenv.Eventually(c.t, timeout, fmt.Sprintf("%s: %q… in %s", sender, prefix, conv), func() error {
		for _, cv := range c.conversation(conv) {
			for _, m := range cv.Messages {
				if m.From == sender && strings.HasPrefix(m.Body, prefix) {
					body = m.Body
					return nil
				}
			}
		}
		return fmt.Errorf("not yet")
	})
	return body
}

// A person asks cto for a fix; cto delegates it by role without waiting; the
// engineer's answer settles the ticket, and the notice starts a turn on cto
// that reports the result in the person's conversation. One ticket, done,
// and every message answered once.
func TestDelegationComesBack(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", ticketsOrg))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	conv := "fix-" + testenv.Suffix()
	ask := c.send("cto", "get a fix for the build", inConversation(conv))
	delegated := c.waitReply(ask, 30*time.Second)
	if !strings.HasPrefix(delegated, "Delegated: Ticket t-") || !strings.Contains(delegated, "opened for eng-1 (routed from role:engineer)") {
		t.Fatalf("cto's answer %q; want the ticket opened for eng-1 by role", delegated)
	}
	update := c.waitTranscript(conv, "cto", "Update:", 30*time.Second)
	if update != "Update: eng-1 reports: Fixed the build" {
		t.Fatalf("cto's report %q", update)
	}
	tickets := c.tickets("from=cto")
	if len(tickets) != 1 {
		t.Fatalf("tickets from cto: %+v; want one", tickets)
	}
	tk := tickets[0]
	if tk.Phase != crewlet.TicketDone || tk.To != "eng-1" || tk.RoutedFrom != "role:engineer" || tk.Reply != "Fixed the build" ||
		tk.Conversation != conv || tk.SettledAt == nil {
		t.Fatalf("ticket = %+v; want done by eng-1 in %s with its reply", tk, conv)
	}
	// cto's turn served no ticket: the delegation is the chain's first hop.
	var shown crewlet.Ticket
	if err := c.call(http.MethodGet, "/tickets/"+tk.ID, nil, &shown); err != nil || shown.Hops != 1 || strings.Join(shown.Chain, ",") != "cto" {
		t.Fatalf("GET /tickets/%s = %+v, %v; want hop 1 of the chain [cto]", tk.ID, shown, err)
	}
	var order []string
	for _, m := range c.conversation(conv)[0].Messages {
		order = append(order, m.From+"→"+m.To+": "+strings.SplitN(m.Body, "\n", 2)[0])
	}
	answer := "cto→operator: " + delegated
	want := []string{
		"operator→cto: get a fix for the build",
		"cto→eng-1: please fix the build",
		"eng-1→cto: Fixed the build",
		"tickets→cto: Ticket " + tk.ID + " to eng-1 is done. Reply:",
		"cto→tickets: Update: eng-1 reports: Fixed the build",
	}
	// cto's answer ends the turn that delegated, while eng-1 works on the
	// request and its ticket settles, so it lands anywhere after the
	// operator's message and before cto's next turn; the rest keep their
	// order.
	var got []string
	answered := -1
	for i, line := range order {
		if line == answer && answered < 0 {
			answered = i
			continue
		}
		got = append(got, line)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || answered < 1 || answered > len(order)-2 {
		t.Fatalf("transcript:\n%s\nwant, with %q anywhere after the first line and before cto's last:\n%s",
			strings.Join(order, "\n"), answer, strings.Join(want, "\n"))
	}
	t.Logf("transcript of %s:\n%s\nticket %s: opened %s, settled %s", conv, strings.Join(order, "\n"), tk.ID,
		tk.CreatedAt.Format(time.RFC3339Nano), tk.SettledAt.Format(time.RFC3339Nano))
}

// People open tickets over REST and the CLI: routing by role skips the
// engineer already holding one, a waited-for ticket comes back with its
// reply, a person's inbox gets the notice, an open ticket can be cancelled
// once, a cancelled ticket's request is not worked on, and a turn that
// answers nothing fails its ticket with the reason.
func TestPeopleOpenAndFollowTickets(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", ticketsOrg))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	if err := c.call(http.MethodPost, "/seats/eng-1/pause", crewlet.PauseRequest{Reason: "busy", By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	var held crewlet.Ticket
	if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "eng-1", Task: "please fix the tests", From: "alice"}, &held); err != nil {
		t.Fatal(err)
	}
	if held.Phase != crewlet.TicketPending || held.To != "eng-1" || held.From != "alice" || held.FromSeat {
		t.Fatalf("held ticket = %+v", held)
	}

	var routed crewlet.Ticket
	status, body, err := c.raw(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "role:engineer", Task: "please fix the docs", From: "alice", Wait: "30s"})
	if err != nil || status != http.StatusOK {
		t.Fatalf("POST /tickets with wait: %d %s %v", status, body, err)
	}
	if err := json.Unmarshal(body, &routed); err != nil {
		t.Fatal(err)
	}
	if routed.To != "eng-2" || routed.Phase != crewlet.TicketDone || routed.Reply != "Fixed the docs" {
		t.Fatalf("routed ticket = %+v; want eng-2 (eng-1 holds one) done with its reply", routed)
	}
	c.waitNote("alice", "1 of your tickets changed:\n- "+routed.ID+" to eng-2 is done: Fixed the docs")

	// Changes sent straight through Temporal that name no ticket are
	// dropped, or left out of the note (an id of no ticket), and the notes
	// go on: two tickets that end together make one note.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, change := range []any{map[string]string{"ticket": routed.ID}, "", "t-none"} {
		if err := c.temporal.SignalWorkflow(ctx, crewlet.PersonNotesWorkflowID("alice"), "", crewlet.SignalTicketNote, change); err != nil {
			t.Fatal(err)
		}
	}
	var both []crewlet.Ticket
	for _, task := range []string{"please fix the logo", "please fix the footer"} {
		var tk crewlet.Ticket
		if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "eng-2", Task: task, From: "alice"}, &tk); err != nil {
			t.Fatal(err)
		}
		both = append(both, tk)
	}
	note := c.waitNote("alice", "2 of your tickets changed:")
	for _, tk := range both {
		if !strings.Contains(note, "- "+tk.ID+" to eng-2 is done: Fixed the") {
			t.Fatalf("alice's note %q does not name %s", note, tk.ID)
		}
	}

	var cancelled crewlet.Ticket
	if err := c.call(http.MethodPost, "/tickets/"+held.ID+"/cancel", api.CancelTicketRequest{Reason: "not needed", By: "alice"}, &cancelled); err != nil {
		t.Fatal(err)
	}
	if cancelled.Phase != crewlet.TicketCancelled || cancelled.Reason != "cancelled by alice: not needed" {
		t.Fatalf("cancelled = %+v", cancelled)
	}
	if status, body, _ := c.raw(http.MethodPost, "/tickets/"+held.ID+"/cancel", nil); status != http.StatusConflict {
		t.Fatalf("second cancel: %d %s; want 409", status, body)
	}
	if err := c.call(http.MethodPost, "/seats/eng-1/resume", crewlet.ResumeRequest{By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "eng-1 skips the cancelled request", func() error {
		st := c.state("eng-1")
		if st.Counters.Triggers < 1 {
			return fmt.Errorf("eng-1 has handled %d triggers", st.Counters.Triggers)
		}
		return nil
	})
	for _, cv := range c.conversation(held.Conversation) {
		for _, m := range cv.Messages {
			if m.From == "eng-1" {
				t.Fatalf("eng-1 worked on a cancelled ticket: %q", m.Body)
			}
		}
	}

	out, err := c.cli("ask", "eng-2", "stay silent", "--wait", "30s")
	if err == nil || !strings.Contains(out, "failed: the turn serving it ended without an answer: No answer was produced") {
		t.Fatalf("crewlet ask of a turn that answers nothing: %v\n%s", err, out)
	}
	out, err = c.cli("tickets", "ls", "--from", "alice")
	if err != nil || strings.Count(out, "alice") != 4 || !strings.Contains(out, "cancelled") || !strings.Contains(out, "done") {
		t.Fatalf("crewlet tickets ls --from alice: %v\n%s", err, out)
	}
	if out, err := c.cli("tickets", "show", routed.ID); err != nil || !strings.Contains(out, `"reply": "Fixed the docs"`) {
		t.Fatalf("crewlet tickets show: %v\n%s", err, out)
	}

	for _, bad := range []struct {
		method, path string
		body         any
		want         int
	}{
		{http.MethodPost, "/tickets", api.OpenTicketRequest{To: "eng-1", Task: "  "}, http.StatusBadRequest},
		{http.MethodPost, "/tickets", api.OpenTicketRequest{To: "nobody", Task: "x"}, http.StatusNotFound},
		{http.MethodPost, "/tickets", api.OpenTicketRequest{To: "alice", Task: "x"}, http.StatusBadRequest},
		{http.MethodPost, "/tickets", api.OpenTicketRequest{To: "role:nobody", Task: "x"}, http.StatusNotFound},
		{http.MethodPost, "/tickets", api.OpenTicketRequest{To: "eng-1", Task: "x", Wait: "forever"}, http.StatusBadRequest},
		{http.MethodPost, "/tickets", api.OpenTicketRequest{To: "eng-1", Task: "x", From: "ghost"}, http.StatusBadRequest},
		{http.MethodGet, "/tickets?phase=lost", nil, http.StatusBadRequest},
		{http.MethodGet, "/tickets/" + url.PathEscape("t-nope"), nil, http.StatusNotFound},
		{http.MethodPost, "/tickets/t-nope/cancel", nil, http.StatusNotFound},
	} {
		if status, body, _ := c.raw(bad.method, bad.path, bad.body); status != bad.want || !strings.Contains(string(body), `"detail"`) {
			t.Errorf("%s %s %+v: %d %s; want %d with a detail", bad.method, bad.path, bad.body, status, body, bad.want)
		}
	}
}

// waitOrg: cto delegates with wait: true and answers the question the ticket
// brings back, going on waiting; eng-1 asks a question mid-turn and uses the
// answer in its reply. eng-2 asks and gets no answer in time.
const waitOrg = `company: { name: waitco }
tickets: { ask_timeout: %s }
profiles:
  lead:
    provider: scripted
    delay: %s
    rules:
      - match: '^get a fix for (.*)'
        tools: [ { name: delegate, args: { to: eng-1, task: 'please fix {{index .Groups 1}}', wait: true } } ]
        reply: 'eng-1 says: {{.Last}}'
      - on_result: '(?s)asks:\s*(.*?)\s*Answer with answer\(ticket: "(\S+)"'
        tools: [ { name: answer, args: { ticket: '{{index .Groups 2}}', text: 'use the staging config', wait: true } } ]
  eng:
    provider: scripted
    delay: %s
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
  - { handle: eng-2, role: engineer }
`

// ticketPhases reads a ticket's phase every few milliseconds until stop,
// and returns each phase it saw with when it first saw it.
func (c *company) ticketPhases(id func() string, stop <-chan struct{}) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		var seen []string
		last := crewlet.TicketPhase("")
		for {
			select {
			case <-stop:
				out <- seen
				return
			case <-time.After(20 * time.Millisecond):
			}
			tid := id()
			if tid == "" {
				continue
			}
			var t crewlet.Ticket
			if err := c.call(http.MethodGet, "/tickets/"+tid, nil, &t); err != nil || t.Phase == last {
				continue
			}
			last = t.Phase
			seen = append(seen, fmt.Sprintf("%s %s", time.Now().UTC().Format("15:04:05.000"), t.Phase))
		}
	}()
	return out
}

// A person asks cto for a fix; cto delegates to eng-1 and waits; eng-1 asks
// cto a question mid-turn; cto's waiting turn answers and waits on; eng-1
// replies; cto's turn resumes and answers the person with eng-1's result.
// One ticket, phases pending → asking → pending → done, each message
// answered once, no notice (the waiting turn took the reply).
func TestDelegationWithDurableWaitAndQuestion(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(waitOrg, "30m", "0s", "0s")))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	conv := "wait-" + testenv.Suffix()
	stop := make(chan struct{})
	ticketID := func() string {
		var ts []crewlet.Ticket
		_ = c.call(http.MethodGet, "/tickets?from=cto", nil, &ts)
		if len(ts) == 0 {
			return ""
		}
		return ts[0].ID
	}
	phases := c.ticketPhases(ticketID, stop)
	ask := c.send("cto", "get a fix for the build", inConversation(conv))
	reply := c.waitReply(ask, 60*time.Second)
	close(stop)
	want := "eng-1 says: Ticket t-"
	if !strings.HasPrefix(reply, want) || !strings.Contains(reply, "is done. Reply from eng-1:\n\nFixed the build. Answer from cto:\n\nuse the staging config") {
		t.Fatalf("cto's answer %q; want eng-1's reply carrying cto's answer", reply)
	}
	tickets := c.tickets("from=cto")
	if len(tickets) != 1 {
		t.Fatalf("tickets: %+v; want one", tickets)
	}
	tk := tickets[0]
	if tk.Phase != crewlet.TicketDone || tk.Question != "which config should I use for the build?" || tk.Answer != "use the staging config" ||
		tk.Waiter != "" || tk.AskWaiter != "" {
		t.Fatalf("ticket = %+v", tk)
	}
	// The waiting turn took the reply: no notice turn on cto.
	for _, m := range c.conversation(conv)[0].Messages {
		if m.Type == crewlet.MessageTicketNotice || m.Type == crewlet.MessageTicketQuestion {
			t.Fatalf("a %s reached cto although its turn waited: %+v", m.Type, m)
		}
	}
	if replies := c.repliesTo(ask); len(replies) != 1 {
		t.Fatalf("replies to the person: %q; want one", replies)
	}
	seen := <-phases
	t.Logf("transcript of %s:", conv)
	for _, m := range c.conversation(conv)[0].Messages {
		t.Logf("  %s %s → %s: %s", m.RecordedAt.Format("15:04:05.000"), m.From, m.To, strings.ReplaceAll(m.Body, "\n", " "))
	}
	t.Logf("ticket %s phases seen: %v; opened %s, asked %s, settled %s", tk.ID, seen,
		tk.CreatedAt.Format("15:04:05.000"), tk.AskedAt.Format("15:04:05.000"), tk.SettledAt.Format("15:04:05.000"))
	// The poll may miss a step (the whole exchange takes tens of
	// milliseconds), never see them out of order; that it asked is in the
	// ticket's question and asked_at above.
	if got := phaseNames(seen); !subsequence(got, []string{"pending", "asking", "pending", "done"}) || len(got) == 0 || got[len(got)-1] != "done" {
		t.Errorf("phases seen: %s; want in the order pending → asking → pending → done, ending done", strings.Join(got, " → "))
	}
}

// subsequence reports whether got appears in want in order.
func subsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		for i < len(want) && want[i] != g {
			i++
		}
		if i == len(want) {
			return false
		}
		i++
	}
	return true
}

func phaseNames(seen []string) []string {
	out := make([]string, len(seen))
	for i, s := range seen {
		out[i] = s[strings.IndexByte(s, ' ')+1:]
	}
	return out
}

// An ask nobody answers in time: the asking turn is told to decide itself,
// the ticket goes back to pending, and the turn's reply still settles it;
// the delegator's own wait ends with the question, which it leaves.
func TestUnansweredAskReturnsTheTicketToPending(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(waitOrg, "2s", "0s", "0s")))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	var tk crewlet.Ticket
	if err := c.call(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "eng-2", Task: "please fix the flaky test"}, &tk); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the ticket settled", func() error {
		if err := c.call(http.MethodGet, "/tickets/"+tk.ID, nil, &tk); err != nil {
			return err
		}
		if tk.Phase != crewlet.TicketDone {
			return fmt.Errorf("ticket is %s", tk.Phase)
		}
		return nil
	})
	if tk.Question != "which config should I use for the flaky test?" || tk.Answer != "" ||
		tk.Reply != "Fixed the flaky test. No answer within 2s; decide yourself and go on." {
		t.Fatalf("ticket = %+v; want the question unanswered and the reply made without it", tk)
	}
	if status, body, _ := c.raw(http.MethodPost, "/tickets/"+tk.ID+"/answer", api.AnswerTicketRequest{Text: "too late"}); status != http.StatusConflict {
		t.Fatalf("answering a settled ticket: %d %s; want 409", status, body)
	}
}
