package activities

import (
	"testing"

	"github.com/crewlet/crewlet"
)

// The steps of a reply as a seat at node-liveness 6 runs them: the read
// prepares the turn, the begin takes the turn's profile slot and names the
// threads' keys, the round and the finish read the thread with the turn,
// and the finish gives the slot back and acks the seat's entries, once the
// ledger holds them. Nothing is left behind: no live slot, no pending entry.
func TestMergedStepsPrepareAcquireReleaseAndAck(t *testing.T) {
	e := setupTurns(t, nil)
	mail := &Mail{Store: e.store, Mailbox: e.mb, Log: discard}
	ten := crewlet.Tenure{Handle: "cto", Epoch: e.epoch}
	e.publish(t, "m1", "hello")

	read, err := mail.ReadMail(e.ctx, crewlet.ReadMailInput{Tenure: ten, Consumer: "c", Max: 8, Prepare: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Mail) != 1 || read.Prepared == nil || len(read.Prepared.Run) != 1 || read.Prepared.Run[0].EventID != "m1" {
		t.Fatalf("read %+v, prepared %+v; want m1 read and prepared to run", read.Mail, read.Prepared)
	}
	workKey := crewlet.WorkKey([]string{"m1"})
	turnID := crewlet.TurnWorkflowID("cto", workKey)
	begin, err := e.turns.BeginTurn(e.ctx, crewlet.BeginTurnInput{Tenure: ten, TurnID: turnID, WorkKey: workKey, Mail: read.Prepared.Run, Acquire: true})
	if err != nil {
		t.Fatal(err)
	}
	if begin.Threads != 1 || begin.Profile == nil || begin.Profile.Profile != "local" {
		t.Fatalf("begin %+v (profile %+v); want one thread on profile local", begin, begin.Profile)
	}
	if len(begin.ThreadKeys) != 1 || begin.ThreadKeys[0] != crewlet.ThreadKey("m1") {
		t.Fatalf("thread keys %q; want m1's", begin.ThreadKeys)
	}
	wantSlots := func(want int) {
		t.Helper()
		live, err := e.store.LiveSlots(e.ctx, []string{"local"}, e.turns.profiles.Now())
		if err != nil {
			t.Fatal(err)
		}
		if live["local"] != want {
			t.Fatalf("live slots of local: %d; want %d", live["local"], want)
		}
	}
	wantSlots(1)
	round, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: ten, TurnID: turnID, WorkKey: workKey, Round: 1,
		Profile: "local", ThreadKey: begin.ThreadKeys[0]})
	if err != nil || round.Failed != "" {
		t.Fatalf("round: %+v, %v; want an answer", round, err)
	}
	fin, err := e.turns.FinishTurn(e.ctx, crewlet.FinishTurnInput{Tenure: ten, TurnID: turnID, WorkKey: workKey,
		Status: crewlet.TurnDone, Rounds: 1, Release: true, Ack: []string{read.Mail[0].StreamID}, ThreadKeys: begin.ThreadKeys})
	if err != nil {
		t.Fatal(err)
	}
	if !fin.Acked || len(fin.Answered) != 1 || fin.Replies != 1 {
		t.Fatalf("finish %+v; want m1 answered, its reply sent and acked", fin)
	}
	wantSlots(0)
	again, err := mail.ReadMail(e.ctx, crewlet.ReadMailInput{Tenure: ten, Consumer: "c", Max: 8, Prepare: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Mail) != 0 || again.Prepared != nil {
		t.Fatalf("read after the finish: %+v (prepared %+v); want nothing: the finish acked m1", again.Mail, again.Prepared)
	}
}
