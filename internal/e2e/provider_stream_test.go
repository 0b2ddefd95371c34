package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/wire"
)

// Streaming model output from the real providers
// (docs/architecture.md, "Live stream"), against an OpenAI-compatible and
// an Anthropic Messages server run in the test that stream their answers
// in pieces.

// streamedPieces are the pieces each fake provider streams its answer in.
var streamedPieces = []string{"Streamed ", "piece ", "by piece."}

// streamingProvider serves /v1/chat/completions and /v1/messages: a
// request that asks for a stream gets the answer as SSE in
// streamedPieces, with usage; any other the same answer whole.
func streamingProvider(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream bool `json:"stream"`
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &req) != nil {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		text := strings.Join(streamedPieces, "")
		var sse []string
		switch r.URL.Path {
		case "/v1/chat/completions":
			if !req.Stream {
				w.Header().Set("Content-Type", "application/json")
				_, _ = fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"model-o","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}}`, text)
				return
			}
			chunk := func(choices, usage string) string {
				return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"model-o","choices":[` + choices + `]` + usage + `}`
			}
			for _, p := range streamedPieces {
				sse = append(sse, chunk(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"finish_reason":null}`, p), ""))
			}
			sse = append(sse, chunk(`{"index":0,"delta":{},"finish_reason":"stop"}`, ""),
				chunk("", `,"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}`), "data: [DONE]")
		case "/v1/messages":
			if !req.Stream {
				w.Header().Set("Content-Type", "application/json")
				_, _ = fmt.Fprintf(w, `{"id":"m1","type":"message","role":"assistant","model":"model-a","content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":7}}`, text)
				return
			}
			sse = append(sse,
				"event: message_start\ndata: "+`{"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"model-a","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":1}}}`,
				"event: content_block_start\ndata: "+`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			for _, p := range streamedPieces {
				sse = append(sse, "event: content_block_delta\ndata: "+fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, p))
			}
			sse = append(sse,
				"event: content_block_stop\ndata: "+`{"type":"content_block_stop","index":0}`,
				"event: message_delta\ndata: "+`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}`,
				"event: message_stop\ndata: "+`{"type":"message_stop"}`)
		default:
			http.Error(w, "unknown path", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range sse {
			if strings.Contains(ev, `"content":`) || strings.Contains(ev, `"text_delta"`) {
				// Paced like a provider, slower than a round coalesces
				// deltas (events.DeltaEvery), so each piece is its own.
				time.Sleep(2 * events.DeltaEvery)
			}
			_, _ = io.WriteString(w, ev+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A seat on an openai profile and one on an anthropic profile each stream
// their round's answer: the live stream carries one model_delta per piece
// the provider sent, in order, then the round's model_output of the whole
// text; the reply is that text and the round is charged the usage the
// stream reported.
func TestProvidersStreamModelDeltas(t *testing.T) {
	srv := streamingProvider(t)
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(`
company: { name: streamers }
profiles:
  oai: { provider: openai, base_url: %s/v1, model: model-o }
  ant: { provider: anthropic, base_url: %s, model: model-a, api_key_env: CREWLET_E2E_ANT_KEY }
roles:
  viaopenai: { charter: answers, profile: oai }
  viaanthropic: { charter: answers, profile: ant }
seats:
  - { handle: s01, role: viaopenai }
  - { handle: s02, role: viaanthropic }
`, srv.URL, srv.URL)))
	c.setenv("CREWLET_E2E_ANT_KEY=sk-ant-test")
	c.apiServer()
	c.worker("n1")
	c.waitAttached(60 * time.Second)
	whole := strings.Join(streamedPieces, "")
	for _, tc := range []struct {
		seat        string
		input, outp int64
	}{{"s01", 40, 9}, {"s02", 30, 7}} {
		s := c.openStream("/seats/"+tc.seat+"/stream", "")
		msg := c.send(tc.seat, "hello")
		evs := s.until(60*time.Second, "turn_finished", kindIs(events.TurnFinished))
		var pieces []string
		var output string
		for _, ev := range evs {
			switch ev.Kind {
			case events.ModelDelta:
				pieces = append(pieces, ev.Data.Text)
			case events.ModelOutput:
				output = ev.Data.Text
			}
		}
		t.Logf("seat %s: %s", tc.seat, kindsOf(evs))
		if !reflect.DeepEqual(pieces, streamedPieces) || output != whole {
			t.Errorf("seat %s: deltas %q, output %q; want the provider's pieces %q in order, then the whole text", tc.seat, pieces, output, streamedPieces)
		}
		if reply := c.waitReply(msg, 30*time.Second); reply != whole {
			t.Errorf("seat %s: reply %q; want %q", tc.seat, reply, whole)
		}
		var turns []wire.TurnRow
		if err := c.call(http.MethodGet, "/seats/"+tc.seat+"/turns?limit=1", nil, &turns); err != nil || len(turns) != 1 {
			t.Fatalf("GET /seats/%s/turns: %v %+v", tc.seat, err, turns)
		}
		var view wire.TurnView
		if err := c.call(http.MethodGet, "/turns/"+tc.seat+"/"+turns[0].WorkKey, nil, &view); err != nil || len(view.Receipts) == 0 {
			t.Fatalf("GET /turns/%s/%s: %v %+v", tc.seat, turns[0].WorkKey, err, view)
		}
		if r := view.Receipts[0]; r.InputTokens != tc.input || r.OutputTokens != tc.outp {
			t.Errorf("seat %s: round charged %d in, %d out; want the stream's usage %d, %d", tc.seat, r.InputTokens, r.OutputTokens, tc.input, tc.outp)
		}
	}
}
