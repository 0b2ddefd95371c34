package model

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
)

// The conversation the history tests send: a compaction summary, an earlier
// exchange with a tool call, a reply received, then the current thread.
const (
	histSystem    = "You are the CTO."
	histSummary   = "The operator is Dana; she runs the Oslo office."
	histExchange1 = "Message from operator (conversation c-1):\n\nremember the number 7"
	histReply     = "Reply from cfo to your message (conversation c-1):\n\nbudget approved"
	histCurrent   = "what number did I give you?"
	histBroken    = "Message from operator (conversation c-1):\n\nwrite 8 in the diary"
	noResult      = "No result was recorded for this call."
)

var diaryTool = crewlet.ToolSpec{
	Name: "diary_write", Description: "Write to the diary",
	Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
}

func histSummaryValue() crewlet.ConversationSummary {
	return crewlet.ConversationSummary{ThroughID: "m-0", ThroughSeq: 1, Covered: 2, Text: histSummary}
}

// histEarlier is exchange 1 (a trigger answered after a tool call) and
// exchange 2 (a reply received), as the transcript records them.
func histEarlier() []crewlet.Exchange {
	return []crewlet.Exchange{
		{MessageID: "m-1", Seq: 2, Messages: []crewlet.ChatMessage{
			{Role: "user", Content: histExchange1},
			{Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "call_1", Name: "diary_write", Args: json.RawMessage(`{"text":"7"}`)}}},
			{Role: "tool", ToolCallID: "call_1", Content: "written"},
			{Role: "assistant", Content: "Noted: 7"},
		}},
		{MessageID: "m-2", Seq: 3, Messages: []crewlet.ChatMessage{
			{Role: "user", Content: histReply},
		}},
	}
}

// histBrokenEarlier is an exchange whose thread broke after the model asked
// for a tool: no result was recorded.
func histBrokenEarlier() []crewlet.Exchange {
	return []crewlet.Exchange{{MessageID: "m-1", Seq: 2, Messages: []crewlet.ChatMessage{
		{Role: "user", Content: histBroken},
		{Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "call_9", Name: "diary_write", Args: json.RawMessage(`{"text":"8"}`)}}},
	}}}
}

// histRequest assembles a round's request the way a turn does; rounds are
// the current thread's rounds so far, after its trigger.
func histRequest(t *testing.T, summary *crewlet.ConversationSummary, earlier []crewlet.Exchange, rounds ...crewlet.ChatMessage) crewlet.ModelRequest {
	t.Helper()
	in := crewlet.ContextInput{
		System:  histSystem,
		Tools:   []crewlet.ToolSpec{diaryTool},
		Summary: summary,
		Earlier: earlier,
		Current: append([]crewlet.ChatMessage{{Role: "user", Content: histCurrent}}, rounds...),
		Budget:  100000,
	}
	plan := crewlet.AssembleContext(in)
	if plan.Compact != 0 || plan.Oversize || plan.Clipped != 0 || len(plan.Messages) == 0 {
		t.Fatalf("AssembleContext = %+v, want the whole conversation sent as it is", plan)
	}
	return crewlet.ModelRequest{
		Seat: "cto", Role: "executive", Trigger: trigger(histCurrent),
		System: in.System, Tools: in.Tools, Messages: plan.Messages,
	}
}

// oaiLines renders the messages of a chat-completions body one a line, so a
// failure shows the whole sequence against the one wanted.
func oaiLines(t *testing.T, body oaiRequest) []string {
	t.Helper()
	var out []string
	for _, m := range body.Messages {
		content, err := json.Marshal(m.Content)
		if err != nil {
			t.Fatalf("content %v: %v", m.Content, err)
		}
		line := fmt.Sprintf("%s %s", m.Role, content)
		if m.ToolCallID != "" {
			line += " for " + m.ToolCallID
		}
		for _, c := range m.ToolCalls {
			line += fmt.Sprintf(" call[%s %s %s %s]", c.Type, c.ID, c.Function.Name, c.Function.Arguments)
		}
		out = append(out, line)
	}
	return out
}

func quoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestOpenAISendsEarlierExchanges(t *testing.T) {
	t.Parallel()
	sum := histSummaryValue()
	tests := []struct {
		name    string
		summary *crewlet.ConversationSummary
		earlier []crewlet.Exchange
		want    []string
	}{
		{
			name: "summary, tool call of an earlier turn, reply, current", summary: &sum, earlier: histEarlier(),
			want: []string{
				"system " + quoted(histSystem),
				"user " + quoted(crewlet.SummaryMessage(sum).Content),
				"user " + quoted(histExchange1),
				`assistant null call[function call_1 diary_write {"text":"7"}]`,
				`tool "written" for call_1`,
				`assistant "Noted: 7"`,
				"user " + quoted(histReply),
				"user " + quoted(histCurrent),
			},
		},
		{
			name: "earlier call with no recorded result", earlier: histBrokenEarlier(),
			want: []string{
				"system " + quoted(histSystem),
				"user " + quoted(histBroken),
				`assistant null call[function call_9 diary_write {"text":"8"}]`,
				"tool " + quoted("Error: "+noResult) + " for call_9",
				"user " + quoted(histCurrent),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeProvider(t, reply{status: 200, body: oaiText("You gave me 7.", 90, 5)})
			resp, err := newTestOpenAI(t, f).Chat(context.Background(), histRequest(t, tt.summary, tt.earlier))
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if resp.Text != "You gave me 7." {
				t.Errorf("text = %q, want the model's answer", resp.Text)
			}
			r := f.only(t)
			got := oaiLines(t, decodeBody[oaiRequest](t, r))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("messages:\n got  %s\n want %s\nbody: %s", strings.Join(got, "\n      "), strings.Join(tt.want, "\n      "), r.body)
			}
		})
	}
}

// antLines renders the messages of a Messages API body one a line, each
// block of a message in order.
func antLines(t *testing.T, body antRequest) []string {
	t.Helper()
	var out []string
	for _, m := range body.Messages {
		var blocks []string
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				blocks = append(blocks, "text "+quoted(b.Text))
			case "tool_use":
				var input bytes.Buffer
				if err := json.Compact(&input, b.Input); err != nil {
					t.Fatalf("tool_use input %s: %v", b.Input, err)
				}
				blocks = append(blocks, fmt.Sprintf("tool_use %s %s %s", b.ID, b.Name, input.String()))
			case "tool_result":
				var texts []string
				for _, c := range b.Content {
					texts = append(texts, c.Type+" "+quoted(c.Text))
				}
				blocks = append(blocks, fmt.Sprintf("tool_result %s is_error=%t [%s]", b.ToolUseID, b.IsError, strings.Join(texts, ", ")))
			default:
				blocks = append(blocks, "unexpected block "+b.Type)
			}
		}
		out = append(out, m.Role+": "+strings.Join(blocks, " | "))
	}
	return out
}

func TestAnthropicSendsEarlierExchanges(t *testing.T) {
	t.Parallel()
	sum := histSummaryValue()
	tests := []struct {
		name    string
		summary *crewlet.ConversationSummary
		earlier []crewlet.Exchange
		want    []string
	}{
		{
			// Runs of one role merge into one message, so the roles
			// alternate as the API requires.
			name: "summary, tool call of an earlier turn, reply, current", summary: &sum, earlier: histEarlier(),
			want: []string{
				"user: text " + quoted(crewlet.SummaryMessage(sum).Content) + " | text " + quoted(histExchange1),
				`assistant: tool_use call_1 diary_write {"text":"7"}`,
				`user: tool_result call_1 is_error=false [text "written"]`,
				`assistant: text "Noted: 7"`,
				"user: text " + quoted(histReply) + " | text " + quoted(histCurrent),
			},
		},
		{
			// The synthetic result comes before the next text, as the API
			// wants tool results first in a user message.
			name: "earlier call with no recorded result", earlier: histBrokenEarlier(),
			want: []string{
				"user: text " + quoted(histBroken),
				`assistant: tool_use call_9 diary_write {"text":"8"}`,
				"user: tool_result call_9 is_error=true [text " + quoted(noResult) + "] | text " + quoted(histCurrent),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeProvider(t, reply{status: 200, body: antMessage("end_turn", map[string]any{"type": "text", "text": "You gave me 7."})})
			resp, err := newTestAnthropic(t, f, 0).Chat(context.Background(), histRequest(t, tt.summary, tt.earlier))
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if resp.Text != "You gave me 7." {
				t.Errorf("text = %q, want the model's answer", resp.Text)
			}
			r := f.only(t)
			body := decodeBody[antRequest](t, r)
			if len(body.System) != 1 || body.System[0].Text != histSystem {
				t.Errorf("system = %+v, want %q", body.System, histSystem)
			}
			if len(body.Tools) != 1 || body.Tools[0].Name != "diary_write" {
				t.Errorf("tools = %+v, want diary_write offered", body.Tools)
			}
			got := antLines(t, body)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("messages:\n got  %s\n want %s\nbody: %s", strings.Join(got, "\n      "), strings.Join(tt.want, "\n      "), r.body)
			}
		})
	}
}
