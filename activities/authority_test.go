package activities

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/wire"
)

// Seat authority (docs/operations.md, "Authentication and authority"): what
// a seat's role's may does not grant is refused, the model reads why as the
// call's result, and the audit log holds a denied row; a ticket is never
// delegated back into its chain nor past tickets.max_hops; a turn's tool
// calls and messages are capped.

// authorityOrg: cto (clerk) may message eng-1 only, delegate to engineers,
// call the tools listed; the engineers keep the defaults.
const authorityOrg = `
company: { name: acme }
temporal: { task_queue: %s }
tickets: { max_hops: 4 }
profiles:
  local: { provider: scripted }
roles:
  clerk:
    charter: keeps notes
    profile: local
    may: { message: [ eng-1 ], delegate: [ 'role:engineer' ], tools: [ send_message, delegate, diary_write, 'ledger__*' ] }
    max_tool_calls_per_turn: %d
    max_messages_per_turn: %d
  engineer: { charter: fixes things, profile: local }
seats:
  - { handle: cto, role: clerk }
  - { handle: eng-1, role: engineer }
  - { handle: eng-2, role: engineer }
  - { handle: eng-3, role: engineer }
  - { handle: eng-4, role: engineer }
  - { handle: eng-5, role: engineer }
  - { handle: alice, kind: human }
`

func setupAuthority(t *testing.T, maxCalls, maxMessages int) ticketTurnEnv {
	t.Helper()
	e := setupTurnsOrg(t, fmt.Sprintf(authorityOrg, "crewlet-authority-test-"+testenv.Suffix(), maxCalls, maxMessages), nil)
	for _, h := range []string{"eng-1", "eng-2", "eng-3", "eng-4", "eng-5"} {
		e.seat(t, h)
	}
	e.turns.delivery, e.turns.tickets = ticketService(t, e.store, e.mb, e.turns.org.Now())
	return ticketTurnEnv{turnEnv: e, tickets: e.turns.tickets}
}

// deniedRows is the audit log's denied rows of a seat, newest first.
func (e ticketTurnEnv) deniedRows(t *testing.T, handle string) []wire.AuditEntry {
	t.Helper()
	rows, err := e.store.Audit(e.ctx, store.AuditFilter{Principal: firstparty.SeatPrincipal(handle), Outcome: wire.AuditDenied, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// A seat whose role may not message a seat is refused: nothing reaches that
// seat, the model reads why and whom to ask, and the audit log names the
// seat, its role, the tool, the target and the reason. A tool may.tools
// does not allow is not offered, and a call of it is refused the same way.
func TestSeatAuthorityRefusesAuditsAndTellsTheModel(t *testing.T) {
	e := setupAuthority(t, 64, 16)
	workKey := "k1"
	e.begin(t, workKey, e.publish(t, "m1", "tell the team"))

	out, text := e.callFirstParty(t, workKey, "m1", 1, firstparty.SendMessage, `{"to":"eng-2","text":"drop everything"}`)
	want := "send_message to eng-2 refused: role clerk may message only eng-1; ask an operator to widen roles.clerk.may.message"
	if !out.IsError || text != want {
		t.Fatalf("send_message to eng-2: %+v %q; want an error result %q", out, text, want)
	}
	if out, text := e.callFirstParty(t, workKey, "m1", 2, firstparty.SendMessage, `{"to":"eng-1","text":"standup at 10"}`); out.IsError {
		t.Fatalf("send_message to eng-1: %q; want it sent", text)
	}
	// eng-1's message arrived, so eng-2's would have by now.
	if got, _ := e.mb.Recent(e.ctx, "eng-1", 10); len(got) != 1 {
		t.Fatalf("eng-1's mailbox = %+v; want the one message it may be sent", got)
	}
	if got, _ := e.mb.Recent(e.ctx, "eng-2", 10); len(got) != 0 {
		t.Fatalf("eng-2's mailbox = %+v; want nothing: cto may not message it", got)
	}
	rows := e.deniedRows(t, "cto")
	if len(rows) != 1 {
		t.Fatalf("denied audit rows of seat:cto = %+v; want one", rows)
	}
	if r := rows[0]; r.Role != "clerk" || r.Action != "tool send_message" || r.Target != "to=eng-2" || r.Reason != want || r.RequestID == "" {
		t.Fatalf("audit row = %+v; want role clerk, action tool send_message, target to=eng-2, the reason and the call's key", r)
	}

	// The catalog the turn offers leaves out what may.tools does not allow.
	turn, err := e.store.Turn(e.ctx, "cto", workKey)
	if err != nil {
		t.Fatal(err)
	}
	var offered []string
	catalog, err := decodeCatalog(turn.Tools)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range catalog {
		offered = append(offered, spec.Name)
	}
	if slices.Contains(offered, firstparty.Recall) || !slices.Contains(offered, firstparty.SendMessage) || !slices.Contains(offered, firstparty.DiaryWrite) {
		t.Fatalf("offered tools = %v; want send_message and diary_write, not recall", offered)
	}
	out, text = e.callFirstParty(t, workKey, "m1", 3, firstparty.Recall, `{"query":"x"}`)
	if want := "recall refused: role clerk may call only tools matching send_message, delegate, diary_write, ledger__*; ask an operator to widen roles.clerk.may.tools"; !out.IsError || text != want {
		t.Fatalf("recall: %+v %q; want %q", out, text, want)
	}
	if rows := e.deniedRows(t, "cto"); len(rows) != 2 || rows[0].Action != "tool recall" {
		t.Fatalf("denied audit rows = %+v; want the recall refusal too", rows)
	}

	// A ticket to a seat outside may.delegate is refused the same way.
	out, text = e.callFirstParty(t, workKey, "m1", 4, firstparty.Delegate, `{"to":"alice","task":"x"}`)
	if !out.IsError || !strings.Contains(text, "alice is a human seat") {
		t.Fatalf("delegate to a person: %q", text)
	}
	if list, _ := e.store.Tickets(e.ctx, store.TicketFilter{From: "cto"}); len(list) != 0 {
		t.Fatalf("tickets from cto = %+v; want none", list)
	}
}

// A ticket's chain stops loops: a turn serving a ticket cannot delegate it
// back to a seat that delegated it, role:R routes past the chain's seats,
// and a hop beyond tickets.max_hops is refused. The model reads why.
func TestDelegationChainStopsLoopsAndTheHopLimit(t *testing.T) {
	e := setupAuthority(t, 64, 16)
	open := func(from, to, parent string) (crewlet.Ticket, error) {
		return e.tickets.Open(e.ctx, tickets.OpenRequest{From: from, To: to, Task: "pass it on", Parent: parent})
	}
	must := func(tk crewlet.Ticket, err error) crewlet.Ticket {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	t1 := must(open("eng-1", "eng-2", ""))
	t2 := must(open("eng-2", "eng-3", t1.ID))
	if t2.Hops != 2 || strings.Join(t2.Chain, ",") != "eng-1,eng-2" {
		t.Fatalf("second hop = %d %v; want 2 [eng-1 eng-2]", t2.Hops, t2.Chain)
	}
	_, err := open("eng-3", "eng-1", t2.ID)
	if crewlet.ErrorCode(err) != crewlet.EFORBIDDEN || !strings.Contains(err.Error(), "eng-1 is already on this ticket's delegation chain (eng-1 → eng-2 → eng-3)") {
		t.Fatalf("eng-3 delegates back to eng-1: %v; want refused, naming the chain", err)
	}
	// eng-1 serves the fewest tickets, but it is on the chain.
	t3 := must(open("eng-3", "role:engineer", t2.ID))
	if t3.To != "eng-4" || t3.Hops != 3 {
		t.Fatalf("role:engineer from eng-3 went to %s at hop %d; want eng-4, the least busy engineer off the chain, at hop 3", t3.To, t3.Hops)
	}
	t4 := must(open("eng-4", "eng-5", t3.ID))
	stored, err := e.store.Ticket(e.ctx, t4.ID)
	if err != nil || stored.Hops != 4 || strings.Join(stored.Chain, ",") != "eng-1,eng-2,eng-3,eng-4" {
		t.Fatalf("stored fourth hop = %+v, %v; want hops 4, chain eng-1..eng-4", stored, err)
	}
	_, err = open("eng-5", "cto", t4.ID)
	if crewlet.ErrorCode(err) != crewlet.EFORBIDDEN || !strings.Contains(err.Error(), "past tickets.max_hops (4)") {
		t.Fatalf("a fifth hop: %v; want refused by tickets.max_hops", err)
	}
	if list, _ := e.store.Tickets(e.ctx, store.TicketFilter{}); len(list) != 4 {
		t.Fatalf("tickets = %d; want the 4 allowed", len(list))
	}

	// Through the tool: cto serves eng-1's ticket and tries to hand it back.
	served := must(open("eng-1", "cto", ""))
	ref, request := e.readOne(t, "cto")
	if request.Ticket != served.ID {
		t.Fatalf("cto read %+v; want the request of %s", request, served.ID)
	}
	e.begin(t, "k2", ref)
	out, text := e.callFirstParty(t, "k2", request.EventID, 1, firstparty.Delegate, `{"to":"eng-1","task":"you do it"}`)
	if want := "delegate to eng-1 refused: eng-1 is already on this ticket's delegation chain (eng-1 → cto)"; !out.IsError || !strings.HasPrefix(text, want) {
		t.Fatalf("cto delegates back: %+v %q; want an error result starting %q", out, text, want)
	}
	rows := e.deniedRows(t, "cto")
	if len(rows) != 1 || rows[0].Action != "tool delegate" || rows[0].Target != "to=eng-1" || rows[0].Reason != text {
		t.Fatalf("denied audit rows of seat:cto = %+v; want the refused delegate", rows)
	}
	out, text = e.callFirstParty(t, "k2", request.EventID, 2, firstparty.Delegate, `{"to":"eng-2","task":"you do it"}`)
	if out.IsError {
		t.Fatalf("cto delegates on to eng-2: %q", text)
	}
	list, err := e.store.Tickets(e.ctx, store.TicketFilter{From: "cto"})
	if err != nil || len(list) != 1 || list[0].Hops != 2 || strings.Join(list[0].Chain, ",") != "eng-1,cto" {
		t.Fatalf("cto's ticket = %+v, %v; want hop 2 of the chain eng-1 → cto", list, err)
	}
}

// A turn's caps hold: past max_messages_per_turn a send is refused, past
// max_tool_calls_per_turn any call is; a refused call does not count, the
// turn goes on, and a call made again counts once.
func TestTurnCapsHold(t *testing.T) {
	e := setupAuthority(t, 3, 1)
	workKey := "k1"
	e.begin(t, workKey, e.publish(t, "m1", "busy day"))
	steps := []struct {
		name, args, refusal string
	}{
		{firstparty.SendMessage, `{"to":"eng-1","text":"one"}`, ""},
		{firstparty.SendMessage, `{"to":"eng-1","text":"two"}`, "send_message refused: this turn has sent its 1 messages and delegations (roles.clerk.max_messages_per_turn)"},
		{firstparty.DiaryWrite, `{"text":"a"}`, ""},
		{firstparty.DiaryWrite, `{"text":"b"}`, ""},
		{firstparty.DiaryWrite, `{"text":"c"}`, "diary_write refused: this turn has made its 3 tool calls (roles.clerk.max_tool_calls_per_turn)"},
	}
	for i, s := range steps {
		out, text := e.callFirstParty(t, workKey, "m1", i+1, s.name, s.args)
		switch {
		case s.refusal == "" && out.IsError:
			t.Fatalf("call %d %s: %q; want it made", i+1, s.name, text)
		case s.refusal != "" && (!out.IsError || !strings.HasPrefix(text, s.refusal)):
			t.Fatalf("call %d %s: %+v %q; want refused with %q", i+1, s.name, out, text, s.refusal)
		}
	}
	if got, _ := e.mb.Recent(e.ctx, "eng-1", 10); len(got) != 1 {
		t.Fatalf("eng-1's mailbox = %d entries; want the one message under the cap", len(got))
	}
	if rows := e.deniedRows(t, "cto"); len(rows) != 2 {
		t.Fatalf("denied audit rows = %+v; want the two refusals", rows)
	}
	// The first call made again (an activity retried after its result was
	// lost) is admitted again, not counted again.
	for range 2 {
		err := e.store.AdmitToolCall(e.ctx, store.ToolCallAdmission{
			Seat: "cto", Turn: workKey, Threads: []string{crewlet.ThreadKey("m1")}, Thread: crewlet.ThreadKey("m1"), Round: 1, Call: 0,
			Name: firstparty.SendMessage, Messages: firstparty.Messages,
		}, func(calls, messages int) error {
			return e.turns.org.Now().TurnCaps("cto", true, calls, messages)
		})
		if err != nil {
			t.Fatalf("the first call again: %v; want it admitted as before", err)
		}
	}
	// A new turn has its own count.
	e.begin(t, "k2", e.publish(t, "m2", "next day"))
	if out, text := e.callFirstParty(t, "k2", "m2", 1, firstparty.SendMessage, `{"to":"eng-1","text":"three"}`); out.IsError {
		t.Fatalf("a new turn's first message: %q; want it sent", text)
	}
}

// The built catalog keeps what may.tools allows, in order.
func TestOfferedToolsFollowMay(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte(fmt.Sprintf(authorityOrg, "q", 64, 16)))
	if err != nil {
		t.Fatal(err)
	}
	a := &Turns{org: org}
	raw, _ := json.Marshal(append(firstparty.Specs(), crewlet.ToolSpec{Name: "ledger__write"}, crewlet.ToolSpec{Name: "fs__read"}))
	got, err := a.offered("cto", raw)
	if err != nil {
		t.Fatal(err)
	}
	catalog, _ := decodeCatalog(got)
	var names []string
	for _, s := range catalog {
		names = append(names, s.Name)
	}
	if want := "send_message,diary_write,delegate,ledger__write"; strings.Join(names, ",") != want {
		t.Fatalf("offered = %v; want %s", names, want)
	}
	if same, _ := a.offered("eng-1", raw); string(same) != string(raw) {
		t.Fatalf("an engineer (may.tools default *) is offered %s; want the whole catalog", same)
	}
}

// A seat answers only a ticket it delegated, by the rule the API's answer
// follows (authority.TicketActor): cto answering a question on eng-1's
// ticket is refused like any call its authority refuses: the question
// stays unanswered, the model reads why, and the audit log holds a denied
// row naming the ticket.
func TestSeatAnswersOnlyTicketsItDelegated(t *testing.T) {
	e := setupTicketTurns(t)
	ticket, _, err := e.store.CreateTicket(e.ctx, "k-eng", crewlet.Ticket{From: "eng-1", To: "eng-2", Task: "fix it", Conversation: "c-eng"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.store.AskTicket(e.ctx, ticket.ID, "which one?", "w:1:0", ""); err != nil || !ok {
		t.Fatalf("ask on %s: %v, %v", ticket.ID, ok, err)
	}
	workKey := "k1"
	e.begin(t, workKey, e.publish(t, "m1", "help eng-2"))
	out, text := e.callFirstParty(t, workKey, "m1", 1, firstparty.Answer, `{"ticket":"`+ticket.ID+`","text":"the blue one"}`)
	want := "answer refused: seat:cto may not answer ticket " + ticket.ID + ": only its delegator (eng-1) may, or an admin"
	if !out.IsError || text != want {
		t.Fatalf("answer on eng-1's ticket: %+v %q; want an error result %q", out, text, want)
	}
	if got, err := e.store.Ticket(e.ctx, ticket.ID); err != nil || got.Phase != crewlet.TicketAsking || got.Answer != "" {
		t.Fatalf("the ticket after cto's answer: %+v, %v; want it still asking, unanswered", got, err)
	}
	rows := e.deniedRows(t, "cto")
	if len(rows) != 1 || rows[0].Action != "tool answer" || rows[0].Target != "ticket="+ticket.ID || rows[0].Reason != want {
		t.Fatalf("denied audit rows of seat:cto = %+v; want one for tool answer on ticket=%s", rows, ticket.ID)
	}
}
