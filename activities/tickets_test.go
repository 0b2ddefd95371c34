package activities

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/workflows"
)

// Tickets (docs/architecture.md, "Delegation: tickets") end where the seats'
// activities are: the turn serving one settles or fails it, a dead-lettered
// request fails it, a stopped seat fails its tickets, maintenance expires old
// ones, and a seat opens one with the delegate tool. Every end tells the
// delegator once.

// ticketsOrg has two agent seats and a person. Its task queue is the test's
// own: a delivery that wakes an agent seat starts its workflow there, where
// no worker polls, and the test closes it when it ends.
const ticketsOrg = `
company: { name: acme }
temporal: { task_queue: %s }
tickets: { expire_after: 1h }
profiles:
  local: { provider: scripted }
roles:
  clerk: { charter: keeps notes, profile: local }
  engineer: { charter: fixes things, profile: local }
seats:
  - { handle: cto, role: clerk }
  - { handle: eng-1, role: engineer }
  - { handle: eng-2, role: engineer }
  - { handle: alice, kind: human }
`

var ticketSeats = []string{"cto", "eng-1", "eng-2", "eng-3", "eng-4", "eng-5"}

func ticketsOrgYAML() string {
	return fmt.Sprintf(ticketsOrg, "crewlet-tickets-test-"+testenv.Suffix())
}

// dialTemporal connects to the package's namespace on the dev Temporal
// server.
func dialTemporal(t testing.TB) client.Client {
	t.Helper()
	tc, err := client.Dial(client.Options{HostPort: testenv.Stack(t).Temporal, Namespace: packageNamespace(t), Logger: tlog.NewStructuredLogger(discard)})
	if err != nil {
		t.Fatalf("connect temporal: %v", err)
	}
	t.Cleanup(tc.Close)
	return tc
}

// ticketService builds the real ticket service, and the delivery beside
// it, over a seat client on the dev Temporal server. Seat workflow ids are fixed (seat/{handle}) and shared by
// every test on the server, so only runs on this test's queue are closed.
func ticketService(t testing.TB, st *store.Store, mb *mailbox.Mailbox, org *config.Config) (*delivery.Service, *tickets.Service) {
	t.Helper()
	tc := dialTemporal(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, h := range ticketSeats {
			d, err := tc.DescribeWorkflowExecution(ctx, crewlet.SeatWorkflowID(h), "")
			if err != nil {
				continue
			}
			info := d.GetWorkflowExecutionInfo()
			if info.GetTaskQueue() != org.Temporal.TaskQueue || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				continue
			}
			_ = tc.TerminateWorkflow(ctx, crewlet.SeatWorkflowID(h), info.GetExecution().GetRunId(), "ticket test over")
		}
	})
	seats := seatclient.New(tc, org)
	dl := delivery.New(org, mb, seats, nil, nil, discard)
	tk := tickets.New(org, st, dl, seats, nil, nil, discard)
	// A person's notes run for real on the test's queue; their workflow id
	// (notes/{person}) is fixed, so a run left on another queue is closed
	// first, and this one when the test ends.
	endNotes := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tc.TerminateWorkflow(ctx, crewlet.PersonNotesWorkflowID("alice"), "", "ticket test")
	}
	endNotes()
	w := worker.New(tc, org.Temporal.TaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(workflows.PersonNotes, workflow.RegisterOptions{Name: crewlet.WorkflowPersonNotes})
	w.RegisterActivityWithOptions((&Mail{Store: st, Mailbox: mb, Tickets: tk, Log: discard}).TicketNote,
		activity.RegisterOptions{Name: crewlet.ActivityTicketNote})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(endNotes)
	t.Cleanup(w.Stop)
	return dl, tk
}

// ticketTurnEnv is a turnEnv (cto attached on a host) whose turns open and
// close tickets.
type ticketTurnEnv struct {
	*turnEnv
	tickets *tickets.Service
}

func setupTicketTurns(t *testing.T) ticketTurnEnv {
	t.Helper()
	e := setupTurnsOrg(t, ticketsOrgYAML(), nil)
	e.seat(t, "eng-1")
	e.seat(t, "eng-2")
	e.turns.delivery, e.turns.tickets = ticketService(t, e.store, e.mb, e.turns.org.Now())
	return ticketTurnEnv{turnEnv: e, tickets: e.turns.tickets}
}

// readOne reads the seat's mailbox as its seat would and returns the
// one entry there.
func (e ticketTurnEnv) readOne(t *testing.T, handle string) (crewlet.MailRef, crewlet.Message) {
	t.Helper()
	res, err := e.mb.Read(e.ctx, mailbox.ReadRequest{Handle: handle, Consumer: "n1:aaaa", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 1 {
		t.Fatalf("%s's mailbox holds %d new entries %+v; want exactly one", handle, len(res.Messages), res.Messages)
	}
	m := res.Messages[0]
	return crewlet.MailRef{StreamID: m.StreamID, EventID: m.EventID}, m
}

// runTurn runs a whole turn of handle over refs: rounds with their tool
// calls until every thread answered, then FinishTurn. It returns the work
// key and the failure a round reported, if any.
func (e ticketTurnEnv) runTurn(t *testing.T, handle string, epoch int64, refs ...crewlet.MailRef) (crewlet.FinishTurnInput, string) {
	t.Helper()
	var ids []string
	for _, r := range refs {
		ids = append(ids, r.EventID)
	}
	workKey := crewlet.WorkKey(ids)
	begun, err := e.turns.BeginTurn(e.ctx, crewlet.BeginTurnInput{
		Tenure: crewlet.Tenure{Handle: handle, Epoch: epoch}, TurnID: crewlet.TurnWorkflowID(handle, workKey), WorkKey: workKey, Mail: refs,
	})
	if err != nil || begun.Hold != nil || begun.Threads != 1 {
		t.Fatalf("BeginTurn of %s: %+v, %v; want one thread", handle, begun, err)
	}
	status, failed, rounds, err := e.runRounds(handle, epoch, workKey)
	if err != nil {
		t.Fatalf("%s: %v", handle, err)
	}
	fin := crewlet.FinishTurnInput{
		Tenure: crewlet.Tenure{Handle: handle, Epoch: epoch}, TurnID: crewlet.TurnWorkflowID(handle, workKey), WorkKey: workKey,
		Status: status, Note: failed, Rounds: rounds,
	}
	if _, err := e.turns.FinishTurn(e.ctx, fin); err != nil {
		t.Fatalf("FinishTurn of %s: %v", handle, err)
	}
	return fin, failed
}

// notices returns the ticket notices in a seat's mailbox.
func notices(t testing.TB, ctx context.Context, mb *mailbox.Mailbox, handle string) []crewlet.Message {
	t.Helper()
	msgs, err := mb.Recent(ctx, handle, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []crewlet.Message
	for _, m := range msgs {
		if m.Type == crewlet.MessageTicketNotice {
			out = append(out, m)
		}
	}
	return out
}

// noticesOf returns the notices in handle's mailbox about one ticket.
func noticesOf(t testing.TB, ctx context.Context, mb *mailbox.Mailbox, handle, ticketID string) []crewlet.Message {
	t.Helper()
	var out []crewlet.Message
	for _, m := range notices(t, ctx, mb, handle) {
		if m.Ticket == ticketID {
			out = append(out, m)
		}
	}
	return out
}

// wantOneNotice fails unless handle's mailbox holds exactly one notice of
// the ticket, the one its notice event id names, saying how it stands. A
// person (alice) gets it in a note of their notes workflow, which writes
// the changes that come together as one note: it waits for that note.
func wantOneNotice(t testing.TB, ctx context.Context, mb *mailbox.Mailbox, handle string, tk crewlet.Ticket) crewlet.Message {
	t.Helper()
	if handle == "alice" {
		var got []crewlet.Message
		testenv.Eventually(t, 15*time.Second, "alice's note of "+tk.ID, func() error {
			got = got[:0]
			for _, m := range notices(t, ctx, mb, handle) {
				if strings.Contains(m.Body, "- "+tk.ID+" ") || strings.Contains(m.Body, "- "+tk.ID+":") {
					got = append(got, m)
				}
			}
			if len(got) == 0 {
				return fmt.Errorf("no note yet")
			}
			return nil
		})
		n := got[0]
		want := string(tk.Phase)
		if tk.Phase == crewlet.TicketDone {
			want = tk.Reply
		}
		if len(got) != 1 || n.From != crewlet.TicketSender || !strings.Contains(n.Body, want) || !strings.Contains(n.Body, tk.Reason) {
			t.Fatalf("alice's notes of %s: %+v; want one from %s saying %q and %q", tk.ID, got, crewlet.TicketSender, want, tk.Reason)
		}
		return n
	}
	got := noticesOf(t, ctx, mb, handle, tk.ID)
	if len(got) != 1 {
		t.Fatalf("%s holds %d notices of ticket %s %+v; want exactly one", handle, len(got), tk.ID, got)
	}
	n := got[0]
	if n.EventID != crewlet.TicketNoticeEventID(tk.ID) || n.From != crewlet.TicketSender || n.To != handle ||
		n.Conversation != tk.Conversation || n.Body != crewlet.TicketNoticeText(tk) {
		t.Fatalf("notice of %s = %+v; want event %s from %s in conversation %s saying %q",
			tk.ID, n, crewlet.TicketNoticeEventID(tk.ID), crewlet.TicketSender, tk.Conversation, crewlet.TicketNoticeText(tk))
	}
	return n
}

func (e ticketTurnEnv) ticket(t testing.TB, id string) crewlet.Ticket {
	t.Helper()
	tk, err := e.store.Ticket(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// The final answer of the turn serving a ticket settles it with that reply,
// and the person who opened it gets one notice carrying the reply, not a
// plain reply besides. FinishTurn run again, and a second reply, change
// nothing and tell nobody again.
func TestTicketSettledByTheServingTurnsAnswer(t *testing.T) {
	e := setupTicketTurns(t)
	model := &fakeModel{answer: func(crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		return text("the build is green again"), nil
	}}
	e.turns.models.byProfile["local"] = model

	req := tickets.OpenRequest{Key: "api-req-1", From: "alice", To: "cto", Task: "fix the build"}
	opened, err := e.tickets.Open(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Phase != crewlet.TicketPending || opened.From != "alice" || opened.FromSeat || opened.To != "cto" || opened.Conversation == "" {
		t.Fatalf("opened = %+v; want pending from alice (a person) to cto, in a conversation", opened)
	}
	// Opening again with the same key is the same ticket, and its request
	// is in cto's mailbox once.
	if again, err := e.tickets.Open(e.ctx, req); err != nil || again.ID != opened.ID {
		t.Fatalf("Open again with the same key = %s, %v; want %s", again.ID, err, opened.ID)
	}
	ref, request := e.readOne(t, "cto")
	if request.Type != crewlet.MessageTicket || request.EventID != opened.RequestEvent || request.Ticket != opened.ID ||
		request.From != "alice" || request.Conversation != opened.Conversation || request.Body != "fix the build" {
		t.Fatalf("request in cto's mailbox = %+v; want the ticket's request", request)
	}

	fin, failed := e.runTurn(t, "cto", e.epoch, ref)
	if failed != "" {
		t.Fatalf("serving turn failed: %s", failed)
	}
	if last := model.last("").Messages; !strings.Contains(last[len(last)-1].Content, "Task from alice (ticket "+opened.ID) {
		t.Fatalf("the model was asked %q; want the ticket's request text", last[len(last)-1].Content)
	}
	done := e.ticket(t, opened.ID)
	if done.Phase != crewlet.TicketDone || done.Reply != "the build is green again" || done.SettledAt == nil {
		t.Fatalf("ticket after the serving turn: phase %q reply %q settled %v; want done with the answer", done.Phase, done.Reply, done.SettledAt)
	}
	if !strings.Contains(wantOneNotice(t, e.ctx, e.mb, "alice", done).Body, "the build is green again") {
		t.Fatalf("alice's notice does not carry the reply")
	}
	if all, err := e.mb.Recent(e.ctx, "alice", 100); err != nil || len(all) != 1 {
		t.Fatalf("alice's mailbox = %+v, %v; want the one notice and no plain reply besides", all, err)
	}

	// A re-run of FinishTurn (its activity retried) settles nothing again.
	if _, err := e.turns.FinishTurn(e.ctx, fin); err != nil {
		t.Fatalf("FinishTurn again: %v", err)
	}
	if again := e.ticket(t, opened.ID); again.Phase != crewlet.TicketDone || again.Reply != done.Reply || !again.UpdatedAt.Equal(done.UpdatedAt) {
		t.Fatalf("ticket after FinishTurn again: %+v; want it as it was %+v", again, done)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", done)

	// A second reply to the same ticket is refused with its state.
	second, settled, err := e.tickets.Settle(e.ctx, opened.ID, "actually, it is still red")
	if err != nil || settled {
		t.Fatalf("a second reply: settled %v, %v; want refused", settled, err)
	}
	if second.Phase != crewlet.TicketDone || second.Reply != "the build is green again" {
		t.Fatalf("a second reply returned phase %q reply %q; want done with the first reply", second.Phase, second.Reply)
	}
	if stored := e.ticket(t, opened.ID); stored.Reply != "the build is green again" || !stored.UpdatedAt.Equal(done.UpdatedAt) {
		t.Fatalf("stored after a second reply: reply %q; want the first kept", stored.Reply)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", done)
}

// A ticket whose serving turn ends without an answer fails with the turn's
// note, and its delegator is told; an empty reply fails a ticket too.
func TestTicketFailsWhenItsServingTurnEndsWithoutAnAnswer(t *testing.T) {
	e := setupTicketTurns(t)
	empty := &fakeModel{answer: func(crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		return crewlet.ModelResponse{Usage: crewlet.Usage{InputTokens: 5}}, nil
	}}
	e.turns.models.byProfile["local"] = empty
	opened, err := e.tickets.Open(e.ctx, tickets.OpenRequest{From: "alice", To: "cto", Task: "write the release notes"})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := e.readOne(t, "cto")
	_, failed := e.runTurn(t, "cto", e.epoch, ref)
	if failed == "" || empty.calls("") != 2 {
		t.Fatalf("turn over an empty model: failure %q after %d calls; want a refused thread after 2", failed, empty.calls(""))
	}
	got := e.ticket(t, opened.ID)
	if got.Phase != crewlet.TicketFailed || !strings.HasPrefix(got.Reason, "the turn serving it ended without an answer") ||
		!strings.Contains(got.Reason, failed) || got.Reply != "" {
		t.Fatalf("ticket after a failed serving turn: phase %q reason %q reply %q; want failed, the reason naming the turn's note %q",
			got.Phase, got.Reason, got.Reply, failed)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", got)
	if all, _ := e.mb.Recent(e.ctx, "alice", 100); len(all) != 1 {
		t.Fatalf("alice's mailbox = %+v; want only the notice", all)
	}

	blank, err := e.tickets.Open(e.ctx, tickets.OpenRequest{From: "alice", To: "cto", Task: "say something"})
	if err != nil {
		t.Fatal(err)
	}
	res, settled, err := e.tickets.Settle(e.ctx, blank.ID, "  \n")
	if err != nil || settled || res.Phase != crewlet.TicketFailed || !strings.Contains(res.Reason, "empty reply") {
		t.Fatalf("Settle with an empty reply: %+v settled %v, %v; want failed for the empty reply", res, settled, err)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", res)
}

// The request of a ticket cancelled while it waited in the mailbox is
// recorded, not worked on: no thread, no model call, and the ticket stays
// as its cancel left it.
func TestCancelledTicketsRequestIsNotWorkedOn(t *testing.T) {
	e := setupTicketTurns(t)
	model := &fakeModel{answer: func(crewlet.ModelRequest) (crewlet.ModelResponse, error) { return text("done anyway"), nil }}
	e.turns.models.byProfile["local"] = model
	opened, err := e.tickets.Open(e.ctx, tickets.OpenRequest{From: "alice", To: "cto", Task: "draft the memo"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, ended, err := e.tickets.End(e.ctx, opened.ID, crewlet.TicketCancelled, "alice changed her mind")
	if err != nil || !ended {
		t.Fatalf("cancel: ended %v, %v", ended, err)
	}
	ref, _ := e.readOne(t, "cto")
	workKey := crewlet.WorkKey([]string{ref.EventID})
	begun := e.begin(t, workKey, ref)
	if begun.Threads != 0 {
		t.Fatalf("BeginTurn over a cancelled ticket's request: %d threads; want none", begun.Threads)
	}
	if _, err := e.turns.FinishTurn(e.ctx, crewlet.FinishTurnInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: crewlet.TurnWorkflowID("cto", workKey),
		WorkKey: workKey, Status: crewlet.TurnDone}); err != nil {
		t.Fatal(err)
	}
	if model.calls("") != 0 {
		t.Fatalf("model called %d times; want none", model.calls(""))
	}
	if got := e.ticket(t, opened.ID); got.Phase != crewlet.TicketCancelled || got.Reason != "alice changed her mind" || got.Reply != "" {
		t.Fatalf("ticket after its request was skipped: %q reason %q reply %q; want cancelled as it was", got.Phase, got.Reason, got.Reply)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", cancelled)
}

// A ticket request handed out more times than the delivery budget is
// dead-lettered, and its ticket fails saying so; the delegator is told.
func TestTicketFailsWhenItsRequestIsDeadLettered(t *testing.T) {
	e := setupTicketTurns(t)
	mail := &Mail{Store: e.store, Mailbox: e.mb, Tickets: e.tickets, Log: discard}
	opened, err := e.tickets.Open(e.ctx, tickets.OpenRequest{From: "alice", To: "cto", Task: "rotate the keys"})
	if err != nil {
		t.Fatal(err)
	}
	read := func(lastError string) crewlet.ReadMailOutput {
		t.Helper()
		out, err := mail.ReadMail(e.ctx, crewlet.ReadMailInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, Consumer: "n1:aaaa", Max: 8, LastError: lastError})
		if err != nil {
			t.Fatalf("ReadMail: %v", err)
		}
		return out
	}
	for i := 1; i <= mailbox.DeliveryBudget; i++ {
		out := read("")
		if len(out.Mail) != 1 || out.Mail[0].EventID != opened.RequestEvent {
			t.Fatalf("read %d: got %+v; want the request, still within its budget of %d", i, out.Mail, mailbox.DeliveryBudget)
		}
		if got := e.ticket(t, opened.ID); got.Phase != crewlet.TicketPending {
			t.Fatalf("ticket after read %d: %q; want pending", i, got.Phase)
		}
	}
	if out := read("model unreachable"); len(out.Mail) != 0 {
		t.Fatalf("read %d: got %+v; want the request dead-lettered, not handed out", mailbox.DeliveryBudget+1, out.Mail)
	}
	got := e.ticket(t, opened.ID)
	if got.Phase != crewlet.TicketFailed || !strings.HasPrefix(got.Reason, "its request was dead-lettered") ||
		!strings.Contains(got.Reason, "last error: model unreachable") {
		t.Fatalf("ticket after its request was dead-lettered: phase %q reason %q; want failed, saying it was dead-lettered and why", got.Phase, got.Reason)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", got)
	dead, err := e.mb.DeadLetters(e.ctx, 10)
	if err != nil || len(dead) != 1 || dead[0].Message.Ticket != opened.ID {
		t.Fatalf("dead letters = %+v, %v; want the ticket's request", dead, err)
	}
}

// ticketEnv is a store, mailboxes and the ticket service with no host, and
// a connection of its own to the test's database to age tickets.
type ticketEnv struct {
	ctx     context.Context
	db      *pgx.Conn
	store   *store.Store
	mb      *mailbox.Mailbox
	org     *config.Config
	tickets *tickets.Service
}

func setupTickets(t *testing.T) ticketEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	url := testenv.MigratedDatabase(t)
	e := ticketEnv{ctx: ctx, store: testenv.Store(t, url)}
	var err error
	if e.db, err = pgx.Connect(ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close(context.Background()) })
	if e.mb, err = mailbox.Open(ctx, testenv.Stack(t).RedisURL, "acttest"+testenv.Suffix()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.mb.Close() })
	if e.org, err = config.Parse([]byte(ticketsOrgYAML())); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.org.Seats {
		kind := crewlet.SeatAgent
		if s.Kind == string(crewlet.SeatHuman) {
			kind = crewlet.SeatHuman
		}
		if err := e.store.EnsureSeat(ctx, s.Handle, s.Role, kind); err != nil {
			t.Fatal(err)
		}
		if err := e.mb.Ensure(ctx, s.Handle); err != nil {
			t.Fatal(err)
		}
	}
	_, e.tickets = ticketService(t, e.store, e.mb, e.org)
	return e
}

func (e ticketEnv) open(t *testing.T, from, to, task string) crewlet.Ticket {
	t.Helper()
	tk, err := e.tickets.Open(e.ctx, tickets.OpenRequest{From: from, To: to, Task: task})
	if err != nil {
		t.Fatalf("open %s → %s: %v", from, to, err)
	}
	return tk
}

func (e ticketEnv) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if tag, err := e.db.Exec(e.ctx, q, args...); err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("%s %v: %v (%d rows)", q, args, err, tag.RowsAffected())
	}
}

func (e ticketEnv) ticket(t testing.TB, id string) crewlet.Ticket {
	t.Helper()
	tk, err := e.store.Ticket(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// A seat recorded stopped (it left the org) fails every open ticket it
// serves, asking ones too, and each delegator hears: a person in its inbox,
// a seat by a notice. Another status fails nothing.
func TestStoppedSeatFailsItsOpenTickets(t *testing.T) {
	e := setupTickets(t)
	row, err := e.store.Attach(e.ctx, "cto", "n1:aaaa", "n1")
	if err != nil {
		t.Fatal(err)
	}
	seats := &Seats{Store: e.store, Org: e.org, Tickets: e.tickets, LiveWithin: time.Second, Log: discard}

	fromAlice := e.open(t, "alice", "cto", "review the budget")
	fromSeat := e.open(t, "eng-1", "cto", "approve the design")
	e.exec(t, `UPDATE tickets SET phase = 'asking', question = 'which design?', asked_at = now() WHERE id = $1`, fromSeat.ID)
	settled := e.open(t, "alice", "cto", "say hello")
	if _, ok, err := e.tickets.Settle(e.ctx, settled.ID, "hello"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	elsewhere := e.open(t, "alice", "eng-1", "fix the build")
	if !fromSeat.FromSeat {
		t.Fatalf("a ticket from eng-1 has from_seat false")
	}

	for _, status := range []string{"paused", "drained", "active"} {
		if err := seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: row.Epoch}, Status: status}); err != nil {
			t.Fatalf("SetSeatStatus %s: %v", status, err)
		}
		if got := e.ticket(t, fromAlice.ID); got.Phase != crewlet.TicketPending {
			t.Fatalf("after status %s, alice's ticket is %q; want still pending", status, got.Phase)
		}
		if got := e.ticket(t, fromSeat.ID); got.Phase != crewlet.TicketAsking {
			t.Fatalf("after status %s, eng-1's ticket is %q; want still asking", status, got.Phase)
		}
		if n := noticesOf(t, e.ctx, e.mb, "alice", fromAlice.ID); len(n) != 0 {
			t.Fatalf("after status %s alice was told %+v; want nothing", status, n)
		}
	}

	const reason = "seat cto was removed from the org and stopped"
	for range 2 { // a retried activity fails nothing more and tells nobody twice
		if err := seats.SetSeatStatus(e.ctx, crewlet.SeatStatusInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: row.Epoch}, Status: "stopped"}); err != nil {
			t.Fatalf("SetSeatStatus stopped: %v", err)
		}
		a, s := e.ticket(t, fromAlice.ID), e.ticket(t, fromSeat.ID)
		for _, got := range []crewlet.Ticket{a, s} {
			if got.Phase != crewlet.TicketFailed || got.Reason != reason {
				t.Fatalf("ticket %s from %s after cto stopped: phase %q reason %q; want failed: %s", got.ID, got.From, got.Phase, got.Reason, reason)
			}
		}
		wantOneNotice(t, e.ctx, e.mb, "alice", a)
		wantOneNotice(t, e.ctx, e.mb, "eng-1", s)
		if got := e.ticket(t, settled.ID); got.Phase != crewlet.TicketDone || got.Reply != "hello" {
			t.Fatalf("cto's settled ticket after it stopped: %q %q; want done as it was", got.Phase, got.Reply)
		}
		if got := e.ticket(t, elsewhere.ID); got.Phase != crewlet.TicketPending {
			t.Fatalf("eng-1's ticket after cto stopped: %q; want pending", got.Phase)
		}
	}
}

// Maintenance expires tickets open longer than tickets.expire_after and
// fails those of seats gone from the org; each delegator is told.
func TestMaintenanceExpiresOldTicketsAndFailsThoseOfRemovedSeats(t *testing.T) {
	e := setupTickets(t)
	old := e.open(t, "alice", "cto", "an old request")
	young := e.open(t, "alice", "cto", "a new request")
	oldDone := e.open(t, "alice", "eng-1", "an old answered request")
	if _, ok, err := e.tickets.Settle(e.ctx, oldDone.ID, "answered"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	for _, id := range []string{old.ID, oldDone.ID} {
		e.exec(t, `UPDATE tickets SET created_at = now() - interval '2 hours' WHERE id = $1`, id)
	}
	// A seat that was in the org: its mailbox is registered, and a ticket
	// to it was opened before it left.
	if err := e.store.EnsureMailbox(e.ctx, "eng-9", e.mb.Stream("eng-9"), e.mb.Group("eng-9")); err != nil {
		t.Fatal(err)
	}
	gone, _, err := e.store.CreateTicket(e.ctx, "before eng-9 left", crewlet.Ticket{From: "alice", To: "eng-9", Task: "the old job", Conversation: "c-gone"})
	if err != nil {
		t.Fatal(err)
	}

	m := &Maintenance{Store: e.store, Mailbox: e.mb, Org: e.org, Tickets: e.tickets, Log: discard}
	out, err := m.Maintenance(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.TicketsExpired != 1 {
		t.Fatalf("TicketsExpired = %d; want 1 (the open one older than 1h)", out.TicketsExpired)
	}
	if fmt.Sprint(out.MailboxesAbsent) != "[eng-9]" {
		t.Fatalf("MailboxesAbsent = %v; want [eng-9]", out.MailboxesAbsent)
	}
	expired := e.ticket(t, old.ID)
	if expired.Phase != crewlet.TicketExpired || !strings.Contains(expired.Reason, "1h0m0s") || !strings.Contains(expired.Reason, "tickets.expire_after") {
		t.Fatalf("old ticket: phase %q reason %q; want expired, naming 1h0m0s and tickets.expire_after", expired.Phase, expired.Reason)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", expired)
	failed := e.ticket(t, gone.ID)
	if failed.Phase != crewlet.TicketFailed || failed.Reason != "seat eng-9 is no longer in the org" {
		t.Fatalf("ticket of the removed seat: phase %q reason %q; want failed: seat eng-9 is no longer in the org", failed.Phase, failed.Reason)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", failed)
	if got := e.ticket(t, young.ID); got.Phase != crewlet.TicketPending {
		t.Fatalf("young ticket: %q; want pending", got.Phase)
	}
	if got := e.ticket(t, oldDone.ID); got.Phase != crewlet.TicketDone || got.Reply != "answered" {
		t.Fatalf("old done ticket: %q %q; want done as it was", got.Phase, got.Reply)
	}

	again, err := m.Maintenance(e.ctx)
	if err != nil || again.TicketsExpired != 0 {
		t.Fatalf("second pass: expired %d, %v; want 0", again.TicketsExpired, err)
	}
	wantOneNotice(t, e.ctx, e.mb, "alice", expired)
}

// The delegate tool opens a ticket in the conversation the seat is
// answering and says its id; the same call again is the same ticket. What
// it cannot open is an error result the model reads. The tickets tool shows
// an open ticket to both ends, and the target's answer reaches the
// delegating seat as a notice.
func TestDelegateAndTicketsTools(t *testing.T) {
	e := setupTicketTurns(t)
	model := &fakeModel{answer: func(req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case req.Seat == "cto" && last.Role == "user" && strings.Contains(last.Content, "get the build fixed"):
			return crewlet.ModelResponse{ToolCalls: []crewlet.ToolCall{{ID: "d1", Name: firstparty.Delegate, Args: []byte(`{"to":"eng-1","task":"fix the build"}`)}}}, nil
		case req.Seat == "cto" && last.Role == "tool":
			return text("handed to eng-1"), nil
		case req.Seat == "eng-1" && last.Role == "user":
			return crewlet.ModelResponse{ToolCalls: []crewlet.ToolCall{{ID: "l1", Name: firstparty.ListTickets, Args: []byte(`{}`)}}}, nil
		case req.Seat == "eng-1" && last.Role == "tool":
			return text("fixed: a missing import"), nil
		}
		return text("ok"), nil
	}}
	e.turns.models.byProfile["local"] = model

	workKey := e.beginIn(t, "m1", "conv-build", "please get the build fixed")
	round1, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: workKey, Round: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(round1.Calls) != 1 || round1.Calls[0].Name != firstparty.Delegate || round1.Calls[0].ReadOnly {
		t.Fatalf("round 1 calls = %+v; want one delegate write", round1.Calls)
	}
	call := crewlet.ToolCallInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: workKey, Round: 1, Call: round1.Calls[0]}
	thread := crewlet.ThreadKey("m1")
	result := func() string {
		t.Helper()
		msgs, err := e.store.TurnMessages(e.ctx, "cto", thread, 0)
		if err != nil {
			t.Fatal(err)
		}
		res, ok := findKey(msgs, resultKey(1, 0))
		if !ok {
			t.Fatalf("delegate left no result")
		}
		return res.Message.Content
	}
	out, err := e.turns.ToolCall(e.ctx, call)
	if err != nil || out.IsError || !out.Wrote {
		t.Fatalf("delegate: %+v, %v; want a clean write", out, err)
	}
	list, err := e.store.Tickets(e.ctx, store.TicketFilter{From: "cto"})
	if err != nil || len(list) != 1 {
		t.Fatalf("tickets from cto = %+v, %v; want one", list, err)
	}
	tk := list[0]
	if tk.To != "eng-1" || !tk.FromSeat || tk.Task != "fix the build" || tk.Phase != crewlet.TicketPending {
		t.Fatalf("delegated ticket = %+v; want pending from cto (a seat) to eng-1 with the task", tk)
	}
	if tk.Conversation != "conv-build" {
		t.Fatalf("ticket conversation = %q; want the calling thread's conversation conv-build", tk.Conversation)
	}
	first := result()
	if !strings.Contains(first, tk.ID) || !strings.Contains(first, "pending") {
		t.Fatalf("delegate result = %q; want it to name ticket %s and say it is pending", first, tk.ID)
	}

	// The same call again returns what was recorded and opens nothing more.
	again, err := e.turns.ToolCall(e.ctx, call)
	if err != nil || again != out {
		t.Fatalf("delegate again: %+v, %v; want the recorded %+v", again, err, out)
	}
	if list, _ := e.store.Tickets(e.ctx, store.TicketFilter{}); len(list) != 1 {
		t.Fatalf("tickets after the call again: %d; want 1", len(list))
	}
	if r := result(); r != first {
		t.Fatalf("result after the call again = %q; want %q", r, first)
	}
	if msgs, _ := e.mb.Recent(e.ctx, "eng-1", 100); len(msgs) != 1 || msgs[0].Ticket != tk.ID || msgs[0].Type != crewlet.MessageTicket {
		t.Fatalf("eng-1's mailbox = %+v; want the one request", msgs)
	}

	// What delegate cannot open, the model reads as an error result.
	refusals := []struct{ args, want string }{
		{`{"to":"nobody","task":"x"}`, `no seat "nobody"`},
		{`{"to":"alice","task":"x"}`, "alice is a human seat"},
		{`{"to":"cto","task":"x"}`, "cto cannot open a ticket to itself"},
		{`{"to":"eng-1","task":"  "}`, "task is empty"},
		{`{"to":"role:designer","task":"x"}`, `no agent seat other than cto has the role "designer"`},
		{`{"to":5}`, "delegate needs"},
	}
	for i, r := range refusals {
		out, text := e.callFirstParty(t, workKey, "m1", 10+i, firstparty.Delegate, r.args)
		if !out.IsError || !strings.Contains(text, r.want) {
			t.Errorf("delegate %s: %+v %q; want an error result saying %q", r.args, out, text, r.want)
		}
	}
	if list, _ := e.store.Tickets(e.ctx, store.TicketFilter{}); len(list) != 1 {
		t.Fatalf("tickets after refused delegations: %d; want still 1", len(list))
	}

	// cto's view: the ticket it delegated.
	if out, text := e.callFirstParty(t, workKey, "m1", 20, firstparty.ListTickets, `{}`); out.IsError ||
		!strings.Contains(text, "You delegated: 1 open") || !strings.Contains(text, tk.ID+" cto → eng-1, pending") ||
		!strings.Contains(text, "You serve: 0 open") {
		t.Fatalf("tickets for cto: %+v %q; want the ticket under what it delegated, nothing served", out, text)
	}
	// cto's turn ends; its answer goes to the operator, not to the ticket.
	round, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: workKey, Round: 21})
	if err != nil || len(round.Calls) != 0 {
		t.Fatalf("cto's last round: %+v, %v; want an answer", round, err)
	}
	if _, err := e.turns.FinishTurn(e.ctx, crewlet.FinishTurnInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: crewlet.TurnWorkflowID("cto", workKey),
		WorkKey: workKey, Status: crewlet.TurnDone, Rounds: 21}); err != nil {
		t.Fatal(err)
	}
	if got := e.ticket(t, tk.ID); got.Phase != crewlet.TicketPending {
		t.Fatalf("delegated ticket after the delegator's turn ended: %q; want pending (only eng-1 settles it)", got.Phase)
	}

	// eng-1 serves it: its view lists the ticket it serves, and its answer
	// settles it and tells cto.
	attached, err := e.host.Attach(e.ctx, crewlet.AttachInput{Handle: "eng-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.host.Teardown("eng-1") })
	ref, request := e.readOne(t, "eng-1")
	if request.EventID != tk.RequestEvent {
		t.Fatalf("eng-1 read %+v; want the request", request)
	}
	e.runTurn(t, "eng-1", attached.Epoch, ref)
	msgs, err := e.store.TurnMessages(e.ctx, "eng-1", crewlet.ThreadKey(tk.RequestEvent), 0)
	if err != nil {
		t.Fatal(err)
	}
	listed, ok := findKey(msgs, resultKey(1, 0))
	if !ok || listed.Message.IsError || !strings.Contains(listed.Message.Content, "You serve: 1 open") ||
		!strings.Contains(listed.Message.Content, tk.ID+" cto → eng-1, pending") || !strings.Contains(listed.Message.Content, "You delegated: 0 open") {
		t.Fatalf("tickets for eng-1: %q; want the ticket under what it serves", listed.Message.Content)
	}
	done := e.ticket(t, tk.ID)
	if done.Phase != crewlet.TicketDone || done.Reply != "fixed: a missing import" {
		t.Fatalf("ticket after eng-1's turn: %q %q; want done with eng-1's answer", done.Phase, done.Reply)
	}
	wantOneNotice(t, e.ctx, e.mb, "cto", done)
}

// A ticket to a role goes to the least-loaded seat of that role. A seat that
// delegates to its own role asks for another seat of it: it must not be
// routed to itself and refused while another seat of the role is free.
func TestDelegateToOwnRoleRoutesToAnotherSeat(t *testing.T) {
	e := setupTickets(t)
	// eng-2 is busier than eng-1, so eng-1 is the least loaded engineer.
	e.open(t, "alice", "eng-2", "a task that keeps eng-2 busy")
	tk, err := e.tickets.Open(e.ctx, tickets.OpenRequest{From: "eng-1", To: "role:engineer", Task: "review my change"})
	if err != nil {
		t.Fatalf("eng-1 delegates to role:engineer: %v; want it routed to eng-2, the other engineer", err)
	}
	if tk.To != "eng-2" || tk.RoutedFrom != "role:engineer" {
		t.Fatalf("routed to %q from %q; want eng-2 from role:engineer", tk.To, tk.RoutedFrom)
	}
}

// A note about a ticket that does not exist (a ticket_note signal sent
// straight through Temporal, or before these checks) leaves that ticket out
// and writes the rest, instead of failing, which its notes workflow would
// retry forever.
func TestTicketNoteLeavesOutTicketsThatDoNotExist(t *testing.T) {
	e := setupTickets(t)
	tk := e.open(t, "alice", "eng-1", "fix the build")
	if err := e.tickets.Note(e.ctx, crewlet.TicketNoteInput{Person: "alice", Tickets: []string{"t-none", tk.ID}}); err != nil {
		t.Fatalf("note naming a missing ticket: %v", err)
	}
	if err := e.tickets.Note(e.ctx, crewlet.TicketNoteInput{Person: "alice", Tickets: []string{"t-none"}}); err != nil {
		t.Fatalf("note naming only a missing ticket: %v", err)
	}
	var bodies []string
	for _, m := range notices(t, e.ctx, e.mb, "alice") {
		bodies = append(bodies, m.Body)
	}
	want := "1 of your tickets changed:\n- " + tk.ID + " to eng-1 is pending again"
	if len(bodies) != 1 || bodies[0] != want {
		t.Fatalf("alice's notes = %q; want only %q", bodies, want)
	}
}
