package store_test

import (
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
)

// pushPhases claims every notification due, one pass after another as
// each is marked delivered, and says the phases of those of config in
// claim order.
func pushPhases(t *testing.T, st *store.Store, config string) []crewlet.TicketPhase {
	t.Helper()
	var out []crewlet.TicketPhase
	for {
		pushes, err := st.ClaimPushes(t.Context(), 16, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(pushes) == 0 {
			return out
		}
		for _, p := range pushes {
			if p.Config.ID == config {
				out = append(out, p.Ticket.Phase)
			}
			if err := st.PushDelivered(t.Context(), p.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Every phase change of a ticket with push configs owes each config one
// notification holding the ticket as it stood, whichever store function
// made it; a config's notifications are claimed oldest first, the next
// only once the one before is delivered; a ticket without a config owes
// nothing.
func TestEachPhaseChangeOwesEachPushConfigOneNotification(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	tk, _, err := st.CreateTicket(ctx, "k-push", crewlet.Ticket{From: "ext", To: "eng-1", Task: "fix it", Conversation: "c-push"})
	if err != nil {
		t.Fatal(err)
	}
	quiet, _, err := st.CreateTicket(ctx, "k-quiet", crewlet.Ticket{From: "ext", To: "eng-1", Task: "nothing", Conversation: "c-quiet"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := st.PutPushConfig(ctx, store.PushConfig{Ticket: tk.ID, ID: id, URL: "https://203.0.113.9/" + id, Token: "tok-" + id, CreatedBy: "otto"}, 10, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := st.AskTicket(ctx, tk.ID, "which one?", "w:1:0", ""); err != nil || !ok {
		t.Fatalf("ask: %v %v", ok, err)
	}
	// The first notification of each config is due; the second waits for it.
	first, err := st.ClaimPushes(ctx, 16, time.Minute)
	if err != nil || len(first) != 2 {
		t.Fatalf("claim: %d notifications, %v; want one per config", len(first), err)
	}
	if _, ok, err := st.AnswerTicket(ctx, tk.ID, "the blue one", "otto", crewlet.AskNo); err != nil || !ok {
		t.Fatalf("answer: %v %v", ok, err)
	}
	if _, ok, err := st.SettleTicket(ctx, tk.ID, "fixed the blue one"); err != nil || !ok {
		t.Fatalf("settle: %v %v", ok, err)
	}
	if _, _, err := st.SettleTicket(ctx, quiet.ID, "done"); err != nil {
		t.Fatal(err)
	}
	if again, err := st.ClaimPushes(ctx, 16, 0); err != nil || len(again) != 0 {
		t.Fatalf("claim while the first are held: %d, %v; want none (a config's next waits for its first)", len(again), err)
	}
	for _, p := range first {
		if p.Ticket.Phase != crewlet.TicketAsking || p.Ticket.Question != "which one?" || p.Ticket.Conversation != "c-push" || p.Attempts != 1 || p.Config.Token != "tok-"+p.Config.ID {
			t.Fatalf("first notification %+v; want the asking ticket with its question, attempt 1, its config's token", p)
		}
		if err := st.PushDelivered(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	want := []crewlet.TicketPhase{crewlet.TicketPending, crewlet.TicketDone}
	if got := pushPhases(t, st, "a"); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("config a's notifications after the first: %v; want %v", got, want)
	}
}

// A failed attempt is retried after its delay, and one given up on is
// never claimed again; finished notifications are trimmed once old.
func TestAFailedPushIsRetriedAndOneGivenUpOnIsNot(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	tk, _, err := st.CreateTicket(ctx, "k-retry", crewlet.Ticket{From: "ext", To: "eng-1", Task: "fix it", Conversation: "c-retry"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutPushConfig(ctx, store.PushConfig{Ticket: tk.ID, ID: "a", URL: "https://203.0.113.9/a", Token: "t", CreatedBy: "otto"}, 10, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.EndTicket(ctx, tk.ID, crewlet.TicketCancelled, "no longer needed"); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimPushes(ctx, 16, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	if err := st.PushFailed(ctx, claimed[0].ID, "the webhook answered 503", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the retry's delay, which is the database's clock
	again, err := st.ClaimPushes(ctx, 16, time.Minute)
	if err != nil || len(again) != 1 || again[0].ID != claimed[0].ID || again[0].Attempts != 2 {
		t.Fatalf("claim after the retry's delay: %+v, %v; want the same notification, attempt 2", again, err)
	}
	if err := st.PushFailed(ctx, again[0].ID, "the webhook answered 503", 0); err != nil {
		t.Fatal(err)
	}
	if left, err := st.ClaimPushes(ctx, 16, time.Minute); err != nil || len(left) != 0 {
		t.Fatalf("claim after giving up: %d, %v; want none", len(left), err)
	}
	if n, err := st.TrimPushes(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("trim at an hour: %d, %v; want nothing that young trimmed", n, err)
	}
	if n, err := st.TrimPushes(ctx, 0); err != nil || n != 1 {
		t.Fatalf("trim at 0: %d, %v; want the notification given up on", n, err)
	}
}

// A task has at most its bound of configs (setting one of an id it has
// replaces it); a config for a ticket that is not there is ENOTFOUND; one
// set after the ticket moved past the phase its setter saw is owed that
// change at once.
func TestPutPushConfigBoundsAndCatchesUp(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	tk, _, err := st.CreateTicket(ctx, "k-bound", crewlet.Ticket{From: "ext", To: "eng-1", Task: "fix it", Conversation: "c-bound"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string, seen crewlet.TicketPhase) error {
		_, err := st.PutPushConfig(ctx, store.PushConfig{Ticket: tk.ID, ID: id, URL: "https://203.0.113.9/" + id, Token: "t", CreatedBy: "otto"}, 2, seen)
		return err
	}
	for _, id := range []string{"a", "b", "b"} {
		if err := put(id, ""); err != nil {
			t.Fatalf("put %s: %v", id, err)
		}
	}
	if err := put("c", ""); crewlet.ErrorCode(err) != crewlet.EINVALID {
		t.Fatalf("a third config past a bound of 2: %v; want EINVALID", err)
	}
	if _, err := st.PutPushConfig(ctx, store.PushConfig{Ticket: "t-000000000000", ID: "a", URL: "https://203.0.113.9/", Token: "t"}, 2, ""); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("a config of no ticket: %v; want ENOTFOUND", err)
	}
	if err := st.DeletePushConfig(ctx, tk.ID, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeletePushConfig(ctx, tk.ID, "a"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("deleting it again: %v; want ENOTFOUND", err)
	}
	if _, _, err := st.SettleTicket(ctx, tk.ID, "fixed"); err != nil {
		t.Fatal(err)
	}
	if err := put("late", crewlet.TicketPending); err != nil {
		t.Fatal(err)
	}
	if got := pushPhases(t, st, "late"); len(got) != 1 || got[0] != crewlet.TicketDone {
		t.Fatalf("a config set after the ticket it saw pending settled: owed %v; want [done]", got)
	}
	configs, err := st.PushConfigs(ctx, tk.ID)
	if err != nil || len(configs) != 2 || configs[0].ID != "b" || configs[1].ID != "late" {
		t.Fatalf("configs: %+v, %v; want b and late", configs, err)
	}
}

// An approval asked by a turn serving a ticket with push configs makes its
// task input-required, naming the approval; a newer ask of the same call
// supersedes it without a state change in between; the decision of the
// last one makes the task working again.
func TestAnApprovalOfTheServingTurnOwesItsTaskTwoStateChanges(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	tk, _, err := st.CreateTicket(ctx, "k-appr", crewlet.Ticket{From: "ext", To: "eng-1", Task: "pay it", Conversation: "c-appr"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutPushConfig(ctx, store.PushConfig{Ticket: tk.ID, ID: "a", URL: "https://203.0.113.9/a", Token: "tok-a", CreatedBy: "otto"}, 10, ""); err != nil {
		t.Fatal(err)
	}
	first := approvalRow("ap-first", "h1", "p1", 1)
	first.Handle, first.Ticket = "eng-1", tk.ID
	second := first
	second.ID, second.ArgsHash = "ap-second", "h2"
	for _, a := range []crewlet.Approval{first, second} {
		if _, created, err := st.CreateApproval(ctx, a); err != nil || !created {
			t.Fatalf("create %s: %v %v", a.ID, created, err)
		}
	}
	if _, decided, err := st.DecideApproval(ctx, second.ID, store.Decision{Status: crewlet.ApprovalApproved, By: "olga"}); err != nil || !decided {
		t.Fatalf("decide: %v %v", decided, err)
	}
	var got []string
	for {
		pushes, err := st.ClaimPushes(ctx, 16, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(pushes) == 0 {
			break
		}
		for _, p := range pushes {
			waits := ""
			if p.Approval != nil {
				waits = " waits " + p.Approval.ID + " " + p.Approval.Tool
			}
			got = append(got, string(p.Ticket.Phase)+waits)
			if err := st.PushDelivered(ctx, p.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{"pending waits ap-first " + first.Tool, "pending waits ap-second " + first.Tool, "pending"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("the task's notifications: %q; want %q", got, want)
	}
}
