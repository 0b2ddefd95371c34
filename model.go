package crewlet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// ChatMessage is one message of a model conversation.
type ChatMessage struct {
	// Role is "user", "assistant" or "tool".
	Role    string `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID names the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// IsError marks a tool result that reports a failure.
	IsError bool `json:"is_error,omitempty"`
}

// ToolCall is one tool call a model asked for.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Args is the JSON object of arguments.
	Args json.RawMessage `json:"args"`
}

// ToolSpec offers a tool to a model.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Schema is the JSON Schema of the arguments object.
	Schema json.RawMessage `json:"schema"`
	// ReadOnly marks a tool that changes nothing (MCP readOnlyHint): its
	// calls may be retried. Providers do not send it.
	ReadOnly bool `json:"read_only,omitempty"`
}

// ReadOnlyTool reports whether the catalog offers the tool named name as
// read-only: the one test of whether a call may be retried in a turn, or
// run live in a replay.
func ReadOnlyTool(catalog []ToolSpec, name string) bool {
	for _, t := range catalog {
		if t.Name == name {
			return t.ReadOnly
		}
	}
	return false
}

// ModelRequest is one model call: the system prompt, the conversation so far
// and the tools on offer.
type ModelRequest struct {
	// Seat and Role say who asks; Trigger is the message the conversation
	// answers. Providers send only System, Messages and Tools; the scripted
	// provider matches its rules on Trigger.
	Seat      string        `json:"seat,omitempty"`
	Role      string        `json:"role,omitempty"`
	Trigger   *Message      `json:"trigger,omitempty"`
	System    string        `json:"system"`
	Messages  []ChatMessage `json:"messages"`
	Tools     []ToolSpec    `json:"tools,omitempty"`
	MaxTokens int           `json:"max_tokens,omitempty"`
	// Purpose says what the call is for: a turn's round (empty), a
	// compaction summary or a post-turn reflection. Providers do not send
	// it; the scripted provider answers each kind its own way.
	Purpose string `json:"purpose,omitempty"`
}

// ReflectionPrompt is the last message of a post-turn reflection call.
const ReflectionPrompt = "Reflection: this turn is over and your answers were sent. " +
	"What from it is worth keeping in your diary for later turns (facts learned, decisions, commitments, what to follow up)? " +
	"Answer with the diary entry only, at most a few sentences, or NOTHING if nothing is worth keeping."

// Purposes of a model call other than a turn's round.
const (
	PurposeCompact = "compact"
	PurposeReflect = "reflect"
)

// Usage is the tokens a model call consumed.
type Usage struct {
	// InputTokens counts every prompt token, cached ones included.
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CachedTokens is the part of InputTokens the provider read from its
	// prompt cache, which costs less.
	CachedTokens int64 `json:"cached_tokens,omitempty"`
}

// ModelResponse is a model's answer: text, tool calls, or both.
type ModelResponse struct {
	Text      string     `json:"text"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	Usage     Usage      `json:"usage"`
	// Model is the model the provider says answered; "" when it did not
	// say. A server may route to another model than the one asked for.
	Model string `json:"model,omitempty"`
}

// ChatModel is a model backend with tool calling
// (docs/architecture.md, "Model backends").
type ChatModel interface {
	Chat(ctx context.Context, req ModelRequest) (ModelResponse, error)
}

// StreamingChatModel is a ChatModel that hands over its answer's text as
// it is produced, for the live stream (docs/architecture.md, "Live stream").
type StreamingChatModel interface {
	ChatModel
	// ChatStream is Chat, calling onDelta with each piece of the answer's
	// text, in order, as it comes; the pieces make up the response's Text.
	ChatStream(ctx context.Context, req ModelRequest, onDelta func(text string)) (ModelResponse, error)
}

// Kinds of provider failure. A rate limit and a server error are worth
// retrying; an exhausted quota cools the credential off; a bad request or an
// auth failure will not get better by retrying.
const (
	ProviderRateLimited = "rate_limited"
	ProviderExhausted   = "exhausted"
	ProviderServerError = "server_error"
	ProviderBadRequest  = "bad_request"
	ProviderAuth        = "auth"
)

// ProviderError is a classified failure of a model provider. Message never
// carries a credential.
type ProviderError struct {
	Provider string
	Kind     string
	// RetryAfter is the provider's advice, when it gave one.
	RetryAfter time.Duration
	Status     int
	Message    string
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d): %s", e.Provider, e.Kind, e.Status, e.Message)
}

// Down reports whether a server error says the provider is down rather
// than that it failed this request: it gave no HTTP response at all (a
// refused or reset connection, a timeout), or answered 502, 503, 504 or
// 529 (overloaded). Nothing a request holds causes that.
func (e *ProviderError) Down() bool {
	if e.Kind != ProviderServerError {
		return false
	}
	switch e.Status {
	case 0, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, statusOverloaded:
		return true
	}
	return false
}

// statusOverloaded is the status Anthropic answers when it is overloaded.
const statusOverloaded = 529

// Retryable reports whether trying the same call again may succeed.
func (e *ProviderError) Retryable() bool {
	return e.Kind == ProviderRateLimited || e.Kind == ProviderServerError
}
