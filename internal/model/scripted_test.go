package model

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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
roles: { r: { profile: local } }
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
	s := setupScripted(t, 0, nil)
	_, err := s.Chat(context.Background(), request("boom now"))
	if err == nil || !strings.Contains(err.Error(), "the model is down") {
		t.Errorf("error = %v, want the rule's failure text", err)
	}
}

func TestScriptedUsage(t *testing.T) {
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
	t.Setenv("CREWLET_SCRIPTED_PROBE", path)
	probe, err := OpenProbe("node-a")
	if err != nil || probe == nil {
		t.Fatalf("OpenProbe = %v, %v", probe, err)
	}
	s := setupScripted(t, time.Hour, probe)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Chat(ctx, request("Hello")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Chat during the delay = %v, want the context's error", err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var phases []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r ProbeRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("probe line %q: %v", sc.Text(), err)
		}
		if r.Seat != "cto" || r.EventID != "ev-1" || r.Node != "node-a" {
			t.Errorf("probe record = %+v, want seat cto, event ev-1, node node-a", r)
		}
		phases = append(phases, r.Phase)
	}
	if want := []string{"start", "end"}; !reflect.DeepEqual(phases, want) {
		t.Errorf("probe phases = %v, want %v", phases, want)
	}
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
