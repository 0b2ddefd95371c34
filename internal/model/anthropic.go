package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/crewlet/crewlet"
)

const (
	anthropicProvider         = "anthropic"
	anthropicDefaultBaseURL   = "https://api.anthropic.com"
	anthropicDefaultMaxTokens = 4096
)

// AnthropicOptions configures an Anthropic Messages API backend.
type AnthropicOptions struct {
	// BaseURL is the API root without /v1. Empty means Anthropic's own.
	BaseURL string
	Model   string
	// APIKey is sent as x-api-key.
	APIKey string
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
	// MaxTokens caps each answer when the request names no cap; default
	// 4096. The Messages API requires one.
	MaxTokens int
}

// Anthropic is a crewlet.ChatModel on the Anthropic Messages API.
type Anthropic struct {
	svc       anthropic.MessageService
	model     string
	apiKey    string
	maxTokens int
}

var _ crewlet.StreamingChatModel = (*Anthropic)(nil)

// NewAnthropic builds an Anthropic backend.
func NewAnthropic(opts AnthropicOptions) (*Anthropic, error) {
	base, _, err := endpoint("anthropic", opts.Model, opts.BaseURL, anthropicDefaultBaseURL, opts.MaxTokens)
	if err != nil {
		return nil, err
	}
	maxTokens := opts.MaxTokens
	if maxTokens == 0 {
		maxTokens = anthropicDefaultMaxTokens
	}
	// Built from these options alone, not anthropic.NewClient, which would
	// pick up ANTHROPIC_* variables and profile files from the host.
	ropts := []option.RequestOption{
		option.WithBaseURL(base),
		// Temporal retries the activity; see NewOpenAI.
		option.WithMaxRetries(0),
	}
	if opts.APIKey != "" {
		ropts = append(ropts, option.WithAPIKey(opts.APIKey))
	}
	if opts.HTTPClient != nil {
		ropts = append(ropts, option.WithHTTPClient(opts.HTTPClient))
	}
	return &Anthropic{
		svc:       anthropic.NewMessageService(ropts...),
		model:     opts.Model,
		apiKey:    opts.APIKey,
		maxTokens: maxTokens,
	}, nil
}

// Chat sends one Messages API request. Failures are
// *crewlet.ProviderError, or the context's error when ctx is done.
func (a *Anthropic) Chat(ctx context.Context, req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
	params, err := a.params(req)
	if err != nil {
		return crewlet.ModelResponse{}, err
	}
	var raw *http.Response
	out, err := a.svc.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		if raw == nil {
			raw = errorsAsResponse(err, func(e *anthropic.Error) *http.Response { return e.Response })
		}
		return crewlet.ModelResponse{}, classify(ctx, anthropicProvider, a.apiKey, raw, err)
	}
	return anthropicResponse(out), nil
}

// ChatStream sends the request of Chat as a stream, calling onDelta with
// each piece of the answer's text as it comes, and answers what Chat would
// for the same message. An error event in the stream classifies as the same
// error at its start would; a stream that breaks or ends before
// message_stop fails as a server error: a half answer is never returned.
func (a *Anthropic) ChatStream(ctx context.Context, req crewlet.ModelRequest, onDelta func(text string)) (crewlet.ModelResponse, error) {
	params, err := a.params(req)
	if err != nil {
		return crewlet.ModelResponse{}, err
	}
	var raw *http.Response
	stream := a.svc.NewStreaming(ctx, params, option.WithResponseInto(&raw))
	defer stream.Close()
	if answeredWhole(raw) {
		var out anthropic.Message
		if err := decodeWhole(raw, &out); err != nil {
			return crewlet.ModelResponse{}, classifyStream(ctx, anthropicProvider, a.apiKey, raw, err, nil)
		}
		return wholeAsDelta(anthropicResponse(&out), onDelta), nil
	}
	var msg anthropic.Message
	stopped := false
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return crewlet.ModelResponse{}, classifyStream(ctx, anthropicProvider, a.apiKey, raw, err, nil)
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" && onDelta != nil {
				onDelta(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil || !stopped {
		var apiErr *anthropic.Error
		if errors.As(err, &apiErr) && raw == nil {
			raw = apiErr.Response
		}
		var event []byte
		if apiErr != nil && apiErr.StatusCode < 400 {
			// An error event: the SDK gives it the stream's success status.
			event = []byte(apiErr.RawJSON())
		}
		return crewlet.ModelResponse{}, classifyStream(ctx, anthropicProvider, a.apiKey, raw, err, event)
	}
	return anthropicResponse(&msg), nil
}

func (a *Anthropic) params(req crewlet.ModelRequest) (anthropic.MessageNewParams, error) {
	maxTokens := a.maxTokens
	if req.MaxTokens > 0 {
		maxTokens = req.MaxTokens
	}
	p := anthropic.MessageNewParams{Model: anthropic.Model(a.model), MaxTokens: int64(maxTokens)}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for i, m := range req.Messages {
		var role anthropic.MessageParamRole
		var blocks []anthropic.ContentBlockParamUnion
		switch m.Role {
		case "user":
			role = anthropic.MessageParamRoleUser
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
		case "assistant":
			role = anthropic.MessageParamRoleAssistant
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, c := range m.ToolCalls {
				input, err := toolInput(c.Args)
				if err != nil {
					return p, invalidRequest(anthropicProvider, a.apiKey,
						fmt.Sprintf("messages[%d] tool call %s arguments", i, c.ID), err)
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, input, c.Name))
			}
		case "tool":
			role = anthropic.MessageParamRoleUser
			result := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			// An empty text block is refused, so an empty result sends none.
			if m.Content != "" {
				result.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Content}}}
			}
			if m.IsError {
				result.IsError = anthropic.Bool(true)
			}
			blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &result})
		default:
			return p, invalidRequest(anthropicProvider, a.apiKey, fmt.Sprintf("messages[%d]", i),
				fmt.Errorf("unknown role %q; want user, assistant or tool", m.Role))
		}
		if len(blocks) == 0 {
			continue
		}
		// The API wants one user message carrying every result of an
		// assistant's tool calls; merging any run of one role does that and
		// keeps the roles alternating.
		if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == role {
			p.Messages[n-1].Content = append(p.Messages[n-1].Content, blocks...)
			continue
		}
		p.Messages = append(p.Messages, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for _, t := range req.Tools {
		schema, err := inputSchema(t.Schema)
		if err != nil {
			return p, invalidRequest(anthropicProvider, a.apiKey, "tool "+t.Name+" schema", err)
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}

func anthropicResponse(out *anthropic.Message) crewlet.ModelResponse {
	var resp crewlet.ModelResponse
	var text strings.Builder
	for _, b := range out.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := b.Input
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			resp.ToolCalls = append(resp.ToolCalls, crewlet.ToolCall{ID: b.ID, Name: b.Name, Args: args})
		}
	}
	resp.Text = text.String()
	resp.Model = string(out.Model)
	u := out.Usage
	// Cached prompt tokens are still prompt tokens the budget must see.
	resp.Usage = crewlet.Usage{
		InputTokens:  u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens: u.OutputTokens,
		CachedTokens: u.CacheReadInputTokens,
	}
	return resp
}

// toolInput is a tool call's arguments as the JSON object tool_use needs.
func toolInput(args json.RawMessage) (json.RawMessage, error) {
	if len(strings.TrimSpace(string(args))) == 0 {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]any
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return args, nil
}

// inputSchema spreads a tool's JSON Schema over the SDK's typed fields; the
// keywords it has no field for travel as extra fields.
func inputSchema(raw json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	var s anthropic.ToolInputSchemaParam
	m, err := schemaObject(raw)
	if err != nil {
		return s, err
	}
	extra := map[string]any{}
	for k, v := range m {
		switch k {
		case "type":
			// Always "object"; the SDK writes it.
		case "properties":
			s.Properties = v
		case "required":
			list, ok := v.([]any)
			if !ok {
				return s, fmt.Errorf("required is not an array")
			}
			for _, r := range list {
				name, ok := r.(string)
				if !ok {
					return s, fmt.Errorf("required holds a non-string")
				}
				s.Required = append(s.Required, name)
			}
		default:
			extra[k] = v
		}
	}
	if len(extra) > 0 {
		s.ExtraFields = extra
	}
	return s, nil
}
