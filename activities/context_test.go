package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
)

// fakeModel answers with answer and keeps every request it was sent.
type fakeModel struct {
	mu     sync.Mutex
	reqs   []crewlet.ModelRequest
	answer func(crewlet.ModelRequest) (crewlet.ModelResponse, error)
}

func (f *fakeModel) Chat(_ context.Context, req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	resp, err := f.answer(req)
	if err == nil && resp.Usage.InputTokens == 0 {
		// What a provider would report: about four bytes a token.
		n := len(req.System)
		for _, m := range req.Messages {
			n += len(m.Content)
		}
		for _, t := range req.Tools {
			n += len(t.Schema) + len(t.Description)
		}
		resp.Usage.InputTokens = int64(n / 4)
	}
	return resp, err
}

// calls counts the requests of one purpose ("" for a turn's rounds).
func (f *fakeModel) calls(purpose string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reqs {
		if r.Purpose == purpose {
			n++
		}
	}
	return n
}

func (f *fakeModel) last(purpose string) crewlet.ModelRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.reqs) - 1; i >= 0; i-- {
		if f.reqs[i].Purpose == purpose {
			return f.reqs[i]
		}
	}
	return crewlet.ModelRequest{}
}

func text(s string) crewlet.ModelResponse {
	return crewlet.ModelResponse{Text: s, Usage: crewlet.Usage{OutputTokens: int64(len(s)/4 + 1)}}
}

const contextOrg = `
company: { name: acme }
profiles:
  local: { provider: scripted, context_tokens: 2000, compact_with: summarizer }
  summarizer: { provider: scripted }
roles:
  clerk: { charter: keeps notes, profile: local }
seats:
  - { handle: cto, role: clerk }
`

// beginIn publishes body in conversation conv and begins its turn; it
// returns the turn's work key.
func (e *turnEnv) beginIn(t testing.TB, eventID, conv, body string) string {
	t.Helper()
	id, _, err := e.mb.Publish(e.ctx, crewlet.Message{
		EventID: eventID, Type: crewlet.MessageChat, From: crewlet.ExternalSender, To: "cto",
		Conversation: conv, Body: body, SentAt: e.now,
	}, mailbox.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	workKey := crewlet.WorkKey([]string{eventID})
	e.begin(t, workKey, crewlet.MailRef{StreamID: id, EventID: eventID})
	return workKey
}

// say publishes body in conversation conv and runs the whole turn over it:
// rounds (with first-party tool calls) until an answer, then finish. It
// returns the round outputs' failure, if any.
func (e *turnEnv) say(t testing.TB, eventID, conv, body string) string {
	t.Helper()
	failed, err := e.sayErr(t, eventID, conv, body)
	if err != nil {
		t.Fatal(err)
	}
	return failed
}

// sayErr is say that returns a round's error instead of failing the test;
// the turn is then left unfinished.
func (e *turnEnv) sayErr(t testing.TB, eventID, conv, body string) (string, error) {
	t.Helper()
	workKey := e.beginIn(t, eventID, conv, body)
	status, failed, _, err := e.runRounds("cto", e.epoch, workKey)
	if err != nil {
		return "", fmt.Errorf("%s: %w", eventID, err)
	}
	if _, err := e.turns.FinishTurn(e.ctx, crewlet.FinishTurnInput{
		Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: crewlet.TurnWorkflowID("cto", workKey), WorkKey: workKey, Status: status, Note: failed,
	}); err != nil {
		t.Fatalf("%s finish: %v", eventID, err)
	}
	return failed, nil
}

// runRounds runs a begun turn's rounds, with their tool calls, until its
// thread answered; it returns how the turn ends, the failure a round
// reported, and how many rounds it made.
func (e *turnEnv) runRounds(handle string, epoch int64, workKey string) (status crewlet.TurnStatus, failed string, rounds int, err error) {
	status = crewlet.TurnDone
	for rounds = 1; rounds < 10; rounds++ {
		out, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: handle, Epoch: epoch}, WorkKey: workKey, Round: rounds})
		if err != nil {
			return status, "", rounds, fmt.Errorf("round %d: %w", rounds, err)
		}
		if out.Failed != "" {
			return crewlet.TurnFailed, out.Failed, rounds, nil
		}
		if len(out.Calls) == 0 {
			return status, "", rounds, nil
		}
		for _, c := range out.Calls {
			if _, err := e.turns.ToolCall(e.ctx, crewlet.ToolCallInput{Tenure: crewlet.Tenure{Handle: handle, Epoch: epoch}, WorkKey: workKey, Round: rounds, Call: c}); err != nil {
				return status, "", rounds, fmt.Errorf("round %d call %s: %w", rounds, c.Name, err)
			}
		}
	}
	return status, "", rounds, fmt.Errorf("no answer in %d rounds", rounds-1)
}

func compactJSON(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("not JSON: %s", raw)
	}
	return b.Bytes()
}

func roles(msgs []crewlet.ChatMessage) string {
	var b []string
	for _, m := range msgs {
		r := m.Role
		if len(m.ToolCalls) > 0 {
			r += "+calls"
		}
		b = append(b, r)
	}
	return strings.Join(b, " ")
}

// A round sends the conversation so far: the earlier trigger, the tool call
// and result of its turn and its answer, then this turn's trigger; nothing
// of another conversation. The same recorded state assembles the same
// context, also after later messages arrived.
func TestRoundSendsTheConversationSoFar(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, contextOrg, nil)
	model := &fakeModel{answer: func(req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case strings.Contains(last.Content, "remember the number 7"):
			return crewlet.ModelResponse{ToolCalls: []crewlet.ToolCall{{ID: "c1", Name: "diary_write", Args: []byte(`{"text":"the number is 7"}`)}}}, nil
		case last.Role == "tool":
			return text("Noted: 7."), nil
		}
		return text("ok"), nil
	}}
	e.turns.models.byProfile["local"] = model

	e.say(t, "m1", "conv-a", "remember the number 7")
	e.say(t, "other", "conv-b", "something else entirely")
	e.say(t, "m2", "conv-a", "what number did I give you?")

	req := model.last("")
	if got, want := roles(req.Messages), "user assistant+calls tool assistant user"; got != want {
		t.Fatalf("roles of the second turn's request = %q; want %q\n%+v", got, want, req.Messages)
	}
	if m := req.Messages[0]; !strings.Contains(m.Content, "remember the number 7") {
		t.Errorf("first message = %q; want the earlier trigger", m.Content)
	}
	if m := req.Messages[1]; !bytes.Equal(compactJSON(t, m.ToolCalls[0].Args), []byte(`{"text":"the number is 7"}`)) || m.ToolCalls[0].Name != "diary_write" {
		t.Errorf("earlier tool call = %+v; want diary_write with its arguments", m.ToolCalls[0])
	}
	if m := req.Messages[2]; m.ToolCallID != req.Messages[1].ToolCalls[0].ID {
		t.Errorf("earlier tool result answers %q; want %q", m.ToolCallID, req.Messages[1].ToolCalls[0].ID)
	}
	if m := req.Messages[3]; m.Content != "Noted: 7." {
		t.Errorf("earlier answer = %q; want %q", m.Content, "Noted: 7.")
	}
	if m := req.Messages[4]; !strings.Contains(m.Content, "what number did I give you?") {
		t.Errorf("last message = %q; want this turn's trigger", m.Content)
	}
	for _, m := range req.Messages {
		if strings.Contains(m.Content, "something else") {
			t.Fatalf("a message of another conversation reached the request: %q", m.Content)
		}
	}

	// m3 arrives later in the same conversation: m2's context is unchanged.
	e.say(t, "m3", "conv-a", "and now?")
	turn, err := e.store.Turn(e.ctx, "cto", crewlet.WorkKey([]string{"m2"}))
	if err != nil {
		t.Fatal(err)
	}
	trigger, key, err := threadOf(turn, 0)
	if err != nil {
		t.Fatal(err)
	}
	thread, err := e.store.TurnMessages(e.ctx, "cto", key, 0)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := e.turns.assemble(e.ctx, "cto", "local", "", req.System, req.Tools, trigger, key, thread[:1])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(plan.Messages) != fmt.Sprint(req.Messages) {
		t.Fatalf("m2's context assembled again after m3 =\n%+v\nwant what was sent\n%+v", plan.Messages, req.Messages)
	}
}

// A conversation pushed past the profile's context budget is compacted by
// one call of the compact_with profile; the summary is stored once and the
// next turns reuse it, also a round that runs again after the summarizer's
// first try died.
func TestCompactionIsMadeOnceAndReused(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, contextOrg, nil)
	model := &fakeModel{answer: func(crewlet.ModelRequest) (crewlet.ModelResponse, error) { return text("ok"), nil }}
	summarizerDied := false
	summarizer := &fakeModel{answer: func(req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		if !summarizerDied {
			summarizerDied = true
			return crewlet.ModelResponse{}, context.DeadlineExceeded // the worker died mid-call
		}
		return text("Summary: the operator told numbers 1 to 5."), nil
	}}
	e.turns.models.byProfile["local"], e.turns.models.byProfile["summarizer"] = model, summarizer
	body := strings.Repeat("filler text for the budget. ", 28)

	compactedAt := 0
	for i := 1; i <= 12 && compactedAt == 0; i++ {
		_, err := e.sayErr(t, fmt.Sprintf("m%d", i), "long", fmt.Sprintf("number %d. %s", i, body))
		if summarizer.calls(crewlet.PurposeCompact) > 0 {
			compactedAt = i
			if err == nil {
				t.Fatal("the round whose summarizer died succeeded")
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if compactedAt == 0 {
		t.Fatal("12 messages of ~800 bytes never outgrew a 2000-token context")
	}
	t.Logf("compaction at message %d", compactedAt)
	// The summarizer died on its first try, so the round failed; run it again.
	id := fmt.Sprintf("m%d", compactedAt)
	workKey := crewlet.WorkKey([]string{id})
	if _, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: workKey, Round: 1}); err != nil {
		t.Fatalf("round re-run after the summarizer died: %v", err)
	}
	if _, err := e.turns.FinishTurn(e.ctx, crewlet.FinishTurnInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: "t", WorkKey: workKey, Status: crewlet.TurnDone}); err != nil {
		t.Fatal(err)
	}
	// The next turn starts from the stored summary without calling the
	// summarizer again. (One more turn may outgrow the budget again and
	// compact anew: how soon depends on the size of the seat's tools.)
	next := compactedAt + 1
	e.say(t, fmt.Sprintf("m%d", next), "long", fmt.Sprintf("number %d. %s", next, body))
	if first := model.last("").Messages[0]; !strings.HasPrefix(first.Content, "Summary of the earlier part") {
		t.Fatalf("turn %d starts with %q; want the summary", next, first.Content)
	}
	if got := summarizer.calls(crewlet.PurposeCompact); got != 2 {
		t.Fatalf("summarizer called %d times; want 2 (the call that died, then the one stored)", got)
	}
	summaries, err := e.store.ConversationSummaries(e.ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if len(summaries) != 1 {
		t.Fatalf("%d summaries stored; want 1: %+v", len(summaries), summaries)
	}
	s := summaries[0]
	if s.Profile != "summarizer" || s.Covered < 1 || s.Text != "Summary: the operator told numbers 1 to 5." {
		t.Fatalf("summary = %+v; want the summarizer's text over at least one exchange", s)
	}
	if !strings.Contains(summarizer.last(crewlet.PurposeCompact).Messages[0].Content, "number 1.") {
		t.Errorf("the summarizer was not given the oldest exchange")
	}
	for _, m := range model.last("").Messages {
		if strings.Contains(m.Content, "number 1. ") {
			t.Errorf("the first exchange is still in the request after compaction")
		}
	}
}

// An empty answer is asked for again once; twice empty, the sender gets a
// note saying so, and the round reports the thread failed.
func TestEmptyAnswerIsNudgedOnceThenNoted(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, contextOrg, nil)
	empty := &fakeModel{answer: func(crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		return crewlet.ModelResponse{Usage: crewlet.Usage{InputTokens: 5}}, nil
	}}
	e.turns.models.byProfile["local"] = empty
	failed := e.say(t, "m1", "c", "hello?")
	if empty.calls("") != 2 {
		t.Fatalf("model called %d times; want 2 (the answer, then one nudge)", empty.calls(""))
	}
	if nudge := empty.last("").Messages; !strings.Contains(nudge[len(nudge)-1].Content, "Your last answer was empty") {
		t.Fatalf("second call ends with %q; want the nudge", nudge[len(nudge)-1].Content)
	}
	if !strings.HasPrefix(failed, "No answer was produced") {
		t.Fatalf("round failure = %q; want the no-answer note", failed)
	}
	conv, err := e.store.Conversation(e.ctx, "c", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(conv) != 2 || conv[1].Body != failed || conv[1].InReplyTo != "m1" {
		t.Fatalf("transcript = %+v; want the trigger and the note as its reply", conv)
	}
	// A re-run of the round repeats no model call and reports the same.
	again, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: crewlet.WorkKey([]string{"m1"}), Round: 1})
	if err != nil || again.Failed != failed || empty.calls("") != 2 {
		t.Fatalf("re-run = %+v, %v after %d calls; want the same failure and no call", again, err, empty.calls(""))
	}
	events, err := e.store.SeatEvents(e.ctx, "cto", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Kind != "turn_trigger_failed" || events[0].EventID != "m1" || events[0].Detail["reason"] != failed {
		t.Fatalf("events = %+v; want one turn_trigger_failed for m1 with the reason", events)
	}
}

// A trigger larger than the whole budget is refused with a note; the model
// is never called.
func TestTriggerOverTheBudgetIsRefused(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, contextOrg, nil)
	model := &fakeModel{answer: func(crewlet.ModelRequest) (crewlet.ModelResponse, error) { return text("ok"), nil }}
	e.turns.models.byProfile["local"] = model
	failed := e.say(t, "big", "c", strings.Repeat("x", 8000))
	if model.calls("") != 0 {
		t.Fatalf("model called %d times; want none", model.calls(""))
	}
	if !strings.Contains(failed, "does not fit cto's context budget of 1500 tokens") {
		t.Fatalf("note = %q; want it to name the budget", failed)
	}
}

// With reflect on, a turn that answered leaves one diary entry keyed on its
// work; a reflection run again (a crash after it wrote) asks nothing more
// and writes nothing more. A reflection of NOTHING writes nothing.
func TestReflectionWritesOnce(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, strings.Replace(contextOrg, "profile: local }", "profile: local, reflect: true }", 1), nil)
	reply := "The operator's number is 7."
	model := &fakeModel{answer: func(req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		if req.Purpose == crewlet.PurposeReflect {
			return text(reply), nil
		}
		return text("ok"), nil
	}}
	e.turns.models.byProfile["local"] = model
	e.say(t, "m1", "c", "my number is 7")
	begin := e.begin(t, crewlet.WorkKey([]string{"m1"}))
	if !begin.Reflect {
		t.Fatal("BeginTurn says reflect is off; the role turns it on")
	}
	in := crewlet.ReflectInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: "t1", WorkKey: crewlet.WorkKey([]string{"m1"})}
	for range 2 {
		if err := e.turns.Reflect(e.ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if n := model.calls(crewlet.PurposeReflect); n != 1 {
		t.Fatalf("reflection asked %d times; want once", n)
	}
	if last := model.last(crewlet.PurposeReflect).Messages; last[len(last)-1].Content != crewlet.ReflectionPrompt ||
		!strings.Contains(last[0].Content, "my number is 7") {
		t.Fatalf("reflection request = %+v; want the turn, then the reflection prompt", last)
	}
	mem, err := e.store.Memory(e.ctx, "cto")
	if err != nil || mem.Diary != 1 {
		t.Fatalf("diary = %+v, %v; want one entry", mem, err)
	}

	reply = "NOTHING."
	e.say(t, "m2", "c", "thanks")
	if err := e.turns.Reflect(e.ctx, crewlet.ReflectInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: "t2", WorkKey: crewlet.WorkKey([]string{"m2"})}); err != nil {
		t.Fatal(err)
	}
	if mem, _ := e.store.Memory(e.ctx, "cto"); mem.Diary != 1 {
		t.Fatalf("diary after a reflection of NOTHING has %d entries; want 1", mem.Diary)
	}
}

// Once turn_retention trimmed a turn's records, its exchange still reaches
// later rounds as the transcript has it: the trigger and the answer.
func TestTrimmedTurnRecordsReadFromTheTranscript(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, contextOrg, nil)
	model := &fakeModel{answer: func(req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		return text(fmt.Sprintf("answer %d", len(req.Messages))), nil
	}}
	e.turns.models.byProfile["local"] = model
	e.say(t, "m1", "c", "the number is 7")
	if _, err := e.store.TrimTurns(e.ctx, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	e.say(t, "m2", "c", "which number?")
	req := model.last("")
	if got, want := roles(req.Messages), "user assistant user"; got != want {
		t.Fatalf("roles = %q; want %q: %+v", got, want, req.Messages)
	}
	if !strings.Contains(req.Messages[0].Content, "the number is 7") || req.Messages[1].Content != "answer 1" {
		t.Fatalf("earlier exchange = %+v; want m1 and its recorded answer", req.Messages[:2])
	}
}

// A turn begun before triggers were recorded at BeginTurn (a seat upgraded
// mid-turn) has no place in the transcript; its round records it and goes
// on instead of failing.
func TestRoundOfATriggerMissingFromTheTranscriptRecordsIt(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, contextOrg, nil)
	model := &fakeModel{answer: func(crewlet.ModelRequest) (crewlet.ModelResponse, error) { return text("ok"), nil }}
	e.turns.models.byProfile["local"] = model
	ref := e.publish(t, "m1", "hello")
	workKey := crewlet.WorkKey([]string{"m1"})
	e.begin(t, workKey, ref)
	if _, err := e.store.TrimRetention(e.ctx, store.Retention{
		Messages: time.Nanosecond, Events: time.Hour, Diary: time.Hour, Episodes: time.Hour, Counterparties: time.Hour, Nodes: time.Hour,
		Tickets: time.Hour, Approvals: time.Hour, PersonMail: time.Hour, DiaryPerSeat: 1000,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: workKey, Round: 1}); err != nil {
		t.Fatalf("round of a trigger missing from the transcript: %v", err)
	}
	conv, err := e.store.Conversation(e.ctx, "c-m1", 0, 0)
	if err != nil || len(conv) != 1 || conv[0].ID != "m1" {
		t.Fatalf("transcript = %+v, %v; want the trigger recorded again", conv, err)
	}
}
