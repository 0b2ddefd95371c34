package turnrules

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

func TestThreads(t *testing.T) {
	chat := func(id, chatID string) crewlet.Message {
		return crewlet.Message{EventID: id, Type: crewlet.MessageChat, ChatID: chatID}
	}
	reply := crewlet.Message{EventID: "r", Type: crewlet.MessageReply}
	ticket := func(id, ticket string) crewlet.Message {
		return crewlet.Message{EventID: id, Type: crewlet.MessageTicket, Ticket: ticket}
	}
	cases := []struct {
		name        string
		batch       []crewlet.Message
		tickets     map[string]crewlet.TicketPhase
		wantThreads []int
		wantClosed  []int
	}{
		{"each message is a thread", []crewlet.Message{chat("a", ""), chat("b", "")}, nil, []int{0, 1}, nil},
		{"a reply is recorded, never answered", []crewlet.Message{reply, chat("a", "")}, nil, []int{1}, nil},
		{"a chat message delivered twice is answered once", []crewlet.Message{chat("a", "c1"), chat("b", "c1"), chat("c", "c2")}, nil, []int{0, 2}, nil},
		{"an open ticket's request is answered", []crewlet.Message{ticket("a", "t1")}, map[string]crewlet.TicketPhase{"t1": crewlet.TicketPending}, []int{0}, nil},
		{"an asking ticket's request is answered", []crewlet.Message{ticket("a", "t1")}, map[string]crewlet.TicketPhase{"t1": crewlet.TicketAsking}, []int{0}, nil},
		{"a cancelled ticket's request is closed", []crewlet.Message{ticket("a", "t1"), chat("b", "")}, map[string]crewlet.TicketPhase{"t1": crewlet.TicketCancelled}, []int{1}, []int{0}},
		{"a ticket not found is closed", []crewlet.Message{ticket("a", "t1")}, nil, nil, []int{0}},
		{"an empty batch has no thread", nil, nil, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			threads, closed := Threads(tc.batch, tc.tickets)
			if !reflect.DeepEqual(threads, tc.wantThreads) || !reflect.DeepEqual(closed, tc.wantClosed) {
				t.Fatalf("Threads: got threads %v closed %v; want threads %v closed %v", threads, closed, tc.wantThreads, tc.wantClosed)
			}
		})
	}
}

func TestTriggerTextReadsBack(t *testing.T) {
	cases := []struct {
		name     string
		m        crewlet.Message
		wantText string
		// wantFrom is the sender ParseTrigger reads back; "" when the
		// text is not a message's or a reply's.
		wantFrom string
	}{
		{"message", crewlet.Message{Type: crewlet.MessageChat, From: "ceo", Conversation: "c1", Body: "hello"},
			"Message from ceo (conversation c1):\n\nhello", "ceo"},
		{"reply", crewlet.Message{Type: crewlet.MessageReply, From: "cfo", Conversation: "c2", Body: "done"},
			"Reply from cfo to your message (conversation c2):\n\ndone", "cfo"},
		{"ticket notice", crewlet.Message{Type: crewlet.MessageTicketNotice, Ticket: "t1", Conversation: "c3", Body: "settled"},
			"Notice about your ticket t1 (conversation c3):\n\nsettled", ""},
		{"ticket request", crewlet.Message{Type: crewlet.MessageTicket, Ticket: "t2", From: "cto", Conversation: "c4", Body: "fix it"},
			crewlet.TicketRequestText(crewlet.Ticket{ID: "t2", From: "cto", Conversation: "c4", Task: "fix it"}), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := TriggerText(tc.m)
			if text != tc.wantText {
				t.Fatalf("TriggerText: got %q; want %q", text, tc.wantText)
			}
			from, body, ok := ParseTrigger(text)
			if ok != (tc.wantFrom != "") || from != tc.wantFrom {
				t.Fatalf("ParseTrigger(%q): got from %q ok %v; want from %q", text, from, ok, tc.wantFrom)
			}
			if ok && body != tc.m.Body {
				t.Fatalf("ParseTrigger(%q): got body %q; want %q", text, body, tc.m.Body)
			}
		})
	}
}

func TestSystemPrompt(t *testing.T) {
	const tail = ". Your final answer is sent to whoever wrote to you. Use the tools when you need them; a tool result that says the outcome is unknown means check before trying again."
	cases := []struct {
		name, charter, company, want string
	}{
		{"bare", "", "", "You are cto, a seat with the role engineer" + tail},
		{"at a company", "", "Acme", "You are cto, a seat with the role engineer at Acme" + tail},
		{"charter first, trimmed", "  Build things.\n", "Acme", "Build things.\n\nYou are cto, a seat with the role engineer at Acme" + tail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SystemPrompt("cto", "engineer", tc.charter, tc.company); got != tc.want {
				t.Fatalf("SystemPrompt: got %q; want %q", got, tc.want)
			}
		})
	}
}

func TestAnswerOf(t *testing.T) {
	call := []crewlet.ToolCall{{ID: "c1", Name: "recall", Args: json.RawMessage(`{}`)}}
	cases := []struct {
		name         string
		msgs         []crewlet.ChatMessage
		want         string
		wantFinished bool
	}{
		{"no messages", nil, "", false},
		{"only the trigger", []crewlet.ChatMessage{{Role: "user", Content: "hi"}}, "", false},
		{"an answer", []crewlet.ChatMessage{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}}, "hello", true},
		{"a tool call asked", []crewlet.ChatMessage{{Role: "user"}, {Role: "assistant", Content: "let me look", ToolCalls: call}}, "let me look", false},
		{"waiting on a tool result", []crewlet.ChatMessage{{Role: "assistant", ToolCalls: call}, {Role: "tool", Content: "found"}}, "", false},
		{"a note ends it", []crewlet.ChatMessage{{Role: "assistant", ToolCalls: call}, {Role: "note", Content: "stopped"}}, "stopped", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, finished := AnswerOf(tc.msgs)
			if got != tc.want || finished != tc.wantFinished {
				t.Fatalf("AnswerOf: got %q finished %v; want %q finished %v", got, finished, tc.want, tc.wantFinished)
			}
		})
	}
}

func TestClose(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	m1 := crewlet.Message{EventID: "m1", Type: crewlet.MessageChat, From: "ceo", To: "cto", Conversation: "c1", Body: "status?"}
	m2 := crewlet.Message{EventID: "m2", Type: crewlet.MessageReply, From: "cfo", To: "cto", Conversation: "c2", Body: "noted"}
	m3 := crewlet.Message{EventID: "m3", Type: crewlet.MessageChat, From: "alice", To: "cto", Conversation: "c3", Body: "ping"}
	replyTo := func(m crewlet.Message, text string) crewlet.Message {
		return crewlet.Message{EventID: "reply-" + crewlet.WorkKey([]string{"cto", m.EventID}), Type: crewlet.MessageReply,
			From: "cto", To: m.From, Conversation: m.Conversation, InReplyTo: m.EventID, Body: text, SentAt: now.UTC()}
	}
	ledger := func(ms ...crewlet.Message) []string {
		var keys []string
		for _, m := range ms {
			keys = append(keys, crewlet.LedgerKeys(m)...)
		}
		return keys
	}
	cases := []struct {
		name    string
		batch   []crewlet.Message
		replies map[int]string
		want    Closing
	}{
		{
			name: "each trigger followed by its reply", batch: []crewlet.Message{m1, m2, m3}, replies: map[int]string{0: "all good", 2: "pong"},
			want: Closing{
				Transcript: []crewlet.Message{m1, replyTo(m1, "all good"), m2, m3, replyTo(m3, "pong")},
				Ledger:     ledger(m1, m2, m3), Answered: []string{"m1", "m2", "m3"}, Replies: 2,
				Counterparties: []string{"alice", "ceo"},
				Episode:        `ceo asked "status?"; answered "all good"` + "\n" + `alice asked "ping"; answered "pong"`,
			},
		},
		{
			name: "a thread with no text has no reply but is remembered", batch: []crewlet.Message{m1}, replies: map[int]string{0: ""},
			want: Closing{
				Transcript: []crewlet.Message{m1}, Ledger: ledger(m1), Answered: []string{"m1"},
				Counterparties: []string{"ceo"}, Episode: `ceo asked "status?"; answered ""`,
			},
		},
		{
			name: "replies only", batch: []crewlet.Message{m2}, replies: map[int]string{},
			want: Closing{Transcript: []crewlet.Message{m2}, Ledger: ledger(m2), Answered: []string{"m2"}, Episode: "recorded replies only"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Close("cto", tc.batch, tc.replies, now)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Close:\ngot  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestCloseClipsLongExchanges(t *testing.T) {
	long := strings.Repeat("word ", 100)
	got := Close("cto", []crewlet.Message{{EventID: "m1", From: "ceo", Body: long}}, map[int]string{0: long}, time.Time{})
	want := `ceo asked "` + crewlet.OneLine(long, EpisodeClip) + `"; answered "` + crewlet.OneLine(long, EpisodeClip) + `"`
	if got.Episode != want {
		t.Fatalf("episode: got %q; want %q", got.Episode, want)
	}
}

func TestReflectionKept(t *testing.T) {
	cases := []struct {
		answer, want string
		kept         bool
	}{
		{"The launch moved to Friday.", "The launch moved to Friday.", true},
		{"  keep this \n", "keep this", true},
		{"", "", false},
		{"   ", "", false},
		{"Nothing", "", false},
		{"NOTHING.", "", false},
		{"nothing!", "", false},
		{"Nothing new, but the build is red.", "Nothing new, but the build is red.", true},
	}
	for _, tc := range cases {
		t.Run(tc.answer, func(t *testing.T) {
			got, kept := ReflectionKept(tc.answer)
			if got != tc.want || kept != tc.kept {
				t.Fatalf("ReflectionKept(%q): got %q kept %v; want %q kept %v", tc.answer, got, kept, tc.want, tc.kept)
			}
		})
	}
}
