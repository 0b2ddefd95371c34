package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/crewlet/crewlet"
)

const (
	openAIProvider       = "openai"
	openAIDefaultBaseURL = "https://api.openai.com/v1"
)

// OpenAIOptions configures an OpenAI-compatible chat-completions backend.
type OpenAIOptions struct {
	// BaseURL includes the API version path, e.g. http://localhost:11434/v1.
	// Empty means OpenAI's own endpoint.
	BaseURL string
	Model   string
	// APIKey is sent as a bearer token; empty sends none (local servers).
	APIKey string
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
	// MaxTokens caps each answer when the request names no cap; 0 leaves
	// it to the server.
	MaxTokens int
}

// OpenAI is a crewlet.ChatModel on any OpenAI-compatible chat-completions
// endpoint (OpenAI, vLLM, Ollama, llama.cpp).
type OpenAI struct {
	svc       openai.ChatCompletionService
	model     string
	apiKey    string
	maxTokens int
	// official: OpenAI's own endpoint takes max_completion_tokens and
	// refuses max_tokens for reasoning models; compatible servers mostly
	// know only max_tokens.
	official bool
}

var _ crewlet.StreamingChatModel = (*OpenAI)(nil)

// NewOpenAI builds an OpenAI-compatible backend.
func NewOpenAI(opts OpenAIOptions) (*OpenAI, error) {
	base, u, err := endpoint("openai", opts.Model, opts.BaseURL, openAIDefaultBaseURL, opts.MaxTokens)
	if err != nil {
		return nil, err
	}
	// The service is built from these options alone, not openai.NewClient,
	// so no OPENAI_* environment variable (key, org, extra headers) slips
	// into a profile that did not name it.
	ropts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithAPIKey(opts.APIKey),
		// Temporal retries the activity; an SDK retry would hide the
		// failure's kind and Retry-After from it.
		option.WithMaxRetries(0),
	}
	if opts.HTTPClient != nil {
		ropts = append(ropts, option.WithHTTPClient(opts.HTTPClient))
	}
	return &OpenAI{
		svc:       openai.NewChatCompletionService(ropts...),
		model:     opts.Model,
		apiKey:    opts.APIKey,
		maxTokens: opts.MaxTokens,
		official:  strings.EqualFold(u.Hostname(), "api.openai.com"),
	}, nil
}

// Chat sends one chat-completions request. Failures are
// *crewlet.ProviderError, or the context's error when ctx is done.
func (o *OpenAI) Chat(ctx context.Context, req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
	params, err := o.params(req)
	if err != nil {
		return crewlet.ModelResponse{}, err
	}
	var raw *http.Response
	out, err := o.svc.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		if raw == nil {
			raw = errorsAsResponse(err, func(e *openai.Error) *http.Response { return e.Response })
		}
		return crewlet.ModelResponse{}, classify(ctx, openAIProvider, o.apiKey, raw, err)
	}
	return o.response(out)
}

// ChatStream sends the request of Chat as a stream, calling onDelta with
// each piece of the answer's text as it comes, and answers what Chat would
// for the same answer. The stream asks for usage, which comes in its last
// chunk, so budgets are charged as for a whole answer. A stream that breaks
// or ends before a choice finished (on OpenAI's own endpoint: before the
// usage came) fails as a server error: a half answer is never returned.
func (o *OpenAI) ChatStream(ctx context.Context, req crewlet.ModelRequest, onDelta func(text string)) (crewlet.ModelResponse, error) {
	params, err := o.params(req)
	if err != nil {
		return crewlet.ModelResponse{}, err
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	var raw *http.Response
	stream := o.svc.NewStreaming(ctx, params, option.WithResponseInto(&raw))
	defer stream.Close()
	if answeredWhole(raw) {
		var out openai.ChatCompletion
		if err := decodeWhole(raw, &out); err != nil {
			return crewlet.ModelResponse{}, classifyStream(ctx, openAIProvider, o.apiKey, raw, err, nil)
		}
		resp, err := o.response(&out)
		return wholeAsDelta(resp, onDelta), err
	}
	var acc openai.ChatCompletionAccumulator
	// OpenAI sends usage in a chunk after the finish; a compatible server
	// may not know stream_options and send none, as it may answer whole
	// without usage.
	finished, counted := false, !o.official
	for stream.Next() {
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			return crewlet.ModelResponse{}, classifyStream(ctx, openAIProvider, o.apiKey, raw,
				fmt.Errorf("chunk %q does not continue the stream", chunk.ID), nil)
		}
		for _, c := range chunk.Choices {
			if c.Index != 0 {
				continue
			}
			if c.Delta.Content != "" && onDelta != nil {
				onDelta(c.Delta.Content)
			}
			finished = finished || c.FinishReason != ""
		}
		counted = counted || chunk.JSON.Usage.Valid()
	}
	if err := stream.Err(); err != nil || !finished || !counted {
		if raw == nil && err != nil {
			raw = errorsAsResponse(err, func(e *openai.Error) *http.Response { return e.Response })
		}
		var event []byte
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			event = se.Event.Data
		}
		return crewlet.ModelResponse{}, classifyStream(ctx, openAIProvider, o.apiKey, raw, err, event)
	}
	return o.response(&acc.ChatCompletion)
}

func (o *OpenAI) params(req crewlet.ModelRequest) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(o.model)}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case "user":
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case "assistant":
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, c := range m.ToolCalls {
				args := string(c.Args)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      c.Name,
							Arguments: args,
						},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case "tool":
			content := m.Content
			if m.IsError {
				// Chat completions have no error flag on a tool result.
				content = "Error: " + content
			}
			p.Messages = append(p.Messages, openai.ToolMessage(content, m.ToolCallID))
		default:
			return p, invalidRequest(openAIProvider, o.apiKey, fmt.Sprintf("messages[%d]", i),
				fmt.Errorf("unknown role %q; want user, assistant or tool", m.Role))
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaObject(t.Schema)
		if err != nil {
			return p, invalidRequest(openAIProvider, o.apiKey, "tool "+t.Name+" schema", err)
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(schema)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	maxTokens := o.maxTokens
	if req.MaxTokens > 0 {
		maxTokens = req.MaxTokens
	}
	if maxTokens > 0 {
		if o.official {
			p.MaxCompletionTokens = openai.Int(int64(maxTokens))
		} else {
			p.MaxTokens = openai.Int(int64(maxTokens))
		}
	}
	return p, nil
}

func (o *OpenAI) response(out *openai.ChatCompletion) (crewlet.ModelResponse, error) {
	if out == nil || len(out.Choices) == 0 {
		return crewlet.ModelResponse{}, &crewlet.ProviderError{
			Provider: openAIProvider, Kind: crewlet.ProviderServerError, Status: http.StatusOK,
			Message: "response has no choices",
		}
	}
	msg := out.Choices[0].Message
	resp := crewlet.ModelResponse{
		Text:  msg.Content,
		Model: out.Model,
		Usage: crewlet.Usage{
			InputTokens:  out.Usage.PromptTokens,
			OutputTokens: out.Usage.CompletionTokens,
			CachedTokens: out.Usage.PromptTokensDetails.CachedTokens,
		},
	}
	if resp.Text == "" {
		resp.Text = msg.Refusal
	}
	for _, c := range msg.ToolCalls {
		// Some compatible servers leave out "type"; custom (free-text) tools
		// are never offered, so anything else is a function call.
		if c.Type != "" && c.Type != "function" {
			continue
		}
		resp.ToolCalls = append(resp.ToolCalls, crewlet.ToolCall{
			ID:   c.ID,
			Name: c.Function.Name,
			Args: toolArgs(c.Function.Arguments),
		})
	}
	return resp, nil
}

// toolArgs keeps a model's arguments as JSON. Models do emit broken JSON;
// it is passed on as a JSON string so the tool layer can report it to the
// model instead of the turn failing to record the call.
func toolArgs(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// schemaObject decodes a tool's JSON Schema; an empty one takes no
// arguments.
func schemaObject(schema json.RawMessage) (map[string]any, error) {
	if len(strings.TrimSpace(string(schema))) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("schema is null, want a JSON object")
	}
	return m, nil
}
