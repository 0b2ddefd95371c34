package model

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// sseStream is one canned streaming answer: the events of an SSE body,
// written and flushed one at a time. With abort the connection is dropped
// after them, mid-body, as a provider's stream that is cut off; with hold
// the body stays open after them until the client goes.
type sseStream struct {
	events []string
	abort  bool
	hold   bool
}

// newSSEProvider answers its first request with s as text/event-stream and
// records it; any other request fails the test.
func newSSEProvider(t *testing.T, s sseStream) (*httptest.Server, func() []byte) {
	t.Helper()
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case got <- body:
		default:
			t.Errorf("unexpected second request: %s", body)
			http.Error(w, "unexpected request", 599)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range s.events {
			_, _ = io.WriteString(w, ev+"\n\n")
			w.(http.Flusher).Flush()
		}
		if s.abort {
			panic(http.ErrAbortHandler)
		}
		if s.hold {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []byte {
		select {
		case b := <-got:
			return b
		default:
			t.Fatal("the server got no request")
			return nil
		}
	}
}

// deltas collects what a streaming call hands over.
type deltas []string

func (d *deltas) add(text string) { *d = append(*d, text) }

// oaiChunk is one chat.completion.chunk event of the stream oaiStreamEvents
// answers.
func oaiChunk(choices string, usage string) string {
	s := `data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"test-model","choices":[` + choices + `]`
	if usage != "" {
		s += `,"usage":` + usage
	}
	return s + "}"
}

func oaiDelta(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return oaiChunk(`{"index":0,"delta":`+delta+`,"finish_reason":`+f+`}`, "")
}

// oaiStreamEvents streams text in two pieces, then two tool calls whose
// names and arguments come split over chunks, then usage after the finish
// (stream_options.include_usage): the answer oaiWholeToolAnswer gives whole.
var oaiStreamEvents = []string{
	oaiDelta(`{"role":"assistant","content":""}`, ""),
	oaiDelta(`{"content":"Checking "}`, ""),
	oaiDelta(`{"content":"both."}`, ""),
	oaiDelta(`{"tool_calls":[{"index":0,"id":"call_7","type":"function","function":{"name":"get_","arguments":""}}]}`, ""),
	oaiDelta(`{"tool_calls":[{"index":0,"function":{"name":"weather","arguments":"{\"city\":"}}]}`, ""),
	oaiDelta(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}`, ""),
	oaiDelta(`{"tool_calls":[{"index":1,"id":"call_8","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Bergen\"}"}}]}`, ""),
	oaiDelta(`{}`, "tool_calls"),
	oaiChunk("", `{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}`),
	"data: [DONE]",
}

const oaiWholeToolAnswer = `{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"test-model",
	"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Checking both.",
	"tool_calls":[{"id":"call_7","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}},
	{"id":"call_8","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Bergen\"}"}}]}}],
	"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}}`

var streamRequest = crewlet.ModelRequest{
	System:   "sys",
	Messages: []crewlet.ChatMessage{{Role: "user", Content: "weather in Oslo and Bergen?"}},
	Tools: []crewlet.ToolSpec{{Name: "get_weather", Description: "Current weather",
		Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
}

func newStreamOpenAI(t *testing.T, url string) *OpenAI {
	t.Helper()
	m, err := NewOpenAI(OpenAIOptions{BaseURL: url + "/v1", Model: "test-model", APIKey: testKey})
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	return m
}

func TestOpenAIStream(t *testing.T) {
	t.Parallel()
	srv, request := newSSEProvider(t, sseStream{events: oaiStreamEvents})
	var got deltas
	resp, err := newStreamOpenAI(t, srv.URL).ChatStream(context.Background(), streamRequest, got.add)
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if want := (deltas{"Checking ", "both."}); !reflect.DeepEqual(got, want) {
		t.Errorf("deltas = %q, want %q in order", got, want)
	}
	if strings.Join(got, "") != resp.Text {
		t.Errorf("deltas %q do not make up the text %q", got, resp.Text)
	}

	f := newFakeProvider(t, reply{status: 200, body: oaiWholeToolAnswer})
	whole, err := newTestOpenAI(t, f).Chat(context.Background(), streamRequest)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if !reflect.DeepEqual(resp, whole) {
		t.Errorf("streamed response = %+v\nwhole response    = %+v\nwant them equal", resp, whole)
	}
	if resp.Usage != (crewlet.Usage{InputTokens: 40, OutputTokens: 9}) {
		t.Errorf("usage = %+v, want {40 9} from the stream's last chunk", resp.Usage)
	}

	var body struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Tools []any `json:"tools"`
	}
	if err := json.Unmarshal(request(), &body); err != nil {
		t.Fatalf("request body: %v", err)
	}
	if !body.Stream || !body.StreamOptions.IncludeUsage || len(body.Tools) != 1 {
		t.Errorf("request = %+v, want stream with include_usage and the tool offered", body)
	}
	var wholeBody map[string]any
	_ = json.Unmarshal(f.only(t).body, &wholeBody)
	if _, ok := wholeBody["stream"]; ok {
		t.Errorf("Chat's request asks for a stream: %v", wholeBody)
	}
}

// TestOpenAIStreamNilDelta: a stream with no callback still answers.
func TestOpenAIStreamNilDelta(t *testing.T) {
	t.Parallel()
	srv, _ := newSSEProvider(t, sseStream{events: oaiStreamEvents})
	resp, err := newStreamOpenAI(t, srv.URL).ChatStream(context.Background(), streamRequest, nil)
	if err != nil || resp.Text != "Checking both." || len(resp.ToolCalls) != 2 {
		t.Fatalf("ChatStream = %+v, %v; want the whole answer", resp, err)
	}
}

// startErrorReplies fail a request before any stream begins; a streaming
// call must classify each exactly as Chat does.
func startErrorReplies(errBody func(typ, msg string) string) []reply {
	return []reply{
		{status: 429, header: map[string]string{"Retry-After": "7"}, body: errBody("rate_limit_error", "Rate limit reached for requests")},
		{status: 429, body: errBody("insufficient_quota", "You exceeded your current quota")},
		{status: 500, body: errBody("server_error", "The server had an error")},
		{status: 400, body: errBody("invalid_request_error", "messages: roles must alternate")},
		{status: 401, body: errBody("authentication_error", "invalid key "+testKey)},
	}
}

// checkStartErrors runs each reply through whole and stream, each on a
// fresh server, and wants the same *crewlet.ProviderError from both.
func checkStartErrors(t *testing.T, replies []reply, whole, stream func(*fakeProvider) error) {
	t.Helper()
	for _, rep := range replies {
		wantErr := whole(newFakeProvider(t, rep))
		f := newFakeProvider(t, rep)
		gotErr := stream(f)
		want, got := providerError(t, wantErr), providerError(t, gotErr)
		if *got != *want {
			t.Errorf("HTTP %d at the start of a stream = %+v, want what Chat gives: %+v", rep.status, got, want)
		}
		if strings.Contains(gotErr.Error(), testKey) {
			t.Errorf("error leaks the API key: %v", gotErr)
		}
		f.only(t)
	}
	if got := providerError(t, stream(newFakeProvider(t, replies[0]))); got.Kind != crewlet.ProviderRateLimited || got.RetryAfter != 7*time.Second {
		t.Errorf("429 at the start = %+v, want rate_limited after 7s", got)
	}
}

func TestOpenAIStreamStartErrors(t *testing.T) {
	t.Parallel()
	oaiErr := func(typ, msg string) string {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ}})
		return string(b)
	}
	req := crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}}}
	checkStartErrors(t, startErrorReplies(oaiErr),
		func(f *fakeProvider) error { _, err := newTestOpenAI(t, f).Chat(context.Background(), req); return err },
		func(f *fakeProvider) error {
			_, err := newTestOpenAI(t, f).ChatStream(context.Background(), req, func(string) {})
			return err
		})
}

// streamFailure is a stream that goes wrong after it began, and how the
// call must fail.
type streamFailure struct {
	name    string
	stream  sseStream
	kind    string
	message string
}

func runStreamFailures(t *testing.T, cases []streamFailure, chat func(url string, onDelta func(string)) (crewlet.ModelResponse, error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := newSSEProvider(t, tc.stream)
			var got deltas
			resp, err := chat(srv.URL, got.add)
			pe := providerError(t, err)
			if pe.Kind != tc.kind || pe.Status != http.StatusOK || !strings.Contains(pe.Message, tc.message) {
				t.Errorf("got %+v, want kind %s, the stream's status 200 and a message with %q", pe, tc.kind, tc.message)
			}
			if !reflect.DeepEqual(resp, crewlet.ModelResponse{}) {
				t.Errorf("response = %+v, want none: a half answer is never returned", resp)
			}
			if len(got) == 0 {
				t.Errorf("no delta came before the failure; the case does not test a stream cut mid-way")
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("error leaks the API key: %v", err)
			}
		})
	}
}

func TestOpenAIStreamFailures(t *testing.T) {
	t.Parallel()
	begun := oaiStreamEvents[:5]
	then := func(events ...string) []string { return append(append([]string(nil), begun...), events...) }
	runStreamFailures(t, []streamFailure{
		{
			name:   "connection cut mid-way",
			stream: sseStream{events: begun, abort: true},
			kind:   crewlet.ProviderServerError, message: "EOF",
		},
		{
			name:   "stream ends before a choice finished",
			stream: sseStream{events: then("data: [DONE]")},
			kind:   crewlet.ProviderServerError, message: "ended before the answer did",
		},
		{
			name:   "body ends before a choice finished",
			stream: sseStream{events: begun},
			kind:   crewlet.ProviderServerError, message: "ended before the answer did",
		},
		{
			name:   "server error event",
			stream: sseStream{events: then(`data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","code":null}}`)},
			kind:   crewlet.ProviderServerError, message: "server_error: The server had an error",
		},
		{
			name:   "rate limit event",
			stream: sseStream{events: then(`data: {"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)},
			kind:   crewlet.ProviderRateLimited, message: "rate_limit_exceeded: Rate limit reached",
		},
		{
			name:   "quota event",
			stream: sseStream{events: then(`data: {"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`)},
			kind:   crewlet.ProviderExhausted, message: "exceeded your current quota",
		},
		{
			name:   "unknown error event",
			stream: sseStream{events: then(`data: {"error":{"message":"something odd"}}`)},
			kind:   crewlet.ProviderServerError, message: "something odd",
		},
	}, func(url string, onDelta func(string)) (crewlet.ModelResponse, error) {
		return newStreamOpenAI(t, url).ChatStream(context.Background(), streamRequest, onDelta)
	})
}

// TestOpenAIStreamUsageRequired: OpenAI's own endpoint sends usage after
// the finish; a stream cut between them would leave the round uncharged.
func TestOpenAIStreamUsageRequired(t *testing.T) {
	t.Parallel()
	beforeUsage := oaiStreamEvents[:len(oaiStreamEvents)-2]
	for _, official := range []bool{true, false} {
		srv, _ := newSSEProvider(t, sseStream{events: beforeUsage})
		m := newStreamOpenAI(t, srv.URL)
		m.official = official
		resp, err := m.ChatStream(context.Background(), streamRequest, nil)
		if official {
			if pe := providerError(t, err); pe.Kind != crewlet.ProviderServerError {
				t.Errorf("official endpoint, no usage: %+v, want a server error to retry", pe)
			}
			continue
		}
		if err != nil || resp.Text != "Checking both." || resp.Usage != (crewlet.Usage{}) {
			t.Errorf("compatible server, no usage: %+v, %v; want the answer with no usage, as it answers whole", resp, err)
		}
	}
}

func TestOpenAIStreamCanceled(t *testing.T) {
	t.Parallel()
	srv, _ := newSSEProvider(t, sseStream{events: oaiStreamEvents[:3], hold: true})
	ctx, cancel := context.WithCancel(context.Background())
	_, err := newStreamOpenAI(t, srv.URL).ChatStream(ctx, streamRequest, func(string) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want the context's: the call was abandoned, the provider did not fail", err)
	}
}

// antEvent is one event of a Messages API stream.
func antEvent(typ, data string) string {
	return "event: " + typ + "\ndata: " + data
}

// antStreamEvents streams the answer antWholeToolAnswer gives whole: text in
// two pieces, a tool call whose input comes split, usage in message_start
// (input, cached) and message_delta (output), with a ping between.
var antStreamEvents = []string{
	antEvent("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":1,"cache_read_input_tokens":100,"cache_creation_input_tokens":3}}}`),
	antEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
	antEvent("ping", `{"type":"ping"}`),
	antEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking "}}`),
	antEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Oslo."}}`),
	antEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
	antEvent("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`),
	antEvent("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`),
	antEvent("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`),
	antEvent("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}`),
	antEvent("content_block_stop", `{"type":"content_block_stop","index":1}`),
	antEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}`),
	antEvent("message_stop", `{"type":"message_stop"}`),
}

func antWholeToolAnswer() string {
	return antMessage("tool_use",
		map[string]any{"type": "text", "text": "Checking Oslo."},
		map[string]any{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": map[string]any{"city": "Oslo"}},
	)
}

func newStreamAnthropic(t *testing.T, url string) *Anthropic {
	t.Helper()
	m, err := NewAnthropic(AnthropicOptions{BaseURL: url, Model: "claude-test", APIKey: testKey})
	if err != nil {
		t.Fatalf("NewAnthropic: %v", err)
	}
	return m
}

func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	srv, request := newSSEProvider(t, sseStream{events: antStreamEvents})
	var got deltas
	resp, err := newStreamAnthropic(t, srv.URL).ChatStream(context.Background(), streamRequest, got.add)
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if want := (deltas{"Checking ", "Oslo."}); !reflect.DeepEqual(got, want) {
		t.Errorf("deltas = %q, want %q in order", got, want)
	}
	if strings.Join(got, "") != resp.Text {
		t.Errorf("deltas %q do not make up the text %q", got, resp.Text)
	}

	f := newFakeProvider(t, reply{status: 200, body: antWholeToolAnswer()})
	whole, err := newTestAnthropic(t, f, 0).Chat(context.Background(), streamRequest)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if !reflect.DeepEqual(resp, whole) {
		t.Errorf("streamed response = %+v\nwhole response    = %+v\nwant them equal", resp, whole)
	}
	if resp.Usage != (crewlet.Usage{InputTokens: 123, OutputTokens: 5, CachedTokens: 100}) {
		t.Errorf("usage = %+v, want {123 5 100}: input and cached tokens from message_start, output from message_delta", resp.Usage)
	}

	var body struct {
		Stream bool  `json:"stream"`
		Tools  []any `json:"tools"`
	}
	if err := json.Unmarshal(request(), &body); err != nil {
		t.Fatalf("request body: %v", err)
	}
	if !body.Stream || len(body.Tools) != 1 {
		t.Errorf("request = %+v, want a stream with the tool offered", body)
	}
}

func TestAnthropicStreamStartErrors(t *testing.T) {
	t.Parallel()
	antErr := func(typ, msg string) string {
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
		return string(b)
	}
	req := crewlet.ModelRequest{Messages: []crewlet.ChatMessage{{Role: "user", Content: "hi"}}}
	checkStartErrors(t, startErrorReplies(antErr),
		func(f *fakeProvider) error {
			_, err := newTestAnthropic(t, f, 0).Chat(context.Background(), req)
			return err
		},
		func(f *fakeProvider) error {
			_, err := newTestAnthropic(t, f, 0).ChatStream(context.Background(), req, func(string) {})
			return err
		})
}

func TestAnthropicStreamFailures(t *testing.T) {
	t.Parallel()
	begun := antStreamEvents[:4]
	then := func(events ...string) []string { return append(append([]string(nil), begun...), events...) }
	errEvent := func(typ, msg string) string {
		return antEvent("error", `{"type":"error","error":{"type":"`+typ+`","message":"`+msg+`"}}`)
	}
	runStreamFailures(t, []streamFailure{
		{
			name:   "connection cut mid-way",
			stream: sseStream{events: begun, abort: true},
			kind:   crewlet.ProviderServerError, message: "EOF",
		},
		{
			name:   "body ends before message_stop",
			stream: sseStream{events: then(antStreamEvents[11])},
			kind:   crewlet.ProviderServerError, message: "ended before the answer did",
		},
		{
			name:   "overloaded event",
			stream: sseStream{events: then(errEvent("overloaded_error", "Overloaded"))},
			kind:   crewlet.ProviderServerError, message: "overloaded_error: Overloaded",
		},
		{
			name:   "rate limit event",
			stream: sseStream{events: then(errEvent("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"))},
			kind:   crewlet.ProviderRateLimited, message: "rate_limit_error: Number of request tokens",
		},
		{
			name:   "credit balance event",
			stream: sseStream{events: then(errEvent("invalid_request_error", "Your credit balance is too low"))},
			kind:   crewlet.ProviderExhausted, message: "credit balance is too low",
		},
		{
			name:   "delta for a block that never started",
			stream: sseStream{events: then(antEvent("content_block_delta", `{"type":"content_block_delta","index":5,"delta":{"type":"text_delta","text":"x"}}`))},
			kind:   crewlet.ProviderServerError, message: "content block",
		},
	}, func(url string, onDelta func(string)) (crewlet.ModelResponse, error) {
		return newStreamAnthropic(t, url).ChatStream(context.Background(), streamRequest, onDelta)
	})
}

// TestStreamAnsweredWhole: a server that ignores "stream": true and answers
// one JSON body gets the answer Chat would, its text handed over in one
// piece.
func TestStreamAnsweredWhole(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		body   string
		stream func(*fakeProvider, func(string)) (crewlet.ModelResponse, error)
		whole  func(*fakeProvider) (crewlet.ModelResponse, error)
	}{
		{
			name: "openai", body: oaiWholeToolAnswer,
			stream: func(f *fakeProvider, d func(string)) (crewlet.ModelResponse, error) {
				return newTestOpenAI(t, f).ChatStream(context.Background(), streamRequest, d)
			},
			whole: func(f *fakeProvider) (crewlet.ModelResponse, error) {
				return newTestOpenAI(t, f).Chat(context.Background(), streamRequest)
			},
		},
		{
			name: "anthropic", body: antWholeToolAnswer(),
			stream: func(f *fakeProvider, d func(string)) (crewlet.ModelResponse, error) {
				return newTestAnthropic(t, f, 0).ChatStream(context.Background(), streamRequest, d)
			},
			whole: func(f *fakeProvider) (crewlet.ModelResponse, error) {
				return newTestAnthropic(t, f, 0).Chat(context.Background(), streamRequest)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got deltas
			resp, err := tc.stream(newFakeProvider(t, reply{status: 200, body: tc.body}), got.add)
			if err != nil {
				t.Fatalf("ChatStream: %v", err)
			}
			want, err := tc.whole(newFakeProvider(t, reply{status: 200, body: tc.body}))
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if !reflect.DeepEqual(resp, want) {
				t.Errorf("response = %+v, want Chat's %+v", resp, want)
			}
			if !reflect.DeepEqual(got, deltas{want.Text}) {
				t.Errorf("deltas = %q, want the whole text in one piece", got)
			}
		})
	}
}
