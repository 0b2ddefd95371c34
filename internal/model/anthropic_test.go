package model

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// antRequest is the part of a Messages API request the tests check.
type antRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	System    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"system"`
	Messages []struct {
		Role    string `json:"role"`
		Content []struct {
			Type      string          `json:"type"`
			Text      string          `json:"text"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			IsError   bool            `json:"is_error"`
			Content   []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"input_schema"`
	} `json:"tools"`
}

func newTestAnthropic(t *testing.T, f *fakeProvider, maxTokens int) *Anthropic {
	t.Helper()
	m, err := NewAnthropic(AnthropicOptions{BaseURL: f.URL, Model: "claude-test", APIKey: testKey, HTTPClient: f.Client(), MaxTokens: maxTokens})
	if err != nil {
		t.Fatalf("NewAnthropic: %v", err)
	}
	return m
}

func antMessage(stop string, content ...map[string]any) string {
	b, _ := json.Marshal(map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 20, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 3},
	})
	return string(b)
}

func TestAnthropicText(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t, reply{status: 200, body: antMessage("end_turn",
		map[string]any{"type": "text", "text": "Hello, "},
		map[string]any{"type": "text", "text": "board."},
	)})
	m := newTestAnthropic(t, f, 0)

	resp, err := m.Chat(context.Background(), crewlet.ModelRequest{
		System:   "You are the CFO.",
		Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}},
	})
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if resp.Text != "Hello, board." || len(resp.ToolCalls) != 0 {
		t.Errorf("response = %+v, want text %q", resp, "Hello, board.")
	}
	if resp.Usage != (crewlet.Usage{InputTokens: 123, OutputTokens: 5, CachedTokens: 100}) {
		t.Errorf("usage = %+v, want {123 5 100}: cached prompt tokens count as input, the cache reads as cached too", resp.Usage)
	}

	r := f.only(t)
	if r.method != http.MethodPost || r.path != "/v1/messages" {
		t.Errorf("request = %s %s, want POST /v1/messages", r.method, r.path)
	}
	if got := r.header.Get("X-Api-Key"); got != testKey {
		t.Errorf("x-api-key = %q, want the key", got)
	}
	if got := r.header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none: Anthropic takes x-api-key", got)
	}
	if r.header.Get("Anthropic-Version") == "" {
		t.Error("anthropic-version header is missing")
	}
	body := decodeBody[antRequest](t, r)
	if body.Model != "claude-test" || body.MaxTokens != anthropicDefaultMaxTokens {
		t.Errorf("model=%q max_tokens=%d, want claude-test and the default %d", body.Model, body.MaxTokens, anthropicDefaultMaxTokens)
	}
	if len(body.System) != 1 || body.System[0].Text != "You are the CFO." {
		t.Errorf("system = %+v, want the system prompt", body.System)
	}
	if len(body.Messages) != 1 || body.Messages[0].Role != "user" ||
		len(body.Messages[0].Content) != 1 || body.Messages[0].Content[0].Text != "hi" {
		t.Errorf("messages = %s, want one user text", r.body)
	}
}

func TestAnthropicMaxTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		option    int
		request   int
		wantInReq int
	}{
		{"profile cap", 1000, 0, 1000},
		{"request cap wins", 1000, 77, 77},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProvider(t, reply{status: 200, body: antMessage("end_turn", map[string]any{"type": "text", "text": "ok"})})
			m := newTestAnthropic(t, f, tc.option)
			if _, err := m.Chat(context.Background(), crewlet.ModelRequest{
				Messages: []crewlet.ChatMessage{{Role: "user", Content: "x"}}, MaxTokens: tc.request,
			}); err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if got := decodeBody[antRequest](t, f.only(t)).MaxTokens; got != tc.wantInReq {
				t.Errorf("max_tokens = %d, want %d", got, tc.wantInReq)
			}
		})
	}
}

func TestAnthropicToolRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t,
		reply{status: 200, body: antMessage("tool_use",
			map[string]any{"type": "text", "text": "Checking both."},
			map[string]any{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": map[string]any{"city": "Oslo"}},
			map[string]any{"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": map[string]any{"city": "Bergen"}},
		)},
		reply{status: 200, body: antMessage("end_turn", map[string]any{"type": "text", "text": "Oslo 3°C; Bergen unknown."})},
	)
	m := newTestAnthropic(t, f, 0)
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`)
	req := crewlet.ModelRequest{
		System:   "sys",
		Messages: []crewlet.ChatMessage{{Role: "user", Content: "weather in Oslo and Bergen?"}},
		Tools:    []crewlet.ToolSpec{{Name: "get_weather", Description: "Current weather", Schema: schema}},
	}

	first, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatalf("first Chat: %v", err)
	}
	if first.Text != "Checking both." || len(first.ToolCalls) != 2 {
		t.Fatalf("response = %+v, want text and two tool calls", first)
	}
	for i, want := range []struct{ id, args string }{{"toolu_1", `{"city":"Oslo"}`}, {"toolu_2", `{"city":"Bergen"}`}} {
		c := first.ToolCalls[i]
		if c.ID != want.id || c.Name != "get_weather" || string(c.Args) != want.args {
			t.Errorf("tool call %d = {%s %s %s}, want {%s get_weather %s}", i, c.ID, c.Name, c.Args, want.id, want.args)
		}
	}

	req.Messages = append(req.Messages,
		crewlet.ChatMessage{Role: "assistant", Content: first.Text, ToolCalls: first.ToolCalls},
		crewlet.ChatMessage{Role: "tool", ToolCallID: "toolu_1", Content: "3°C"},
		crewlet.ChatMessage{Role: "tool", ToolCallID: "toolu_2", Content: "station offline", IsError: true},
	)
	second, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatalf("second Chat: %v", err)
	}
	if second.Text != "Oslo 3°C; Bergen unknown." || len(second.ToolCalls) != 0 {
		t.Errorf("final response = %+v, want the text answer", second)
	}

	got := f.requests()
	if len(got) != 2 {
		t.Fatalf("server got %d requests, want 2", len(got))
	}
	b1 := decodeBody[antRequest](t, got[0])
	if len(b1.Tools) != 1 || b1.Tools[0].Name != "get_weather" || b1.Tools[0].Description != "Current weather" {
		t.Fatalf("tools = %s, want get_weather", got[0].body)
	}
	gotSchema, _ := json.Marshal(b1.Tools[0].InputSchema)
	if string(gotSchema) != `{"additionalProperties":false,"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}` {
		t.Errorf("input_schema = %s, want the tool's schema", gotSchema)
	}

	b2 := decodeBody[antRequest](t, got[1])
	if len(b2.Messages) != 3 {
		t.Fatalf("second request has %d messages, want user, assistant, one user with both results: %s", len(b2.Messages), got[1].body)
	}
	asst := b2.Messages[1]
	if asst.Role != "assistant" || len(asst.Content) != 3 ||
		asst.Content[0].Type != "text" || asst.Content[0].Text != "Checking both." ||
		asst.Content[1].Type != "tool_use" || asst.Content[1].ID != "toolu_1" || asst.Content[1].Name != "get_weather" ||
		string(asst.Content[1].Input) != `{"city":"Oslo"}` ||
		asst.Content[2].Type != "tool_use" || asst.Content[2].ID != "toolu_2" {
		t.Errorf("assistant message = %+v, want text then both tool_use blocks", asst)
	}
	results := b2.Messages[2]
	if results.Role != "user" || len(results.Content) != 2 {
		t.Fatalf("results message = %+v, want one user message with two tool_result blocks", results)
	}
	r1, r2 := results.Content[0], results.Content[1]
	if r1.Type != "tool_result" || r1.ToolUseID != "toolu_1" || r1.IsError ||
		len(r1.Content) != 1 || r1.Content[0].Text != "3°C" {
		t.Errorf("first result = %+v, want toolu_1 = 3°C", r1)
	}
	if r2.Type != "tool_result" || r2.ToolUseID != "toolu_2" || !r2.IsError ||
		len(r2.Content) != 1 || r2.Content[0].Text != "station offline" {
		t.Errorf("second result = %+v, want toolu_2 marked is_error", r2)
	}
}

func TestAnthropicIgnoresEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	f := newFakeProvider(t, reply{status: 200, body: antMessage("end_turn", map[string]any{"type": "text", "text": "ok"})})
	m, err := NewAnthropic(AnthropicOptions{BaseURL: f.URL, Model: "claude-test", APIKey: testKey, HTTPClient: f.Client()})
	if err != nil {
		t.Fatalf("NewAnthropic: %v", err)
	}
	if _, err := m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "x"}}}); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if got := f.only(t).header.Get("X-Api-Key"); got != testKey {
		t.Errorf("x-api-key = %q, want the profile's key", got)
	}
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	antErr := func(typ, msg string) string {
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
		return string(b)
	}
	cases := []errorCase{
		{
			name:  "rate limited with Retry-After",
			reply: reply{status: 429, header: map[string]string{"Retry-After": "12"}, body: antErr("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")},
			kind:  crewlet.ProviderRateLimited, status: 429, retryAfter: 12 * time.Second, message: "rate_limit_error: Number of request tokens",
		},
		{
			name:  "credit balance exhausted",
			reply: reply{status: 400, body: antErr("invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.")},
			kind:  crewlet.ProviderExhausted, status: 400, message: "credit balance is too low",
		},
		{
			name:  "overloaded",
			reply: reply{status: 529, body: antErr("overloaded_error", "Overloaded")},
			kind:  crewlet.ProviderServerError, status: 529, message: "overloaded_error: Overloaded",
		},
		{
			name:  "internal server error",
			reply: reply{status: 500, body: antErr("api_error", "Internal server error")},
			kind:  crewlet.ProviderServerError, status: 500, message: "Internal server error",
		},
		{
			name:  "bad request",
			reply: reply{status: 400, body: antErr("invalid_request_error", "messages: roles must alternate between \"user\" and \"assistant\"")},
			kind:  crewlet.ProviderBadRequest, status: 400, message: "roles must alternate",
		},
		{
			name:  "bad key echoed back",
			reply: reply{status: 401, body: antErr("authentication_error", "invalid x-api-key "+testKey)},
			kind:  crewlet.ProviderAuth, status: 401, message: "authentication_error: invalid x-api-key [REDACTED]",
		},
		{
			name:  "permission denied",
			reply: reply{status: 403, body: antErr("permission_error", "Your API key does not have permission to use the specified resource.")},
			kind:  crewlet.ProviderAuth, status: 403, message: "permission_error",
		},
	}
	runErrorCases(t, cases, func(f *fakeProvider) error {
		_, err := newTestAnthropic(t, f, 0).Chat(context.Background(), crewlet.ModelRequest{
			Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}},
		})
		return err
	})
}

func TestAnthropicTransportError(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t)
	m := newTestAnthropic(t, f, 0)
	f.Close()

	_, err := m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}}})
	pe := providerError(t, err)
	if pe.Kind != crewlet.ProviderServerError || pe.Status != 0 {
		t.Errorf("got kind=%s status=%d, want server_error with no status (%v)", pe.Kind, pe.Status, err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("error leaks the API key: %v", err)
	}
}

func TestAnthropicRejectsBadToolArgs(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t)
	m := newTestAnthropic(t, f, 0)
	_, err := m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{
		{Role: "user", Content: "go"},
		{Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "t1", Name: "x", Args: json.RawMessage(`"not an object"`)}}},
	}})
	if pe := providerError(t, err); pe.Kind != crewlet.ProviderBadRequest {
		t.Errorf("kind = %s, want bad_request (%v)", pe.Kind, err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("server got %d requests, want none for a request that cannot be encoded", n)
	}
}
