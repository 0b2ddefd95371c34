package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/pool"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

func TestSeatToolsAreFencedByEpoch(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	if err := st.EnsureSeat(ctx, "cto", "executive", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	if tools, err := st.SeatTools(ctx, "cto"); err != nil || tools != nil {
		t.Fatalf("SeatTools before any attach = %s, %v; want nil, nil", tools, err)
	}
	first, err := st.Attach(ctx, "cto", "n1:aa", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetSeatTools(ctx, "cto", first.Epoch, json.RawMessage(`[{"name":"read"}]`)); err != nil {
		t.Fatal(err)
	}
	second, err := st.Attach(ctx, "cto", "n2:bb", "n2")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetSeatTools(ctx, "cto", second.Epoch, json.RawMessage(`[{"name":"write"}]`)); err != nil {
		t.Fatal(err)
	}
	err = st.SetSeatTools(ctx, "cto", first.Epoch, json.RawMessage(`[{"name":"zombie"}]`))
	if got := crewlet.ErrorCode(err); got != crewlet.EFENCED {
		t.Fatalf("stale SetSeatTools error code = %q (%v); want %q", got, err, crewlet.EFENCED)
	}
	tools, err := st.SeatTools(ctx, "cto")
	if err != nil {
		t.Fatal(err)
	}
	if string(tools) != `[{"name": "write"}]` {
		t.Fatalf("tools = %s; want the current tenure's catalog", tools)
	}
	if _, err := st.SeatTools(ctx, "nobody"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("SeatTools(unknown seat) = %v; want not found", err)
	}
}

func TestReopenedTurnKeepsItsMail(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	mail := []crewlet.Message{
		{EventID: "e1", Type: crewlet.MessageChat, From: "alice", To: "cto", Conversation: "c1", Body: "ship it?", SentAt: time.Now().UTC().Truncate(time.Second)},
		{EventID: "e2", Type: crewlet.MessageReply, From: "cfo", To: "cto", Conversation: "c2", Body: "ok"},
	}
	testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
	first, err := st.OpenTurn(ctx, wire.TurnRow{
		Seat: "cto", WorkKey: "wk1", TurnID: "turn-a", Epoch: 1, Mail: mail, Threads: []int{0},
		Tools: json.RawMessage(`["read"]`), MaxRounds: 8,
	})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != "running" || len(first.Mail) != 2 || first.Mail[0].Body != "ship it?" || fmt.Sprint(first.Threads) != "[0]" {
		t.Fatalf("opened turn = %+v; want running with both triggers and thread [0]", first)
	}
	if _, err := st.FinishTurn(ctx, "cto", "wk1", "failed", "host lost", "", 2); err != nil {
		t.Fatal(err)
	}

	// The host was lost; the next tenure runs the same work again.
	testenv.SeatAtEpoch(t, ctx, st, "cto", 2)
	again, err := st.OpenTurn(ctx, wire.TurnRow{
		Seat: "cto", WorkKey: "wk1", TurnID: "turn-b", Epoch: 2,
		Mail: []crewlet.Message{{EventID: "other"}}, Threads: []int{0, 1}, Tools: json.RawMessage(`["read","write"]`), MaxRounds: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if again.TurnID != "turn-b" || again.Epoch != 2 || again.Status != "running" || again.FinishedAt != nil || again.Note != "" {
		t.Fatalf("reopened turn = %+v; want turn-b, epoch 2, running again", again)
	}
	if len(again.Mail) != 2 || again.Mail[0].EventID != "e1" || !again.Mail[0].SentAt.Equal(mail[0].SentAt) || fmt.Sprint(again.Threads) != "[0]" {
		t.Fatalf("reopened turn mail %+v threads %v; want the first run's", again.Mail, again.Threads)
	}
	if string(again.Tools) != `["read", "write"]` || again.MaxRounds != 4 || !again.StartedAt.Equal(first.StartedAt) {
		t.Fatalf("reopened turn tools %s, max rounds %d, started %v; want the new tenure's catalog and limit, first start %v",
			again.Tools, again.MaxRounds, again.StartedAt, first.StartedAt)
	}

	// A zombie of the first tenure cannot take the turn back.
	_, err = st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: "wk1", TurnID: "turn-a", Epoch: 1})
	if crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("OpenTurn with a stale epoch = %v; want fenced", err)
	}
	byID, err := st.TurnByID(ctx, "turn-b")
	if err != nil || byID.WorkKey != "wk1" || byID.Epoch != 2 {
		t.Fatalf("TurnByID(turn-b) = %+v, %v; want work wk1 at epoch 2", byID, err)
	}
	if _, err := st.TurnByID(ctx, "turn-a"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("TurnByID(replaced id) = %v; want not found", err)
	}
	if _, err := st.Turn(ctx, "cto", "nope"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("Turn(unknown work) = %v; want not found", err)
	}

	if first, err := st.FinishTurn(ctx, "cto", "wk1", "stopped", "stopped by a person", "alice", 3); err != nil || !first {
		t.Fatalf("FinishTurn = %v, %v; want the first finish", first, err)
	}
	// A finish step run again (a crash after it) is told it is not the first.
	if first, err := st.FinishTurn(ctx, "cto", "wk1", "stopped", "stopped by a person", "alice", 3); err != nil || first {
		t.Fatalf("FinishTurn again = %v, %v; want not the first", first, err)
	}
	done, err := st.Turn(ctx, "cto", "wk1")
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != "stopped" || done.StoppedBy != "alice" || done.Rounds != 3 || done.FinishedAt == nil {
		t.Fatalf("finished turn = %+v; want stopped by alice after 3 rounds", done)
	}
	if _, err := st.FinishTurn(ctx, "cto", "nope", "done", "", "", 0); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("FinishTurn(unknown work) = %v; want not found", err)
	}
}

func TestSeatTurnsNewestFirst(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	base := time.Now().Add(-time.Hour)
	for i, wk := range []string{"wk-old", "wk-mid", "wk-new"} {
		testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
		if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: wk, TurnID: wk, Epoch: 1, StartedAt: base.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.SeatAtEpoch(t, ctx, st, "cfo", 1)
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cfo", WorkKey: "wk-cfo", TurnID: "x", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	turns, err := st.SeatTurns(ctx, "cto", 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range turns {
		got = append(got, tr.WorkKey)
	}
	if fmt.Sprint(got) != "[wk-new wk-mid]" {
		t.Fatalf("SeatTurns(cto, 2) = %v; want [wk-new wk-mid]", got)
	}
}

func TestTurnMessagesAppendOnceInOrder(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	appendMsg := func(thread int, key string, round int, content string) wire.TurnMessage {
		t.Helper()
		m, err := st.AppendTurnMessage(ctx, "cto", "wk1", wire.TurnMessage{
			Thread: thread, Key: key, Round: round, Message: crewlet.ChatMessage{Role: "assistant", Content: content},
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	user := appendMsg(0, "user", 0, "question")
	appendMsg(1, "user", 0, "other question")
	r1 := appendMsg(0, "r1", 1, "calling a tool")
	appendMsg(0, "r1c1", 1, "tool result")

	// The round is re-run after a crash: its message is already there.
	again := appendMsg(0, "r1", 1, "a different answer")
	if again.Seq != r1.Seq || again.Message.Content != "calling a tool" {
		t.Fatalf("re-appended r1 = %+v; want the stored %+v", again, r1)
	}
	appendMsg(0, "r2", 2, "done")
	if user.Seq == 0 || user.CreatedAt.IsZero() {
		t.Fatalf("stored message = %+v; want seq and created_at set", user)
	}

	thread0, err := st.TurnMessages(ctx, "cto", "wk1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range thread0 {
		keys = append(keys, m.Key)
	}
	if fmt.Sprint(keys) != "[user r1 r1c1 r2]" || thread0[1].Message.Content != "calling a tool" || thread0[1].Round != 1 {
		t.Fatalf("thread 0 = %v (%+v); want [user r1 r1c1 r2] with r1 as first written", keys, thread0)
	}
	all, err := st.TurnMessages(ctx, "cto", "wk1", -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 || all[1].Thread != 1 {
		t.Fatalf("all threads = %+v; want 5 messages in write order", all)
	}
}

func TestConcurrentAppendReturnsTheStoredMessage(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	var wg sync.WaitGroup
	got := make([]wire.TurnMessage, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := st.AppendTurnMessage(ctx, "cto", "wk1", wire.TurnMessage{Key: "r1", Round: 1, Message: crewlet.ChatMessage{Role: "assistant", Content: fmt.Sprint(i)}})
			if err != nil {
				t.Error(err)
			}
			got[i] = m
		}()
	}
	wg.Wait()
	for _, m := range got[1:] {
		if m.Seq != got[0].Seq || m.Message.Content != got[0].Message.Content {
			t.Fatalf("concurrent appends returned %+v and %+v; want the one stored row", got[0], m)
		}
	}
}

func TestToolCallIntent(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	first, err := st.StartToolCall(ctx, "cto", "wk1", 2, 1, "github.create_issue", false)
	if err != nil || !first {
		t.Fatalf("first StartToolCall = %v, %v; want true", first, err)
	}
	// The host died mid-call; the retry finds the intent row.
	first, err = st.StartToolCall(ctx, "cto", "wk1", 2, 1, "github.create_issue", false)
	if err != nil || first {
		t.Fatalf("second StartToolCall = %v, %v; want false: an earlier attempt may have written", first, err)
	}
	if first, err := st.StartToolCall(ctx, "cto", "wk1", 2, 2, "github.create_issue", false); err != nil || !first {
		t.Fatalf("StartToolCall of the next call = %v, %v; want true", first, err)
	}
	if err := st.FinishToolCall(ctx, "cto", "wk1", 2, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishToolCall(ctx, "cto", "wk1", 9, 9); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("FinishToolCall(unknown) = %v; want not found", err)
	}
}

func TestRecordRoundChargesOnceIntoLocalWindows(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	ber, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 23:30 in Berlin on Sunday 31 May lands on 31 May; 00:30 on 1 June
	// (22:30 UTC on 31 May) lands on the new Berlin day, week and month.
	late := time.Date(2026, 5, 31, 23, 30, 0, 0, ber)
	round := wire.RoundRow{Seat: "cto", WorkKey: "wk1", Round: 1, Profile: "smart", SystemSHA256: "ab12", SystemBytes: 512,
		InputTokens: 100, OutputTokens: 20, RecordedAt: late}
	for i, want := range []bool{true, false} {
		charged, err := st.RecordRound(ctx, round, ber)
		if err != nil {
			t.Fatal(err)
		}
		if charged != want {
			t.Fatalf("RecordRound attempt %d charged = %v; want %v", i+1, charged, want)
		}
	}
	if _, err := st.RecordRound(ctx, wire.RoundRow{Seat: "cfo", WorkKey: "wk9", Round: 1, InputTokens: 1000, RecordedAt: late}, ber); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordRound(ctx, wire.RoundRow{Seat: "cto", WorkKey: "wk1", Round: 2, InputTokens: 5, OutputTokens: 2,
		RecordedAt: time.Date(2026, 6, 1, 0, 30, 0, 0, ber)}, ber); err != nil {
		t.Fatal(err)
	}

	rounds, err := st.TurnRounds(ctx, "cto", "wk1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 2 || rounds[0].SystemSHA256 != "ab12" || rounds[0].SystemBytes != 512 || rounds[0].Profile != "smart" ||
		rounds[0].InputTokens != 100 || !rounds[0].RecordedAt.Equal(late) || rounds[1].Round != 2 {
		t.Fatalf("rounds = %+v; want rounds 1 and 2 with round 1's receipt and charge", rounds)
	}

	caps := crewlet.BudgetCaps{TokensPerDay: 120, TokensPerWeek: 1000}
	company := crewlet.BudgetCaps{TokensPerMonth: 5000}
	usage, err := st.Usage(ctx, "cto", caps, company, late, ber)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		scope, window string
		used, cap     int64
		start, resets time.Time
	}{
		{crewlet.ScopeSeat, crewlet.WindowDay, 120, 120, time.Date(2026, 5, 31, 0, 0, 0, 0, ber), time.Date(2026, 6, 1, 0, 0, 0, 0, ber)},
		{crewlet.ScopeSeat, crewlet.WindowWeek, 120, 1000, time.Date(2026, 5, 25, 0, 0, 0, 0, ber), time.Date(2026, 6, 1, 0, 0, 0, 0, ber)},
		{crewlet.ScopeSeat, crewlet.WindowMonth, 120, 0, time.Date(2026, 5, 1, 0, 0, 0, 0, ber), time.Date(2026, 6, 1, 0, 0, 0, 0, ber)},
		{crewlet.ScopeCompany, crewlet.WindowDay, 1120, 0, time.Date(2026, 5, 31, 0, 0, 0, 0, ber), time.Date(2026, 6, 1, 0, 0, 0, 0, ber)},
		{crewlet.ScopeCompany, crewlet.WindowWeek, 1120, 0, time.Date(2026, 5, 25, 0, 0, 0, 0, ber), time.Date(2026, 6, 1, 0, 0, 0, 0, ber)},
		{crewlet.ScopeCompany, crewlet.WindowMonth, 1120, 5000, time.Date(2026, 5, 1, 0, 0, 0, 0, ber), time.Date(2026, 6, 1, 0, 0, 0, 0, ber)},
	}
	if len(usage) != len(want) {
		t.Fatalf("Usage returned %d windows; want %d", len(usage), len(want))
	}
	for i, w := range want {
		u := usage[i]
		if u.Scope != w.scope || u.Window != w.window || u.Used != w.used || u.Cap != w.cap || !u.Start.Equal(w.start) || !u.ResetsAt.Equal(w.resets) {
			t.Errorf("window %d = %+v; want %s %s used %d cap %d [%v, %v)", i, u, w.scope, w.window, w.used, w.cap, w.start, w.resets)
		}
	}
	if !usage[0].Over() {
		t.Errorf("seat day %+v is not over its cap; want over at 120/120", usage[0])
	}

	// The morning after sees only the 00:30 round; an unused seat sees zeros.
	next, err := st.Usage(ctx, "cto", caps, company, time.Date(2026, 6, 1, 9, 0, 0, 0, ber), ber)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range next {
		if u.Used != 7 {
			t.Errorf("1 June %s %s used = %d; want 7", u.Scope, u.Window, u.Used)
		}
	}
	idle, err := st.Usage(ctx, "cmo", caps, company, late, ber)
	if err != nil {
		t.Fatal(err)
	}
	if idle[0].Used != 0 || idle[3].Used != 1120 {
		t.Fatalf("idle seat usage = %+v; want 0 for the seat, 1120 for the company day", idle)
	}
}

func TestConcurrentRoundsChargeEachOnce(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	now := time.Now()
	var wg sync.WaitGroup
	for _, seat := range []string{"cto", "cfo", "cmo"} {
		for round := 1; round <= 3; round++ {
			for range 2 { // every round recorded twice, as a retried step would
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := st.RecordRound(ctx, wire.RoundRow{Seat: seat, WorkKey: "wk", Round: round, InputTokens: 10, OutputTokens: 1, RecordedAt: now}, time.UTC); err != nil {
						t.Error(err)
					}
				}()
			}
		}
	}
	wg.Wait()
	usage, err := st.Usage(ctx, "cto", crewlet.BudgetCaps{}, crewlet.BudgetCaps{}, now, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range usage {
		want := int64(33)
		if u.Scope == crewlet.ScopeCompany {
			want = 99
		}
		if u.Used != want {
			t.Errorf("%s %s used = %d; want %d", u.Scope, u.Window, u.Used, want)
		}
	}
}

// TrimTurns deletes turn records older than the retention and keeps newer
// ones. The old turn is
// backdated rather than aged by a sleep, so a slow machine cannot age the
// new one past the retention too.
func TestTrimTurnsDropsOnlyOldRecords(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	record := func(workKey string) {
		t.Helper()
		testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
		if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: workKey, TurnID: "turn/cto/" + workKey, Epoch: 1,
			Mail: []crewlet.Message{{EventID: "e-" + workKey}}, Threads: []int{0}, MaxRounds: 4, Status: "running"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendTurnMessage(ctx, "cto", workKey, wire.TurnMessage{Key: "user", Message: crewlet.ChatMessage{Role: "user", Content: "hi"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecordRound(ctx, wire.RoundRow{Seat: "cto", WorkKey: workKey, Round: 1, InputTokens: 5, RecordedAt: time.Now()}, berlin); err != nil {
			t.Fatal(err)
		}
		if _, err := st.StartToolCall(ctx, "cto", workKey, 1, 0, "fs__write", false); err != nil {
			t.Fatal(err)
		}
	}
	slot := func(workKey string, expiresAt time.Time) {
		t.Helper()
		_, _, err := st.AcquireProfile(ctx, store.SlotRequest{Pool: "clerk", Profiles: []string{"p"}, TurnID: "turn/cto/" + workKey,
			Epoch: 1, Seat: "cto", WorkKey: workKey, Now: time.Now(), ExpiresAt: expiresAt},
			func(f store.ProfileFacts) (string, pool.Scores) { return "p", f.Scores })
		if err != nil {
			t.Fatal(err)
		}
	}
	record("old")
	// A slot whose lease ran out (its turn vanished) goes at once; a live
	// one stays.
	slot("old", time.Now().Add(-time.Minute))
	slot("running", time.Now().Add(time.Hour))
	if _, err := st.FinishTurn(ctx, "cto", "old", "done", "", "", 1); err != nil {
		t.Fatal(err)
	}
	if got, err := st.TrimTurns(ctx, time.Hour); err != nil || got != (store.TurnsTrimmed{Slots: 1}) {
		t.Fatalf("trim with an hour's retention removed %+v (%v); want the expired slot only", got, err)
	}
	record("new")
	for _, q := range []string{
		`UPDATE turns SET started_at = started_at - interval '2 hours', finished_at = finished_at - interval '2 hours' WHERE work_key = 'old'`,
		`UPDATE turn_messages SET created_at = created_at - interval '2 hours' WHERE work_key = 'old'`,
		`UPDATE turn_rounds SET recorded_at = recorded_at - interval '2 hours' WHERE work_key = 'old'`,
		`UPDATE tool_calls SET started_at = started_at - interval '2 hours' WHERE work_key = 'old'`,
	} {
		sqlExec(t, db, ctx, q)
	}

	got, err := st.TrimTurns(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.TurnsTrimmed{Turns: 1, Messages: 1, Rounds: 1, ToolCalls: 1}); got != want {
		t.Fatalf("trimmed %+v; want %+v (the old turn's records, no current counter)", got, want)
	}
	if _, err := st.Turn(ctx, "cto", "old"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("old turn after trim: %v; want not found", err)
	}
	if _, err := st.Turn(ctx, "cto", "new"); err != nil {
		t.Fatalf("new turn after trim: %v; want kept", err)
	}
	if msgs, err := st.TurnMessages(ctx, "cto", "new", 0); err != nil || len(msgs) != 1 {
		t.Fatalf("new turn's messages after trim: %v (%v); want kept", msgs, err)
	}
}

// A turn that has not finished keeps its row and its threads' records
// however old they are (a turn waiting weeks on a ticket): its write tool's
// record survives retention, so the call is not attempted again. A turn that
// finished as long ago loses them, and so does the waiting one once it
// finishes. Rows are keyed as the turn keys them: the turn on its work key,
// its threads on each trigger's thread key.
func TestTrimTurnsKeepsATurnStillRunning(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	record := func(eventID string) (workKey, thread string) {
		t.Helper()
		workKey, thread = crewlet.WorkKey([]string{eventID, eventID + "-too"}), crewlet.ThreadKey(eventID)
		testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
		if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: workKey, TurnID: "turn/cto/" + workKey, Epoch: 1,
			Mail: []crewlet.Message{{EventID: eventID}, {EventID: eventID + "-too"}}, Threads: []int{0}, MaxRounds: 4, Status: "running"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendTurnMessage(ctx, "cto", thread, wire.TurnMessage{Key: "user", Message: crewlet.ChatMessage{Role: "user", Content: "hi"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecordRound(ctx, wire.RoundRow{Seat: "cto", WorkKey: thread, Round: 1, InputTokens: 5, RecordedAt: time.Now()}, berlin); err != nil {
			t.Fatal(err)
		}
		if first, err := st.StartToolCall(ctx, "cto", thread, 1, 0, "fs__write", false); err != nil || !first {
			t.Fatalf("first start of the write = %v, %v", first, err)
		}
		return workKey, thread
	}
	age := func() {
		t.Helper()
		for _, q := range []string{
			`UPDATE turns SET started_at = started_at - interval '30 days', finished_at = finished_at - interval '30 days'`,
			`UPDATE turn_messages SET created_at = created_at - interval '30 days'`,
			`UPDATE turn_rounds SET recorded_at = recorded_at - interval '30 days'`,
			`UPDATE tool_calls SET started_at = started_at - interval '30 days'`,
		} {
			sqlExec(t, db, ctx, q)
		}
	}
	waiting, waitingThread := record("e-waiting")
	done, _ := record("e-done")
	if _, err := st.FinishTurn(ctx, "cto", done, "done", "", "", 1); err != nil {
		t.Fatal(err)
	}
	age()
	got, err := st.TrimTurns(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.TurnsTrimmed{Turns: 1, Messages: 1, Rounds: 1, ToolCalls: 1}); got != want {
		t.Fatalf("trimmed %+v; want %+v: the finished turn's records only", got, want)
	}
	if turn, err := st.Turn(ctx, "cto", waiting); err != nil || turn.Status != "running" {
		t.Fatalf("running turn after trim: %+v, %v; want kept", turn, err)
	}
	if first, err := st.StartToolCall(ctx, "cto", waitingThread, 1, 0, "fs__write", false); err != nil || first {
		t.Fatalf("the running turn's write after trim: first attempt %v (%v); want its record kept, so it is not run again", first, err)
	}
	if msgs, err := st.TurnMessages(ctx, "cto", waitingThread, 0); err != nil || len(msgs) != 1 {
		t.Fatalf("the running turn's conversation after trim: %v (%v); want kept", msgs, err)
	}
	if _, err := st.FinishTurn(ctx, "cto", waiting, "done", "", "", 1); err != nil {
		t.Fatal(err)
	}
	age()
	if got, err := st.TrimTurns(ctx, time.Hour); err != nil || got != (store.TurnsTrimmed{Turns: 1, Messages: 1, Rounds: 1, ToolCalls: 1}) {
		t.Fatalf("trim once it finished removed %+v (%v); want its records", got, err)
	}
}

// A turn opens, and its steps read it, only at the seat's current epoch: a
// run of a tenure that moved on is refused even for work no tenure opened
// yet, by the statement itself.
func TestTurnOpensAndReadsOnlyAtTheSeatsCurrentEpoch(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	testenv.SeatAtEpoch(t, ctx, st, "cto", 2)
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: "wk1", TurnID: "turn-a", Epoch: 1}); crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("OpenTurn at epoch 1 of a seat at 2 = %v; want fenced", err)
	}
	if _, err := st.Turn(ctx, "cto", "wk1"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("turn after a fenced OpenTurn: %v; want none recorded", err)
	}
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "nobody", WorkKey: "wk1", TurnID: "turn-n", Epoch: 1}); crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("OpenTurn for a seat with no row = %v; want fenced", err)
	}
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: "wk1", TurnID: "turn-a", Epoch: 2}); err != nil {
		t.Fatalf("OpenTurn at the current epoch: %v", err)
	}
	if row, err := st.TenureTurn(ctx, crewlet.Tenure{Handle: "cto", Epoch: 2}, "wk1"); err != nil || row.TurnID != "turn-a" {
		t.Fatalf("TenureTurn at the current epoch = %+v, %v; want turn-a", row, err)
	}
	if _, err := st.TenureTurn(ctx, crewlet.Tenure{Handle: "cto", Epoch: 1}, "wk1"); crewlet.ErrorCode(err) != crewlet.EFENCED {
		t.Fatalf("TenureTurn at a stale epoch = %v; want fenced", err)
	}
	if _, err := st.TenureTurn(ctx, crewlet.Tenure{Handle: "cto", Epoch: 2}, "nope"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("TenureTurn of work with no turn = %v; want not found", err)
	}
}

// A turn closes in one batch: the outcome, the memory and the ledger. A
// work whose turn row is gone is ENOTFOUND, and its ledger and memory are
// recorded all the same, so its triggers are never run again.
func TestCloseTurnRecordsOutcomeMemoryAndLedger(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	testenv.SeatAtEpoch(t, ctx, st, "cto", 1)
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "cto", WorkKey: "wk1", TurnID: "turn/cto/wk1", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, st, ctx, slotReq("turn/cto/wk1", 1), always("p", nil), "p")
	closing := store.TurnClose{Seat: "cto", WorkKey: "wk1", TurnID: "turn/cto/wk1", Status: "done", Rounds: 1,
		Episode: "answered alice", Counterparties: []string{"alice"}, Ledger: []string{"e1"}, Release: true, ReleaseEpoch: 1}
	for i, want := range []store.TurnClosed{{First: true, Freed: "p"}, {}} {
		if closed, err := st.CloseTurn(ctx, closing); err != nil || closed != want {
			t.Fatalf("CloseTurn #%d = %+v, %v; want %+v (the slot given back once)", i+1, closed, err, want)
		}
	}
	if turn, err := st.Turn(ctx, "cto", "wk1"); err != nil || turn.Status != "done" || turn.FinishedAt == nil {
		t.Fatalf("closed turn = %+v, %v; want done and finished", turn, err)
	}

	gone := store.TurnClose{Seat: "cto", WorkKey: "wk-gone", TurnID: "turn/cto/wk-gone", Status: "done", Ledger: []string{"e2"}}
	if _, err := st.CloseTurn(ctx, gone); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("CloseTurn of a work with no turn = %v; want not found", err)
	}
	done, err := st.LedgerRecorded(ctx, "cto", []string{"e1", "e2"})
	if err != nil || !done["e1"] || !done["e2"] {
		t.Fatalf("ledger after the closes = %v, %v; want e1 and e2", done, err)
	}
}
