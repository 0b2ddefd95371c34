package model

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

const testKey = "sk-test-0123456789abcdefSECRET"

// reply is one canned HTTP answer of a fake provider.
type reply struct {
	status int
	header map[string]string
	body   string
}

// received is one request a fake provider got.
type received struct {
	method string
	path   string
	header http.Header
	body   []byte
}

// fakeProvider answers requests with its replies in order and records what
// it received. A request past the last reply gets a 599 and is recorded, so
// a hidden retry shows up in the count.
type fakeProvider struct {
	*httptest.Server
	mu      sync.Mutex
	replies []reply
	got     []received
}

func newFakeProvider(t *testing.T, replies ...reply) *fakeProvider {
	t.Helper()
	f := &fakeProvider{replies: replies}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.got)
		f.got = append(f.got, received{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body})
		f.mu.Unlock()
		if n >= len(f.replies) {
			http.Error(w, "unexpected request", 599)
			return
		}
		rep := f.replies[n]
		w.Header().Set("Content-Type", "application/json")
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeProvider) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.got...)
}

// only returns the single request the server got, failing otherwise.
func (f *fakeProvider) only(t *testing.T) received {
	t.Helper()
	got := f.requests()
	if len(got) != 1 {
		t.Fatalf("server got %d requests, want exactly 1 (no SDK retry)", len(got))
	}
	return got[0]
}

func decodeBody[T any](t *testing.T, r received) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("request body is not the expected JSON: %v\n%s", err, r.body)
	}
	return v
}

func providerError(t *testing.T, err error) *crewlet.ProviderError {
	t.Helper()
	var pe *crewlet.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want *crewlet.ProviderError", err, err)
	}
	return pe
}

// oaiRequest is the part of a chat-completions request the tests check.
type oaiRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string `json:"role"`
		Content    any    `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
}

func newTestOpenAI(t *testing.T, f *fakeProvider) *OpenAI {
	t.Helper()
	m, err := NewOpenAI(OpenAIOptions{BaseURL: f.URL + "/v1", Model: "test-model", APIKey: testKey, HTTPClient: f.Client()})
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	return m
}

func oaiText(text string, in, out int) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": text},
		}},
		"usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
	return string(b)
}

func TestOpenAIText(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t, reply{status: 200, body: oaiText("hello there", 12, 3)})
	m := newTestOpenAI(t, f)

	resp, err := m.Chat(context.Background(), crewlet.ModelRequest{
		System:    "You are the CFO.",
		Messages:  []crewlet.ChatMessage{{Role: "user", Content: "hi"}},
		MaxTokens: 100,
	})
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if resp.Text != "hello there" || len(resp.ToolCalls) != 0 {
		t.Errorf("response = %+v, want text %q and no tool calls", resp, "hello there")
	}
	if resp.Usage != (crewlet.Usage{InputTokens: 12, OutputTokens: 3}) {
		t.Errorf("usage = %+v, want {12 3}", resp.Usage)
	}

	r := f.only(t)
	if r.method != http.MethodPost || r.path != "/v1/chat/completions" {
		t.Errorf("request = %s %s, want POST /v1/chat/completions", r.method, r.path)
	}
	if got := r.header.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization = %q, want the bearer key", got)
	}
	body := decodeBody[oaiRequest](t, r)
	if body.Model != "test-model" {
		t.Errorf("model = %q, want test-model", body.Model)
	}
	if len(body.Messages) != 2 ||
		body.Messages[0].Role != "system" || body.Messages[0].Content != "You are the CFO." ||
		body.Messages[1].Role != "user" || body.Messages[1].Content != "hi" {
		t.Errorf("messages = %s, want system then user", r.body)
	}
	if body.MaxTokens == nil || *body.MaxTokens != 100 {
		t.Errorf("max_tokens = %v, want 100 for a compatible server", body.MaxTokens)
	}
	if len(body.Tools) != 0 {
		t.Errorf("tools = %d, want none offered", len(body.Tools))
	}
}

func TestOpenAIToolRoundTrip(t *testing.T) {
	t.Parallel()
	toolCall := `{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"test-model",
		"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
		"tool_calls":[{"id":"call_7","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}}],
		"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49,"prompt_tokens_details":{"cached_tokens":32}}}`
	f := newFakeProvider(t,
		reply{status: 200, body: toolCall},
		reply{status: 200, body: oaiText("It is 3°C in Oslo.", 60, 8)},
	)
	m := newTestOpenAI(t, f)
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)
	req := crewlet.ModelRequest{
		System:   "sys",
		Messages: []crewlet.ChatMessage{{Role: "user", Content: "weather in Oslo?"}},
		Tools:    []crewlet.ToolSpec{{Name: "get_weather", Description: "Current weather", Schema: schema}},
	}

	first, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatalf("first Chat: %v", err)
	}
	if len(first.ToolCalls) != 1 {
		t.Fatalf("tool calls = %+v, want one", first.ToolCalls)
	}
	call := first.ToolCalls[0]
	if call.ID != "call_7" || call.Name != "get_weather" || string(call.Args) != `{"city":"Oslo"}` {
		t.Errorf("tool call = {%s %s %s}, want {call_7 get_weather {\"city\":\"Oslo\"}}", call.ID, call.Name, call.Args)
	}
	if first.Usage != (crewlet.Usage{InputTokens: 40, OutputTokens: 9, CachedTokens: 32}) {
		t.Errorf("usage = %+v, want {40 9 32}: the cached prompt tokens are input and cached", first.Usage)
	}

	req.Messages = append(req.Messages,
		crewlet.ChatMessage{Role: "assistant", ToolCalls: first.ToolCalls},
		crewlet.ChatMessage{Role: "tool", ToolCallID: "call_7", Content: "3°C, clear"},
	)
	second, err := m.Chat(context.Background(), req)
	if err != nil {
		t.Fatalf("second Chat: %v", err)
	}
	if second.Text != "It is 3°C in Oslo." || len(second.ToolCalls) != 0 {
		t.Errorf("final response = %+v, want the text answer", second)
	}

	got := f.requests()
	if len(got) != 2 {
		t.Fatalf("server got %d requests, want 2", len(got))
	}
	b1 := decodeBody[oaiRequest](t, got[0])
	if len(b1.Tools) != 1 || b1.Tools[0].Type != "function" || b1.Tools[0].Function.Name != "get_weather" ||
		b1.Tools[0].Function.Description != "Current weather" {
		t.Fatalf("tools = %s, want get_weather as a function tool", got[0].body)
	}
	params, _ := json.Marshal(b1.Tools[0].Function.Parameters)
	if string(params) != `{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}` {
		t.Errorf("parameters = %s, want the tool's schema", params)
	}

	b2 := decodeBody[oaiRequest](t, got[1])
	if len(b2.Messages) != 4 {
		t.Fatalf("second request has %d messages, want system, user, assistant, tool: %s", len(b2.Messages), got[1].body)
	}
	asst, tool := b2.Messages[2], b2.Messages[3]
	if asst.Role != "assistant" || len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != "call_7" ||
		asst.ToolCalls[0].Function.Name != "get_weather" || asst.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` {
		t.Errorf("assistant message = %+v, want the tool call echoed back", asst)
	}
	if tool.Role != "tool" || tool.ToolCallID != "call_7" || tool.Content != "3°C, clear" {
		t.Errorf("tool message = %+v, want the result for call_7", tool)
	}
}

func TestOpenAIMaxTokensField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		base          string
		opt, req      int
		want          int // 0: no cap sent
		wantMaxTokens bool
	}{
		{"official endpoint", "https://api.openai.com/v1", 0, 50, 50, false},
		{"compatible server", "http://localhost:11434/v1", 0, 50, 50, true},
		{"profile cap when the request names none", "http://localhost:11434/v1", 300, 0, 300, true},
		{"request cap over the profile's", "https://api.openai.com/v1", 300, 50, 50, false},
		{"no cap at all", "https://api.openai.com/v1", 0, 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewOpenAI(OpenAIOptions{BaseURL: tc.base, Model: "m", MaxTokens: tc.opt})
			if err != nil {
				t.Fatalf("NewOpenAI: %v", err)
			}
			p, err := m.params(crewlet.ModelRequest{MaxTokens: tc.req})
			if err != nil {
				t.Fatalf("params: %v", err)
			}
			b, _ := json.Marshal(p)
			var got oaiRequest
			_ = json.Unmarshal(b, &got)
			switch {
			case tc.want == 0:
				if got.MaxTokens != nil || got.MaxCompletionTokens != nil {
					t.Errorf("body = %s, want no cap", b)
				}
			case tc.wantMaxTokens:
				if got.MaxTokens == nil || *got.MaxTokens != tc.want || got.MaxCompletionTokens != nil {
					t.Errorf("body = %s, want max_tokens %d only", b, tc.want)
				}
			default:
				if got.MaxCompletionTokens == nil || *got.MaxCompletionTokens != tc.want || got.MaxTokens != nil {
					t.Errorf("body = %s, want max_completion_tokens %d only", b, tc.want)
				}
			}
		})
	}
	if _, err := NewOpenAI(OpenAIOptions{Model: "m", MaxTokens: -1}); err == nil {
		t.Errorf("NewOpenAI with max tokens -1: no error")
	}
}

func TestOpenAIToolErrorResultIsMarked(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t, reply{status: 200, body: oaiText("ok", 1, 1)})
	m := newTestOpenAI(t, f)
	_, err := m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{
		{Role: "user", Content: "go"},
		{Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "c1", Name: "rm", Args: json.RawMessage(`{}`)}}},
		{Role: "tool", ToolCallID: "c1", Content: "permission denied", IsError: true},
	}})
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	body := decodeBody[oaiRequest](t, f.only(t))
	if got := body.Messages[2].Content; got != "Error: permission denied" {
		t.Errorf("tool content = %q, want the failure marked", got)
	}
}

func TestOpenAIIgnoresEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/never")
	f := newFakeProvider(t, reply{status: 200, body: oaiText("hi", 1, 1)})
	m, err := NewOpenAI(OpenAIOptions{BaseURL: f.URL + "/v1", Model: "local", HTTPClient: f.Client()})
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	if _, err := m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "x"}}}); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if got := f.only(t).header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none: the profile named no key", got)
	}
}

// errorCase is one provider failure and how it must be classified.
type errorCase struct {
	name       string
	reply      reply
	kind       string
	status     int
	retryAfter time.Duration
	message    string // a substring the Message must carry
}

func runErrorCases(t *testing.T, cases []errorCase, chat func(*fakeProvider) error) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProvider(t, tc.reply)
			err := chat(f)
			pe := providerError(t, err)
			if pe.Kind != tc.kind || pe.Status != tc.status || pe.RetryAfter != tc.retryAfter {
				t.Errorf("got kind=%s status=%d retryAfter=%v, want kind=%s status=%d retryAfter=%v (%v)",
					pe.Kind, pe.Status, pe.RetryAfter, tc.kind, tc.status, tc.retryAfter, err)
			}
			if !strings.Contains(pe.Message, tc.message) {
				t.Errorf("message = %q, want it to contain %q", pe.Message, tc.message)
			}
			if strings.Contains(err.Error(), testKey) || strings.Contains(pe.Message, testKey) {
				t.Errorf("error leaks the API key: %v", err)
			}
			if len(pe.Message) > maxMessageLen+len("…") {
				t.Errorf("message is %d bytes, want at most %d", len(pe.Message), maxMessageLen)
			}
			f.only(t)
		})
	}
}

func TestOpenAIErrors(t *testing.T) {
	t.Parallel()
	oaiErr := func(msg, typ, code string) string {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code, "param": nil}})
		return string(b)
	}
	cases := []errorCase{
		{
			name:  "rate limited with Retry-After seconds",
			reply: reply{status: 429, header: map[string]string{"Retry-After": "7"}, body: oaiErr("Rate limit reached for requests", "requests", "rate_limit_exceeded")},
			kind:  crewlet.ProviderRateLimited, status: 429, retryAfter: 7 * time.Second, message: "Rate limit reached",
		},
		{
			name:  "rate limited with retry-after-ms",
			reply: reply{status: 429, header: map[string]string{"retry-after-ms": "1500", "Retry-After": "2"}, body: oaiErr("slow down", "requests", "")},
			kind:  crewlet.ProviderRateLimited, status: 429, retryAfter: 1500 * time.Millisecond, message: "slow down",
		},
		{
			name:  "quota exhausted",
			reply: reply{status: 429, body: oaiErr("You exceeded your current quota, please check your plan and billing details.", "insufficient_quota", "insufficient_quota")},
			kind:  crewlet.ProviderExhausted, status: 429, message: "insufficient_quota: You exceeded your current quota",
		},
		{
			name:  "forbidden for billing",
			reply: reply{status: 403, body: oaiErr("Your organization's credits are exhausted.", "billing_error", "")},
			kind:  crewlet.ProviderExhausted, status: 403, message: "credits are exhausted",
		},
		{
			name:  "payment required",
			reply: reply{status: 402, body: `{"error":{"message":"Insufficient balance","code":402}}`},
			kind:  crewlet.ProviderExhausted, status: 402, message: "402: Insufficient balance",
		},
		{
			name:  "server error",
			reply: reply{status: 500, body: oaiErr("The server had an error while processing your request.", "server_error", "")},
			kind:  crewlet.ProviderServerError, status: 500, message: "server had an error",
		},
		{
			name:  "server error with a plain-text body",
			reply: reply{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: "<html>Bad Gateway</html>"},
			kind:  crewlet.ProviderServerError, status: 502, message: "Bad Gateway",
		},
		{
			name:  "bad request",
			reply: reply{status: 400, body: oaiErr("Invalid schema for function 'get_weather'", "invalid_request_error", "invalid_function_parameters")},
			kind:  crewlet.ProviderBadRequest, status: 400, message: "Invalid schema",
		},
		{
			name:  "not found model",
			reply: reply{status: 404, body: `{"error":"model 'llama9' not found"}`},
			kind:  crewlet.ProviderBadRequest, status: 404, message: "model 'llama9' not found",
		},
		{
			name:  "bad key echoed back",
			reply: reply{status: 401, body: oaiErr("Incorrect API key provided: "+testKey+". You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key")},
			kind:  crewlet.ProviderAuth, status: 401, message: "Incorrect API key provided: [REDACTED]",
		},
		{
			name:  "forbidden",
			reply: reply{status: 403, body: oaiErr("Project does not have access to model", "invalid_request_error", "model_not_found")},
			kind:  crewlet.ProviderAuth, status: 403, message: "does not have access",
		},
		{
			name:  "huge body is cut short",
			reply: reply{status: 400, body: oaiErr(strings.Repeat("very long complaint ", 500), "invalid_request_error", "")},
			kind:  crewlet.ProviderBadRequest, status: 400, message: "very long complaint",
		},
	}
	runErrorCases(t, cases, func(f *fakeProvider) error {
		_, err := newTestOpenAI(t, f).Chat(context.Background(), crewlet.ModelRequest{
			Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}},
		})
		return err
	})
}

func TestOpenAITransportError(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t)
	m := newTestOpenAI(t, f)
	f.Close() // connection refused from now on

	_, err := m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}}})
	pe := providerError(t, err)
	if pe.Kind != crewlet.ProviderServerError || pe.Status != 0 {
		t.Errorf("got kind=%s status=%d, want server_error with no status (%v)", pe.Kind, pe.Status, err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("error leaks the API key: %v", err)
	}
}

// A self-hosted server's key looks like nothing in particular, so only the
// caller's key itself can catch it.
func TestOpenAIPlainKeyNeverInError(t *testing.T) {
	t.Parallel()
	const key = "vllm-Key-4f9c2b7e"
	f := newFakeProvider(t, reply{status: 401, body: `{"error":{"message":"unknown token vllm-Key-4f9c2b7e","type":"auth"}}`})
	m, err := NewOpenAI(OpenAIOptions{BaseURL: f.URL + "/v1", Model: "local", APIKey: key, HTTPClient: f.Client()})
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	_, err = m.Chat(context.Background(), crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}}})
	pe := providerError(t, err)
	if pe.Kind != crewlet.ProviderAuth {
		t.Errorf("kind = %s, want auth", pe.Kind)
	}
	if strings.Contains(err.Error(), key) || pe.Message != "auth: unknown token [REDACTED]" {
		t.Errorf("message = %q, want the key redacted", pe.Message)
	}
}

func TestOpenAICanceledContext(t *testing.T) {
	t.Parallel()
	f := newFakeProvider(t, reply{status: 200, body: oaiText("late", 1, 1)})
	m := newTestOpenAI(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := m.Chat(ctx, crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled: the caller gave up, the provider did not fail", err)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "30"}, 30 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond},
		{"http date", map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second},
		{"date in the past", map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, 0},
		{"milliseconds win", map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{"bad milliseconds fall back", map[string]string{"Retry-After-Ms": "soon", "Retry-After": "9"}, 9 * time.Second},
		{"garbage", map[string]string{"Retry-After": "whenever"}, 0},
		{"negative", map[string]string{"Retry-After": "-5"}, 0},
		{"absurd", map[string]string{"Retry-After": "1e300"}, maxRetryAfter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			if got := retryAfter(h, now); got != tc.want {
				t.Errorf("retryAfter = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCleanMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string
	}{
		{"key redacted", "bad key " + testKey + " here", "bad key [REDACTED] here"},
		{"masked key redacted", "Incorrect API key provided: sk-abc1********************wxyz.", "Incorrect API key provided: [REDACTED]."},
		{"bearer redacted", "header Authorization: Bearer abc.def-123 rejected", "header Authorization: [REDACTED] rejected"},
		{"whitespace folded", "line one\n\n  line\ttwo", "line one line two"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := cleanMessage(testKey, tc.in); got != tc.want {
				t.Errorf("cleanMessage = %q, want %q", got, tc.want)
			}
		})
	}
	long := cleanMessage("", strings.Repeat("é", 400))
	if !strings.HasSuffix(long, "…") || len(long) > maxMessageLen+len("…") || !strings.HasPrefix(long, "éé") {
		t.Errorf("long message = %d bytes %q..., want cut to %d bytes on a rune boundary", len(long), long[:10], maxMessageLen)
	}
	for _, r := range strings.TrimSuffix(long, "…") {
		if r != 'é' {
			t.Fatalf("long message was cut inside a rune: %q", long)
		}
	}
}
