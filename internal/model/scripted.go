// Package model holds crewlet's model providers.
package model

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/turnrules"
)

// Scripted is a crewlet.ChatModel that answers from fixed rules, for local
// runs, tests and benchmarks. The first rule whose regexp matches the
// trigger's body answers: a rule with tools first asks for those tool calls,
// and once their results are in replies with its template; a rule with fail
// fails the call. With no match it echoes the text under the seat's handle.
//
// Usage is counted so that budgets can be tested: input tokens are the bytes
// of the system prompt, every message's content and tool calls, and the
// tools on offer over 4, output tokens the
// bytes of the reply (or of the tool calls' arguments) over 4, each at
// least 1.
type Scripted struct {
	rules []scriptedRule
	delay time.Duration
	probe *Probe
}

var _ crewlet.ChatModel = (*Scripted)(nil)

type scriptedRule struct {
	match *regexp.Regexp
	// onResult matches the latest tool result instead of the trigger.
	onResult bool
	reply    *template.Template
	tools    []scriptedTool
	fail     string
	failKind string
}

// failStatus is the HTTP status a scripted failure of each kind reports.
var failStatus = map[string]int{
	crewlet.ProviderBadRequest: 400, crewlet.ProviderAuth: 401, crewlet.ProviderRateLimited: 429,
	crewlet.ProviderExhausted: 429, crewlet.ProviderServerError: 500,
}

type scriptedTool struct {
	name string
	// args is the arguments object with every string a parsed template.
	args map[string]any
}

// ReplyData is what a scripted reply template, and every string in a rule's
// tool arguments, can use.
type ReplyData struct {
	Text         string
	From         string
	Handle       string
	Role         string
	Conversation string
	// Groups are the match's submatches; index 0 is the whole match.
	Groups []string
	// Results are the texts of the tool results since the trigger, in order.
	Results []string
	// Tools maps each called tool's name to its result's text; a tool called
	// twice keeps its last result.
	Tools map[string]string
	// Last is the latest tool result's text.
	Last string
	// History is the conversation before the message being answered, oldest
	// first: earlier triggers, replies received and a compaction summary
	// (Role "user"), and the seat's earlier answers (Role "assistant").
	History []HistoryEntry
}

// HistoryEntry is one earlier message of the conversation.
type HistoryEntry struct {
	Role string
	// Text is the message as the model reads it; for what the seat was
	// told, From and Body are its sender and its text without the header.
	Text string
	From string
	Body string
}

// NewScripted compiles a scripted profile. The config package validated it,
// so an error here means a caller skipped validation.
func NewScripted(p config.Profile, probe *Probe) (*Scripted, error) {
	s := &Scripted{delay: p.Delay, probe: probe}
	for i, r := range p.Rules {
		expr, onResult := r.Match, false
		if r.OnResult != "" {
			expr, onResult = r.OnResult, true
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].match: %w", i, err)
		}
		tmpl, err := parseTemplate("reply", r.Reply)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].reply: %w", i, err)
		}
		rule := scriptedRule{match: re, onResult: onResult, reply: tmpl, fail: r.Fail, failKind: r.FailKind}
		if rule.failKind == "" {
			rule.failKind = crewlet.ProviderBadRequest
		}
		for j, t := range r.Tools {
			args := map[string]any{}
			if t.Args != nil {
				c, err := compileArgs(t.Args)
				if err != nil {
					return nil, fmt.Errorf("rules[%d].tools[%d].args.%w", i, j, err)
				}
				args = c.(map[string]any)
			}
			rule.tools = append(rule.tools, scriptedTool{name: t.Name, args: args})
		}
		s.rules = append(s.rules, rule)
	}
	return s, nil
}

func parseTemplate(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(text)
}

// compileArgs copies v with every string parsed as a template; the copy
// leaves the config's own map alone.
func compileArgs(v any) (any, error) {
	switch v := v.(type) {
	case string:
		return parseTemplate("args", v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			c, err := compileArgs(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			c, err := compileArgs(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	}
	return v, nil
}

// renderArgs executes every template in compiled args.
func renderArgs(v any, data ReplyData) (any, error) {
	switch v := v.(type) {
	case *template.Template:
		var b strings.Builder
		if err := v.Execute(&b, data); err != nil {
			return nil, err
		}
		return b.String(), nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := renderArgs(e, data)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			r, err := renderArgs(e, data)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

var _ crewlet.StreamingChatModel = (*Scripted)(nil)

// Chat answers req after the profile's delay. It matches on req.Trigger,
// or on the last user message when there is no trigger.
func (s *Scripted) Chat(ctx context.Context, req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
	return s.ChatStream(ctx, req, nil)
}

// ChatStream is Chat handing over its answer's text in up to
// scriptedDeltas pieces spread over the profile's delay, as a streaming
// provider would.
func (s *Scripted) ChatStream(ctx context.Context, req crewlet.ModelRequest, onDelta func(string)) (crewlet.ModelResponse, error) {
	var eventID string
	if t := req.Trigger; t != nil {
		eventID = t.EventID
	}
	if s.probe != nil {
		// A compaction or reflection call is recorded under its purpose, so
		// a test can count them apart from a turn's rounds.
		phase := "start"
		if req.Purpose != "" {
			phase = req.Purpose + "_start"
		}
		s.probe.record(req.Seat, eventID, phase, req.Messages)
		defer s.probe.record(req.Seat, eventID, strings.TrimSuffix(phase, "start")+"end", nil)
	}
	resp, err := s.respond(req)
	var pieces []string
	if onDelta != nil && err == nil {
		pieces = deltaPieces(resp.Text)
	}
	steps := max(len(pieces), 1)
	for i := range steps {
		if s.delay > 0 {
			t := time.NewTimer(s.delay / time.Duration(steps))
			select {
			case <-ctx.Done():
				t.Stop()
				return crewlet.ModelResponse{}, ctx.Err()
			case <-t.C:
			}
		}
		if i < len(pieces) {
			onDelta(pieces[i])
		}
	}
	return resp, err
}

// scriptedDeltas is the most pieces a scripted answer streams in.
const scriptedDeltas = 8

// deltaPieces cuts text at spaces into at most scriptedDeltas pieces that
// make it up.
func deltaPieces(text string) []string {
	if text == "" {
		return nil
	}
	words := strings.SplitAfter(text, " ")
	per := (len(words) + scriptedDeltas - 1) / scriptedDeltas
	var out []string
	for i := 0; i < len(words); i += per {
		out = append(out, strings.Join(words[i:min(i+per, len(words))], ""))
	}
	return out
}

// respond is the rule's answer to req.
func (s *Scripted) respond(req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
	data := ReplyData{Handle: req.Seat, Role: req.Role}
	if t := req.Trigger; t != nil {
		data.Text, data.From, data.Conversation = t.Body, t.From, t.Conversation
	}
	// What happened since the last user message: the tool calls asked for
	// and their results.
	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == "user" {
			lastUser = i
		}
	}
	if req.Trigger == nil && lastUser >= 0 {
		data.Text = req.Messages[lastUser].Content
	}
	in := inputTokens(req)
	switch req.Purpose {
	case crewlet.PurposeCompact:
		return textResponse(scriptedSummary(data.Text), in), nil
	case crewlet.PurposeReflect:
		return textResponse(scriptedReflection(req.Messages), in), nil
	}
	for _, m := range req.Messages[:max(lastUser, 0)] {
		if (m.Role == "user" || m.Role == "assistant") && m.Content != "" {
			e := HistoryEntry{Role: m.Role, Text: m.Content, Body: m.Content}
			if from, body, ok := turnrules.ParseTrigger(m.Content); ok {
				e.From, e.Body = from, body
			}
			data.History = append(data.History, e)
		}
	}
	called := false
	names := map[string]string{}
	for _, m := range req.Messages[lastUser+1:] {
		switch m.Role {
		case "assistant":
			for _, c := range m.ToolCalls {
				called = true
				names[c.ID] = c.Name
			}
		case "tool":
			data.Results = append(data.Results, m.Content)
			if name, ok := names[m.ToolCallID]; ok {
				if data.Tools == nil {
					data.Tools = map[string]string{}
				}
				data.Tools[name] = m.Content
			}
		}
	}
	if n := len(data.Results); n > 0 {
		data.Last = data.Results[n-1]
		// A rule that follows a tool result: its match is the result's.
		for _, r := range s.rules {
			if !r.onResult {
				continue
			}
			if groups := r.match.FindStringSubmatch(data.Last); groups != nil {
				data.Groups = groups
				return s.answer(r, data, in, true)
			}
		}
	}
	for _, r := range s.rules {
		if r.onResult {
			continue
		}
		groups := r.match.FindStringSubmatch(data.Text)
		if groups == nil {
			continue
		}
		if r.fail != "" {
			return crewlet.ModelResponse{}, &crewlet.ProviderError{Provider: "scripted", Kind: r.failKind, Status: failStatus[r.failKind], Message: r.fail}
		}
		data.Groups = groups
		return s.answer(r, data, in, !called)
	}
	return textResponse(fmt.Sprintf("[%s] %s", req.Seat, data.Text), in), nil
}

// answer is a matched rule's response: its tool calls when callTools and it
// has any, else its reply.
func (s *Scripted) answer(r scriptedRule, data ReplyData, in int64, callTools bool) (crewlet.ModelResponse, error) {
	if len(r.tools) > 0 && callTools {
		return s.toolCalls(r, data, in)
	}
	var b strings.Builder
	if err := r.reply.Execute(&b, data); err != nil {
		return crewlet.ModelResponse{}, crewlet.Errorf(crewlet.EINVALID, "scripted reply template for %q failed: %v", r.match, err)
	}
	return textResponse(b.String(), in), nil
}

// scriptedSummary stands in for a model's compaction summary: who said
// what, one clipped line per message of the conversation it is given
// (tool traffic left out), oldest first, up to scriptedSummaryMax bytes. A
// fact told early survives it, and it stays short however long the
// conversation grew, as a real summary would.
func scriptedSummary(prompt string) string {
	var b strings.Builder
	b.WriteString("Earlier:")
	for _, line := range strings.Split(prompt, "\n") {
		line, ok := strings.CutPrefix(line, "- ")
		if !ok || strings.HasPrefix(line, "you called ") || strings.HasPrefix(line, "tool result: ") {
			continue
		}
		line = crewlet.OneLine(senderFirst(line), scriptedSummaryLine)
		sep := " / "
		if b.Len() == len("Earlier:") {
			sep = " "
		}
		if b.Len()+len(sep)+len(line) > scriptedSummaryMax {
			break
		}
		b.WriteString(sep)
		b.WriteString(line)
	}
	return b.String()
}

// senderFirst shortens a trigger's header ("Message from operator
// (conversation c1): ...") to its sender ("operator: ..."), as a scripted
// summary keeps it; other text stays as it is.
func senderFirst(text string) string {
	if from, body, ok := turnrules.ParseTrigger(text); ok {
		return from + ": " + body
	}
	return text
}

// Bounds of a scripted summary: a line per message, and the whole.
const (
	scriptedSummaryLine = 80
	scriptedSummaryMax  = 800
)

// scriptedReflection stands in for a reflection: what the seat was asked
// this turn, clipped.
func scriptedReflection(msgs []crewlet.ChatMessage) string {
	var asked []string
	for _, m := range msgs {
		if m.Role == "user" && m.Content != crewlet.ReflectionPrompt {
			asked = append(asked, crewlet.OneLine(senderFirst(m.Content), scriptedSummaryLine))
		}
	}
	return "Worth keeping: " + strings.Join(asked, " / ")
}

func (s *Scripted) toolCalls(r scriptedRule, data ReplyData, in int64) (crewlet.ModelResponse, error) {
	resp := crewlet.ModelResponse{}
	var out int
	for i, t := range r.tools {
		args, err := renderArgs(t.args, data)
		if err != nil {
			return crewlet.ModelResponse{}, crewlet.Errorf(crewlet.EINVALID, "scripted arguments of tool %s for %q failed: %v", t.name, r.match, err)
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return crewlet.ModelResponse{}, crewlet.Errorf(crewlet.EINVALID, "scripted arguments of tool %s for %q: %v", t.name, r.match, err)
		}
		resp.ToolCalls = append(resp.ToolCalls, crewlet.ToolCall{ID: fmt.Sprintf("call_%d", i+1), Name: t.name, Args: raw})
		out += len(raw)
	}
	resp.Usage = crewlet.Usage{InputTokens: in, OutputTokens: tokens(out)}
	return resp, nil
}

func textResponse(text string, in int64) crewlet.ModelResponse {
	return crewlet.ModelResponse{Text: text, Usage: crewlet.Usage{InputTokens: in, OutputTokens: tokens(len(text))}}
}

func inputTokens(req crewlet.ModelRequest) int64 {
	n := len(req.System)
	for _, m := range req.Messages {
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Args)
		}
	}
	// Tools on offer count, as they do with every real provider.
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Schema)
	}
	return tokens(n)
}

// tokens is the scripted provider's stand-in for a tokenizer: 4 bytes a
// token, at least 1.
func tokens(bytes int) int64 { return max(1, int64(bytes/4)) }

// New builds the model of the profile called name. probe may be nil; only
// the scripted provider records to it. The API key is read from the
// profile's api_key_env; an error names the variable, never its value.
func New(name string, p config.Profile, probe *Probe) (crewlet.ChatModel, error) {
	var m crewlet.ChatModel
	var err error
	switch p.Provider {
	case config.ProviderScripted:
		m, err = NewScripted(p, probe)
	case config.ProviderOpenAI:
		var key string
		if key, err = apiKey(p); err == nil {
			m, err = NewOpenAI(OpenAIOptions{BaseURL: p.BaseURL, Model: p.Model, APIKey: key, MaxTokens: p.MaxTokens})
		}
	case config.ProviderAnthropic:
		var key string
		if key, err = apiKey(p); err == nil {
			m, err = NewAnthropic(AnthropicOptions{BaseURL: p.BaseURL, Model: p.Model, APIKey: key, MaxTokens: p.MaxTokens})
		}
	default:
		err = crewlet.Errorf(crewlet.EINVALID, "unsupported provider %q; supported providers: %s, %s, %s",
			p.Provider, config.ProviderAnthropic, config.ProviderOpenAI, config.ProviderScripted)
	}
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	return m, nil
}

// apiKey reads a profile's key from the environment; a profile naming no
// variable sends none (a local OpenAI-compatible server).
func apiKey(p config.Profile) (string, error) {
	if p.APIKeyEnv == "" {
		return "", nil
	}
	key := strings.TrimSpace(os.Getenv(p.APIKeyEnv))
	if key == "" {
		return "", crewlet.Errorf(crewlet.EINVALID, "environment variable %s is not set or empty; export the API key in it", p.APIKeyEnv)
	}
	return key, nil
}

// Probe records when each scripted model call ran, on which node, as JSON
// lines appended to a file. Tests use it to prove that no seat ever ran two
// turns at once across nodes, without trusting logs. It is enabled by the
// scripted_probe test hook (internal/testhook) and is off otherwise.
type Probe struct {
	mu   sync.Mutex
	file *os.File
	node string
}

// ProbeRecord is one line of the probe file: a model call started or ended.
// A start with no end is a call its process died in.
type ProbeRecord struct {
	Seat    string    `json:"seat"`
	EventID string    `json:"event_id"`
	Node    string    `json:"node"`
	Phase   string    `json:"phase"`
	At      time.Time `json:"at"`
	// Messages are the request's messages, on a start: what the model was
	// asked with.
	Messages []crewlet.ChatMessage `json:"messages,omitempty"`
}

// OpenProbe opens the probe file at path for node, or returns nil when path
// is "".
func OpenProbe(path, node string) (*Probe, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open scripted probe: %w", err)
	}
	return &Probe{file: f, node: node}, nil
}

func (p *Probe) record(seat, eventID, phase string, msgs []crewlet.ChatMessage) {
	line, err := json.Marshal(ProbeRecord{Seat: seat, EventID: eventID, Node: p.node, Phase: phase, At: time.Now(), Messages: msgs})
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.file.Write(append(line, '\n'))
}
