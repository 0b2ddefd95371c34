package model

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// scriptedOrg is parsed by the config package, as a real org file is, so the
// tests see what viper and the config loader make of the rules.
const scriptedOrg = `
company: { name: acme }
profiles:
  local:
    provider: scripted
    rules:
      - match: '^boom'
        fail: 'the model is down'
      - match: '(?i)^read (\S+) and (\S+)'
        tools:
          - name: fs__read_file
            args: { filePath: "/srv/{{index .Groups 1}}", opts: { maxBytes: 64, asker: "{{.From}}" }, tags: [ "{{.Handle}}", 7 ] }
          - name: fs__stat
            args: { filePath: "/srv/{{index .Groups 2}}" }
        reply: '{{len .Results}} results; file: {{index .Tools "fs__read_file"}}; stat: {{.Tools.fs__stat}}; first: {{index .Results 0}}'
      - match: '(?i)^hello'
        reply: 'Hello {{.From}}, {{.Handle}} ({{.Role}}) here in {{.Conversation}}.'
      - match: '(?i)what number'
        reply: 'heard: {{range .History}}{{if eq .Role "user"}}{{.Text}}|{{end}}{{end}} said: {{range .History}}{{if eq .Role "assistant"}}{{.Text}}|{{end}}{{end}} ({{len .History}})'
roles: { r: { charter: works as r, profile: local } }
seats: [ { handle: cto, role: r } ]
`

func setupScripted(t *testing.T, delay time.Duration, probe *Probe) *Scripted {
	t.Helper()
	c, err := config.Parse([]byte(scriptedOrg))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p := c.Profiles["local"]
	p.Delay = delay
	s, err := NewScripted(p, probe)
	if err != nil {
		t.Fatalf("NewScripted: %v", err)
	}
	return s
}

func trigger(body string) *crewlet.Message {
	return &crewlet.Message{EventID: "ev-1", From: "alice", Conversation: "conv-9", Body: body}
}

func request(body string, msgs ...crewlet.ChatMessage) crewlet.ModelRequest {
	return crewlet.ModelRequest{
		Seat: "cto", Role: "executive", Trigger: trigger(body), System: "You are the CTO.",
		Messages: append([]crewlet.ChatMessage{{Role: "user", Content: body}}, msgs...),
	}
}

func TestScriptedToolRoundTrip(t *testing.T) {
	t.Parallel()
	s := setupScripted(t, 0, nil)
	ctx := context.Background()
	const body = "read a.txt and b.txt"

	// First round: the rule asks for its tools, arguments filled in, keys
	// in the case they were written.
	resp, err := s.Chat(ctx, request(body))
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if resp.Text != "" || len(resp.ToolCalls) != 2 {
		t.Fatalf("response = %+v, want two tool calls and no text", resp)
	}
	wantArgs := []map[string]any{
		{"filePath": "/srv/a.txt", "opts": map[string]any{"maxBytes": 64.0, "asker": "alice"}, "tags": []any{"cto", 7.0}},
		{"filePath": "/srv/b.txt"},
	}
	for i, c := range resp.ToolCalls {
		if want := []string{"call_1", "call_2"}[i]; c.ID != want {
			t.Errorf("call %d id = %q, want %q", i, c.ID, want)
		}
		if want := []string{"fs__read_file", "fs__stat"}[i]; c.Name != want {
			t.Errorf("call %d name = %q, want %q", i, c.Name, want)
		}
		var got map[string]any
		if err := json.Unmarshal(c.Args, &got); err != nil || !reflect.DeepEqual(got, wantArgs[i]) {
			t.Errorf("call %d args = %s, want %v", i, c.Args, wantArgs[i])
		}
	}

	// Second round: the results are in, so the rule replies with them.
	// Results are answered out of order; names come from the call ids.
	history := []crewlet.ChatMessage{
		{Role: "assistant", ToolCalls: resp.ToolCalls},
		{Role: "tool", ToolCallID: "call_2", Content: "12 bytes"},
		{Role: "tool", ToolCallID: "call_1", Content: "hello world!", IsError: false},
	}
	resp, err = s.Chat(ctx, request(body, history...))
	if err != nil {
		t.Fatalf("Chat with results: %v", err)
	}
	if want := "2 results; file: hello world!; stat: 12 bytes; first: 12 bytes"; resp.Text != want || resp.ToolCalls != nil {
		t.Errorf("response = %+v, want text %q", resp, want)
	}

	// A new user message starts over: the earlier exchange does not count.
	next := append(append([]crewlet.ChatMessage{{Role: "user", Content: body}}, history...),
		crewlet.ChatMessage{Role: "assistant", Content: "done"},
		crewlet.ChatMessage{Role: "user", Content: "read c and d"})
	resp, err = s.Chat(ctx, crewlet.ModelRequest{Seat: "cto", Trigger: trigger("read c and d"), Messages: next})
	if err != nil {
		t.Fatalf("Chat after a new user message: %v", err)
	}
	if len(resp.ToolCalls) != 2 || !strings.Contains(string(resp.ToolCalls[0].Args), "/srv/c") {
		t.Errorf("response = %+v, want the tools called again for c", resp)
	}
}

func TestScriptedReplies(t *testing.T) {
	t.Parallel()
	s := setupScripted(t, 0, nil)
	tests := []struct {
		name string
		req  crewlet.ModelRequest
		want string
	}{
		{"template data", request("Hello there"), "Hello alice, cto (executive) here in conv-9."},
		{"no match echoes", request("what is up"), "[cto] what is up"},
		{
			"no trigger matches the last user message",
			crewlet.ModelRequest{Seat: "cto", Messages: []crewlet.ChatMessage{
				{Role: "user", Content: "what is up"}, {Role: "assistant", Content: "?"}, {Role: "user", Content: "hello again"},
			}},
			"Hello , cto () here in .",
		},
		{"no trigger nor messages", crewlet.ModelRequest{Seat: "cto"}, "[cto] "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Chat(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if resp.Text != tt.want || resp.ToolCalls != nil {
				t.Errorf("response = %+v, want text %q", resp, tt.want)
			}
		})
	}
}

func TestScriptedFail(t *testing.T) {
	t.Parallel()
	s := setupScripted(t, 0, nil)
	_, err := s.Chat(context.Background(), request("boom now"))
	if err == nil || !strings.Contains(err.Error(), "the model is down") {
		t.Errorf("error = %v, want the rule's failure text", err)
	}
}

func TestScriptedUsage(t *testing.T) {
	t.Parallel()
	s := setupScripted(t, 0, nil)
	ctx := context.Background()
	tests := []struct {
		name     string
		req      crewlet.ModelRequest
		in, out  int64
		toolCall bool
	}{
		// "You are the CTO." (16) + "Hello there" (11) = 27 bytes in; the
		// reply is 44 bytes.
		{"reply", request("Hello there"), 27 / 4, 44 / 4, false},
		// the echo "[cto] hi" is 8 bytes; 16+2 bytes in.
		{"echo", request("hi"), 18 / 4, 2, false},
		// nothing in, one byte out: at least 1 each.
		{"floor of one", crewlet.ModelRequest{Seat: "c", Messages: []crewlet.ChatMessage{{Role: "user", Content: ""}}}, 1, 1, false},
		// 16 + 20 bytes in; out is the bytes of both calls' arguments.
		{"tool calls", request("read a.txt and b.txt"), 36 / 4, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Chat(ctx, tt.req)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			out := tt.out
			if tt.toolCall {
				var n int
				for _, c := range resp.ToolCalls {
					n += len(c.Args)
				}
				out = int64(n / 4)
			}
			if want := (crewlet.Usage{InputTokens: tt.in, OutputTokens: out}); resp.Usage != want {
				t.Errorf("usage = %+v, want %+v (text %q)", resp.Usage, want, resp.Text)
			}
		})
	}

	// Tool results count as input.
	resp, err := s.Chat(ctx, request("Hello there", crewlet.ChatMessage{Role: "tool", ToolCallID: "x", Content: strings.Repeat("r", 400)}))
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if want := int64((27 + 400) / 4); resp.Usage.InputTokens != want {
		t.Errorf("input tokens with a tool result = %d, want %d", resp.Usage.InputTokens, want)
	}
}

func TestScriptedDelayAndProbe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probe.jsonl")
	probe, err := OpenProbe(path, "node-a")
	if err != nil || probe == nil {
		t.Fatalf("OpenProbe = %v, %v", probe, err)
	}
	s := setupScripted(t, time.Hour, probe)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Chat(ctx, request("Hello")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Chat during the delay = %v, want the context's error", err)
	}

	var phases []string
	for _, r := range readProbe(t, path) {
		if r.Seat != "cto" || r.EventID != "ev-1" || r.Node != "node-a" {
			t.Errorf("probe record = %+v, want seat cto, event ev-1, node node-a", r)
		}
		phases = append(phases, r.Phase)
	}
	if want := []string{"start", "end"}; !reflect.DeepEqual(phases, want) {
		t.Errorf("probe phases = %v, want %v", phases, want)
	}
}

func readProbe(t *testing.T, path string) []ProbeRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []ProbeRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r ProbeRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("probe line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read probe: %v", err)
	}
	return out
}

func TestNew(t *testing.T) {
	const key = "sk-from-env-0123456789SECRET"
	f := newFakeProvider(t, reply{status: 200, body: oaiText("pong", 3, 1)})
	t.Setenv("CREWLET_TEST_MODEL_KEY", key)

	m, err := New("gpt", config.Profile{Provider: "openai", BaseURL: f.URL + "/v1", Model: "m", APIKeyEnv: "CREWLET_TEST_MODEL_KEY", MaxTokens: 99}, nil)
	if err != nil {
		t.Fatalf("New(openai): %v", err)
	}
	resp, err := m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "ping"}}})
	if err != nil || resp.Text != "pong" {
		t.Fatalf("Chat = %+v, %v; want pong", resp, err)
	}
	got := f.only(t)
	if h := got.header.Get("Authorization"); h != "Bearer "+key {
		t.Errorf("Authorization = %q, want the key from CREWLET_TEST_MODEL_KEY", h)
	}
	if body := decodeBody[oaiRequest](t, got); body.MaxTokens == nil || *body.MaxTokens != 99 {
		t.Errorf("max_tokens = %v, want the profile's 99", body.MaxTokens)
	}

	if m, err := New("claude", config.Profile{Provider: "anthropic", Model: "m", APIKeyEnv: "CREWLET_TEST_MODEL_KEY"}, nil); err != nil {
		t.Errorf("New(anthropic): %v", err)
	} else if _, ok := m.(*Anthropic); !ok {
		t.Errorf("New(anthropic) = %T, want *Anthropic", m)
	}
	if m, err := New("local", config.Profile{Provider: "scripted"}, nil); err != nil {
		t.Errorf("New(scripted): %v", err)
	} else if _, ok := m.(*Scripted); !ok {
		t.Errorf("New(scripted) = %T, want *Scripted", m)
	}

	t.Setenv("CREWLET_TEST_EMPTY_KEY", "")
	failures := []struct {
		name string
		p    config.Profile
		want string
	}{
		{"key unset", config.Profile{Provider: "anthropic", Model: "m", APIKeyEnv: "CREWLET_TEST_EMPTY_KEY"},
			"profile bad: invalid: environment variable CREWLET_TEST_EMPTY_KEY is not set or empty; export the API key in it"},
		{"bad base URL", config.Profile{Provider: "openai", Model: "m", BaseURL: "localhost", APIKeyEnv: "CREWLET_TEST_MODEL_KEY"},
			`profile bad: invalid: openai: base URL "localhost" is not an http(s) URL`},
		{"no model", config.Profile{Provider: "anthropic", APIKeyEnv: "CREWLET_TEST_MODEL_KEY"},
			"profile bad: invalid: anthropic: model is required"},
		{"unknown provider", config.Profile{Provider: "gemini"},
			`profile bad: invalid: unsupported provider "gemini"; supported providers: anthropic, openai, scripted`},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New("bad", tt.p, nil)
			if err == nil || err.Error() != tt.want {
				t.Errorf("New = %v, want %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), key) {
				t.Errorf("error leaks the key: %v", err)
			}
			if code := crewlet.ErrorCode(err); code != crewlet.EINVALID {
				t.Errorf("error code = %q, want %q", code, crewlet.EINVALID)
			}
		})
	}
}

func TestScriptedHistory(t *testing.T) {
	t.Parallel()
	s := setupScripted(t, 0, nil)
	sum := histSummaryValue()
	earlier := "heard: " + crewlet.SummaryMessage(sum).Content + "|" + histExchange1 + "|" + histReply + "| said: Noted: 7| (4)"
	tests := []struct {
		name string
		req  crewlet.ModelRequest
		want string
	}{
		{"first message has none", request(histCurrent), "heard:  said:  (0)"},
		// The summary and the earlier user messages in order, the
		// assistant's answers with text; not the message being answered.
		{"earlier exchanges", histRequest(t, &sum, histEarlier()), earlier},
		// A round of the current thread is not history: its text answer
		// and tool result come after the message being answered.
		{"mid-turn round", histRequest(t, &sum, histEarlier(),
			crewlet.ChatMessage{Role: "assistant", Content: "Let me check the diary.", ToolCalls: []crewlet.ToolCall{{ID: "call_1", Name: "diary_read", Args: json.RawMessage(`{}`)}}},
			crewlet.ChatMessage{Role: "tool", ToolCallID: "call_1", Content: "7"},
		), earlier},
		// A synthetic result for a call that broke is no message of
		// the conversation, nor is an answer made only of tool calls.
		{"broken earlier exchange", histRequest(t, nil, histBrokenEarlier()), "heard: " + histBroken + "| said:  (1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Chat(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if resp.Text != tt.want || resp.ToolCalls != nil {
				t.Errorf("reply:\n got  %q\n want %q", resp.Text, tt.want)
			}
		})
	}
}

// compactionExchanges are histEarlier, an exchange whose trigger the
// "what number" rule would answer, and one with a long tool result.
func compactionExchanges() []crewlet.Exchange {
	return append(histEarlier(),
		crewlet.Exchange{MessageID: "m-3", Seq: 4, Messages: []crewlet.ChatMessage{
			{Role: "user", Content: "Message from operator (conversation c-1):\n\n" + histCurrent},
			{Role: "assistant", Content: "You gave me 7."},
		}},
		crewlet.Exchange{MessageID: "m-4", Seq: 5, Messages: []crewlet.ChatMessage{
			{Role: "user", Content: "Message from operator (conversation c-1):\n\nread the build log"},
			{Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "call_1", Name: "fs__read_file", Args: json.RawMessage(`{"filePath":"/srv/build.log"}`)}}},
			{Role: "tool", ToolCallID: "call_1", Content: strings.Repeat("compiling package ok\n", 300)},
			{Role: "assistant", Content: "The build passed."},
		}},
	)
}

// longConversation is histEarlier followed by n more exchanges.
func longConversation(n int) []crewlet.Exchange {
	xs := histEarlier()
	for i := range n {
		xs = append(xs, crewlet.Exchange{MessageID: fmt.Sprintf("m-%d", 10+i), Seq: int64(10 + i), Messages: []crewlet.ChatMessage{
			{Role: "user", Content: fmt.Sprintf("Message from operator (conversation c-1):\n\nstatus of item %d, please, with all the details you have on it", i)},
			{Role: "assistant", Content: fmt.Sprintf("Item %d is on track; the supplier confirmed delivery for next week and the invoice is paid.", i)},
		}})
	}
	return xs
}

func compactionRequest(prev *crewlet.ConversationSummary, exchanges []crewlet.Exchange) crewlet.ModelRequest {
	return crewlet.ModelRequest{
		Seat: "cto", Purpose: crewlet.PurposeCompact, System: crewlet.CompactionSystem,
		Messages: []crewlet.ChatMessage{{Role: "user", Content: crewlet.CompactionPrompt(prev, exchanges, 16000)}},
	}
}

func TestScriptedCompaction(t *testing.T) {
	t.Parallel()
	s := setupScripted(t, 0, nil)
	prev := histSummaryValue()
	tests := []struct {
		name string
		req  crewlet.ModelRequest
		// keep are texts the summary must hold, in this order.
		keep []string
	}{
		{"first summary", compactionRequest(nil, compactionExchanges()), []string{
			"remember the number 7", "Noted: 7", "budget approved", "You gave me 7.", "The build passed.",
		}},
		{"folds in the previous summary", compactionRequest(&prev, compactionExchanges()[1:]), []string{
			"The operator is Dana", "budget approved", "The build passed.",
		}},
		// However long the conversation grew, the summary stays short and
		// the oldest fact is in it.
		{"long conversation", compactionRequest(nil, longConversation(60)), []string{"remember the number 7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prompt := tt.req.Messages[0].Content
			resp, err := s.Chat(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			got := resp.Text
			if !strings.HasPrefix(got, "Earlier: ") || resp.ToolCalls != nil {
				t.Fatalf("response = %+v, want a scripted summary, not a rule's reply", resp)
			}
			rest := got
			for _, k := range tt.keep {
				i := strings.Index(rest, k)
				if i < 0 {
					t.Fatalf("summary %q lacks %q (or has it out of order)", got, k)
				}
				rest = rest[i+len(k):]
			}
			if len(got) >= len(prompt) || strings.Contains(got, strings.Repeat("compiling package ok ", 10)) {
				t.Errorf("summary is %d bytes from a %d-byte prompt, want it shorter and the long result clipped: %q", len(got), len(prompt), got)
			}
			if len(prompt) > 10000 && len(got) > len(prompt)/10 {
				t.Errorf("summary is %d bytes from a %d-byte prompt, want a tenth at most", len(got), len(prompt))
			}
			if want := tokens(len(crewlet.CompactionSystem) + len(prompt)); resp.Usage.InputTokens != want {
				t.Errorf("input tokens = %d, want %d: the prompt counts against the budget", resp.Usage.InputTokens, want)
			}
			again, err := s.Chat(context.Background(), tt.req)
			if err != nil || again.Text != got {
				t.Errorf("second summary = %q, %v; want the same %q", again.Text, err, got)
			}
		})
	}
}

// reflectionRequest is a post-turn reflection as a turn asks it: the turn's
// threads as earlier exchanges, then the reflection prompt.
func reflectionRequest(t *testing.T, threads ...crewlet.Exchange) crewlet.ModelRequest {
	t.Helper()
	plan := crewlet.AssembleContext(crewlet.ContextInput{
		System:  histSystem,
		Earlier: threads,
		Current: []crewlet.ChatMessage{{Role: "user", Content: crewlet.ReflectionPrompt}},
		Budget:  100000,
	})
	if plan.Compact != 0 || plan.Oversize || len(plan.Messages) == 0 {
		t.Fatalf("AssembleContext = %+v, want the turn sent whole", plan)
	}
	return crewlet.ModelRequest{Seat: "cto", Role: "executive", Purpose: crewlet.PurposeReflect, System: histSystem, Messages: plan.Messages}
}

func TestScriptedReflection(t *testing.T) {
	t.Parallel()
	s := setupScripted(t, 0, nil)
	tests := []struct {
		name    string
		threads []crewlet.Exchange
		want    string
	}{
		// Only the sender of a trigger's "Message from ..." header is kept.
		{"one thread", histEarlier()[:1], "Worth keeping: operator: remember the number 7"},
		// The "what number" rule would answer this trigger in a turn; a
		// reflection never goes to the rules.
		{"two threads", append(histEarlier()[:1], crewlet.Exchange{MessageID: "m-5", Messages: []crewlet.ChatMessage{
			{Role: "user", Content: "Message from cfo (conversation c-2):\n\n" + histCurrent},
			{Role: "assistant", Content: "7."},
		}}), "Worth keeping: operator: remember the number 7 / cfo: " + histCurrent},
		{"long message clipped", []crewlet.Exchange{{MessageID: "m-6", Messages: []crewlet.ChatMessage{
			{Role: "user", Content: strings.Repeat("é", scriptedSummaryLine+50)},
			{Role: "assistant", Content: "ok"},
		}}}, "Worth keeping: " + strings.Repeat("é", scriptedSummaryLine) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Chat(context.Background(), reflectionRequest(t, tt.threads...))
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if resp.Text != tt.want || resp.ToolCalls != nil {
				t.Errorf("reflection:\n got  %q\n want %q", resp.Text, tt.want)
			}
		})
	}
}

func TestScriptedProbePurposes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probe.jsonl")
	probe, err := OpenProbe(path, "node-b")
	if err != nil || probe == nil {
		t.Fatalf("OpenProbe = %v, %v", probe, err)
	}
	s := setupScripted(t, 0, probe)
	ctx := context.Background()
	for _, req := range []crewlet.ModelRequest{
		request("Hello"),
		compactionRequest(nil, histEarlier()),
		reflectionRequest(t, histEarlier()[:1]...),
	} {
		if _, err := s.Chat(ctx, req); err != nil {
			t.Fatalf("Chat(purpose %q): %v", req.Purpose, err)
		}
	}

	var got []string
	for _, r := range readProbe(t, path) {
		if r.Seat != "cto" || r.Node != "node-b" || r.At.IsZero() {
			t.Errorf("probe record = %+v, want seat cto, node node-b, a time", r)
		}
		got = append(got, r.Phase+"@"+r.EventID)
	}
	// Only a turn's round has a trigger to name.
	want := []string{"start@ev-1", "end@ev-1", "compact_start@", "compact_end@", "reflect_start@", "reflect_end@"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("probe phases = %v, want %v", got, want)
	}
}
