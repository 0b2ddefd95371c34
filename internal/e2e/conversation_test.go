package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/wire"
)

// memoryOrg's seat cto notes what it is told and, asked, says back every
// earlier message of the conversation (.History). Its profile's context is
// small, so a long conversation is compacted by the summarizer profile.
const memoryOrg = `company: { name: memco }
profiles:
  mind:
    provider: scripted
    context_tokens: %d
    compact_with: summarizer
    rules:
      - match: '^remember (.*)'
        tools: [ { name: diary_write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'Noted: {{index .Groups 1}}'
      - match: '(?i)what did I tell you'
        reply: 'You told me:{{range .History}}{{if eq .Role "user"}} [{{.Text}}]{{end}}{{end}}'
  summarizer: { provider: scripted, delay: %s }
roles:
  lead: { charter: remembers what it is told, profile: mind }
seats:
  - { handle: cto, role: lead }
`

// Three messages in one conversation: the third answer carries what the
// first said, because every round sends the conversation so far.
func TestConversationRemembersEarlierMessages(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(memoryOrg, 32000, "0s")))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	conv := "conv-" + testenv.Suffix()
	first := c.send("cto", "remember the number 7", inConversation(conv))
	if got := c.waitReply(first, 30*time.Second); got != "Noted: the number 7" {
		t.Fatalf("first reply %q; want %q", got, "Noted: the number 7")
	}
	second := c.send("cto", "remember the launch is on friday", inConversation(conv))
	c.waitReply(second, 30*time.Second)
	third := c.send("cto", "what did I tell you?", inConversation(conv))
	reply := c.waitReply(third, 30*time.Second)
	if !strings.Contains(reply, "remember the number 7") || !strings.Contains(reply, "remember the launch is on friday") {
		t.Fatalf("third reply %q; want it to carry the first two messages", reply)
	}
	if strings.Contains(reply, "what did I tell you") {
		t.Fatalf("third reply %q carries the message it answers as history", reply)
	}
	// Another conversation starts from nothing.
	other := c.send("cto", "what did I tell you?")
	if got := c.waitReply(other, 30*time.Second); got != "You told me:" {
		t.Fatalf("reply in a new conversation %q; want nothing remembered", got)
	}
	out, err := c.cli("conversation", conv)
	if err != nil {
		t.Fatalf("crewlet conversation: %v\n%s", err, out)
	}
	t.Logf("crewlet conversation %s:\n%s", conv, out)
}

// probePhases counts the probe's records by phase.
func probePhases(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r model.ProbeRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("probe line %q: %v", sc.Text(), err)
		}
		out[r.Phase]++
	}
	return out
}

// A conversation pushed past a small context_tokens is compacted once: the
// worker is killed in the middle of the summarizer's call, the round runs
// again on another node, and one summary is stored; the next two turns
// reuse it without calling the summarizer again.
func TestCompactionSurvivesAWorkerKill(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(memoryOrg, 3000, "3s")))
	probe := filepath.Join(t.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env())
	c.apiServer()
	n1 := c.worker("n1")
	c.waitAttached(30 * time.Second)

	conv := "long-" + testenv.Suffix()
	filler := strings.Repeat("more words to fill the context. ", 12)
	compactedAt := 0
	for i := 1; i <= 30 && compactedAt == 0; i++ {
		msg := c.send("cto", fmt.Sprintf("remember fact %d. %s", i, filler), inConversation(conv))
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("reply or compaction for message %d", i), func() error {
			if probePhases(t, probe)["compact_start"] > 0 {
				compactedAt = i
				return nil
			}
			if len(c.repliesTo(msg)) > 0 {
				return nil
			}
			return fmt.Errorf("neither yet")
		})
		if compactedAt == 0 {
			continue
		}
		if probePhases(t, probe)["compact_end"] != 0 {
			t.Fatal("the summarizer finished before the kill; give it a longer delay")
		}
		n1.kill(t)
		c.worker("n2")
		c.waitReply(msg, 60*time.Second)
	}
	// The round runs again on n2; the old tenure's retry of it may race the
	// new tenure's for a moment, so more than one call may finish, but one
	// summary is stored.
	recovered := probePhases(t, probe)
	if compactedAt == 0 {
		t.Fatal("30 messages never outgrew a 3000-token context")
	}
	for i := compactedAt + 1; i <= compactedAt+2; i++ {
		c.waitReply(c.send("cto", fmt.Sprintf("remember fact %d. %s", i, filler), inConversation(conv)), 30*time.Second)
	}
	reply := c.waitReply(c.send("cto", "what did I tell you?", inConversation(conv)), 30*time.Second)
	phases := probePhases(t, probe)
	if recovered["compact_start"] < 2 || recovered["compact_end"] < 1 {
		t.Fatalf("summarizer calls by the recovered reply: %d started, %d ended; want the killed one and at least one finished", recovered["compact_start"], recovered["compact_end"])
	}
	if phases["compact_start"] != recovered["compact_start"] {
		t.Fatalf("the summarizer was called %d more times in the three turns after the summary; want none (reused)", phases["compact_start"]-recovered["compact_start"])
	}
	summaries := c.conversation(conv)[0].Summaries
	if len(summaries) != 1 {
		t.Fatalf("%d summaries stored; want 1: %+v", len(summaries), summaries)
	}
	s := summaries[0]
	if s.Seat != "cto" || s.Profile != "summarizer" || !strings.Contains(s.Text, "remember fact 1.") {
		t.Fatalf("summary = %+v; want cto's, by the summarizer, keeping fact 1", s)
	}
	// The model reads the summary in place of the exchanges it covers.
	if !strings.Contains(reply, "Summary of the earlier part of this conversation") || strings.Count(reply, "[Message from") > 4 {
		t.Fatalf("last reply %q; want the summary and only the exchanges after it", reply)
	}
	out, err := c.cli("conversation", conv)
	if err != nil || !strings.Contains(out, "[compaction summary by cto (profile summarizer)") {
		t.Fatalf("crewlet conversation: %v\n%s", err, out)
	}
	t.Logf("compacted at message %d; summary covers %d exchanges through %s: %s", compactedAt, s.Covered, s.ThroughID, s.Text)
}

// A model that answers nothing, twice, is not silent: the sender gets a
// note, the turn is recorded failed and acked, the seat's last_error says so
// (also in `crewlet seats show`) and its events name the trigger, until a
// turn succeeds.
func TestEmptyAnswerIsNotSilent(t *testing.T) {
	org := `company: { name: quietco }
profiles:
  mute:
    provider: scripted
    rules:
      - { match: '^silence', reply: '{{if false}}never{{end}}' }
roles:
  lead: { charter: says nothing when asked for silence, profile: mute }
seats:
  - { handle: cto, role: lead }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	msg := c.send("cto", "silence please")
	if reply := c.waitReply(msg, 30*time.Second); !strings.HasPrefix(reply, "No answer was produced") {
		t.Fatalf("reply %q; want the no-answer note", reply)
	}
	var st crewlet.SeatState
	testenv.Eventually(t, 20*time.Second, "last_error set", func() error {
		if st = c.state("cto"); !strings.Contains(st.LastError, "No answer was produced") {
			return fmt.Errorf("last_error %q", st.LastError)
		}
		return nil
	})
	if want := crewlet.TurnWorkflowID("cto", crewlet.WorkKey([]string{msg.EventID})); st.FailedTurn != want {
		t.Errorf("failed_turn %q; want %q", st.FailedTurn, want)
	}
	turns, err := c.store().SeatTurns(context.Background(), "cto", 5)
	if err != nil || len(turns) != 1 || turns[0].Status != string(crewlet.TurnFailed) || !strings.HasPrefix(turns[0].Note, "No answer was produced") {
		t.Fatalf("turns = %+v, %v; want one recorded failed with the reason", turns, err)
	}
	var events []wire.SeatEvent
	if err := c.call(http.MethodGet, "/seats/cto/events", nil, &events); err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[0].Kind != "turn_trigger_failed" || events[0].EventID != msg.EventID {
		t.Fatalf("events = %+v; want turn_trigger_failed for %s", events, msg.EventID)
	}
	out, err := c.cli("seats", "show", "cto")
	if err != nil || !strings.Contains(out, `"last_error": "turn failed: No answer was produced`) {
		t.Fatalf("crewlet seats show: %v\n%s", err, out)
	}
	if pending, err := c.mailbox().Pending(context.Background(), "cto"); err != nil || pending != 0 {
		t.Fatalf("pending entries %d, %v; want the failed turn's trigger acked", pending, err)
	}

	c.waitReply(c.send("cto", "hello"), 30*time.Second)
	testenv.Eventually(t, 20*time.Second, "last_error cleared by a good turn", func() error {
		if st := c.state("cto"); st.LastError != "" || st.FailedTurn != "" {
			return fmt.Errorf("last_error %q, failed_turn %q", st.LastError, st.FailedTurn)
		}
		return nil
	})
}

// With reflect on, a worker killed after the reflection's model call and
// before its diary write: the turn re-runs on another node, the reflection
// is asked again and written once, and the trigger was answered once.
func TestReflectionAfterAKillWritesOnce(t *testing.T) {
	org := `company: { name: thinkco }
profiles:
  mind: { provider: scripted }
roles:
  lead: { charter: reflects, profile: mind, reflect: true }
seats:
  - { handle: cto, role: lead }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	probe := filepath.Join(t.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env())
	c.apiServer()
	crashing := c.workerWithEnv("n1", []string{testhook.Hooks{CrashAt: testhook.AfterReflectionModel, CrashSeat: "cto"}.Env()})
	c.waitAttached(30 * time.Second)

	msg := c.send("cto", "the launch moved to friday")
	if code := crashing.wait(t, 30*time.Second); code == 0 {
		t.Fatal("worker exited 0; want it killed after the reflection's model call")
	}
	c.worker("n2")
	if reply := c.waitReply(msg, 60*time.Second); reply != "[cto] the launch moved to friday" {
		t.Fatalf("reply %q", reply)
	}
	var mem api.MemoryView
	testenv.Eventually(t, 30*time.Second, "reflection in the diary", func() error {
		if err := c.call(http.MethodGet, "/seats/cto/memory?kind=diary", nil, &mem); err != nil {
			return err
		}
		if mem.Diary == nil || len(mem.Diary.Items) == 0 {
			return fmt.Errorf("diary empty")
		}
		return nil
	})
	if len(mem.Diary.Items) != 1 || !strings.Contains(mem.Diary.Items[0].Content, "the launch moved to friday") ||
		mem.Diary.Items[0].WorkKey != crewlet.WorkKey([]string{msg.EventID}) {
		t.Fatalf("diary = %+v; want one reflection keyed on the turn's work", mem.Diary.Items)
	}
	if got := probePhases(t, probe)["reflect_start"]; got != 2 {
		t.Fatalf("reflection asked %d times; want 2 (the killed one, then the re-run)", got)
	}
	if replies := c.repliesTo(msg); len(replies) != 1 {
		t.Fatalf("replies %v; want one", replies)
	}
}
