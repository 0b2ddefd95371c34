package crewlet

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Exchange is one earlier exchange of a conversation as a seat saw it: a
// trigger it answered, with the rounds of that answer (tool calls, results,
// the final answer or note), or a reply it received.
type Exchange struct {
	// MessageID and Seq name the transcript message that opened the
	// exchange (messages.id and messages.seq).
	MessageID string
	Seq       int64
	Messages  []ChatMessage
}

// ConversationSummary is a compaction summary: one model call's account of a
// seat's oldest exchanges of a conversation, up to and including the message
// ThroughID. It is made once per (seat, conversation, ThroughID) and reused.
type ConversationSummary struct {
	ThroughID  string `json:"through_id"`
	ThroughSeq int64  `json:"through_seq"`
	// Covered counts the exchanges it stands for, including those of an
	// earlier summary it folded in.
	Covered int    `json:"covered"`
	Text    string `json:"summary"`
}

// Tunables of context assembly, stated in the docs.
const (
	// DefaultTokensPerByte estimates tokens where no provider has reported
	// usage yet: about four bytes a token for English text and code.
	DefaultTokensPerByte = 0.25
	// minTokensPerByte and maxTokensPerByte bound a calibration: real
	// tokenizers take from about ten bytes a token (long English words)
	// to under one (some scripts).
	minTokensPerByte = 0.1
	maxTokensPerByte = 1.5
	// ClipToolResultBytes is what is kept of an older tool result when a
	// turn's own rounds outgrow the context budget.
	ClipToolResultBytes = 1024
	// messageOverheadBytes stands for the framing every message costs (role,
	// separators) beyond its text.
	messageOverheadBytes = 16
)

// ContextInput is everything one model round's context is assembled from,
// as recorded in Postgres.
type ContextInput struct {
	System string
	Tools  []ToolSpec
	// Summary stands for the exchanges before Earlier; nil when none was made.
	Summary *ConversationSummary
	// Earlier are the conversation's exchanges after Summary, oldest first.
	Earlier []Exchange
	// Current is this turn's thread: its trigger, then its rounds.
	Current []ChatMessage
	// Budget is the most tokens the request may carry.
	Budget int64
	// TokensPerByte calibrates the estimate from what the provider reported
	// for an earlier round; 0 means DefaultTokensPerByte.
	TokensPerByte float64
	// MayCompact allows the plan to ask for a compaction summary.
	MayCompact bool
}

// ContextPlan is what a model round sends, or what must happen first.
type ContextPlan struct {
	Messages []ChatMessage
	// Tokens is the estimated size of the request: system prompt, tools and
	// messages.
	Tokens int64
	// Bytes is the measure Tokens was estimated from; a round records it so
	// the provider's reported usage can calibrate the next estimate.
	Bytes int64
	// Compact, when above 0, says the plan does not fit: summarize Summary
	// and Earlier[:Compact] first, then assemble again without compacting.
	Compact int
	// Clipped counts the tool results cut to ClipToolResultBytes.
	Clipped int
	// Oversize is set when the thread's trigger alone does not fit the
	// budget: the round must not be sent.
	Oversize bool
}

// AssembleContext lays out one model round's request
// (docs/architecture.md, "A turn"): the conversation as it stands (a compaction
// summary, then the earlier exchanges), then this turn's thread. It is the one
// place that decides what fits, and a pure function of its input, so a round
// re-run on the same recorded state sends the same context.
//
// When the whole does not fit Budget, it first asks for the oldest earlier
// exchanges to be compacted (keeping the newest that fill at most a quarter
// of the budget, so later turns reuse the summary instead of making one
// each), then clips older tool results, oldest first, to
// ClipToolResultBytes; the latest round's results are never clipped.
func AssembleContext(in ContextInput) ContextPlan {
	ratio := in.TokensPerByte
	if ratio <= 0 {
		ratio = DefaultTokensPerByte
	}
	// A provider that reports nonsense (a local server counting nothing)
	// must not talk the budget out of compacting.
	ratio = min(max(ratio, minTokensPerByte), maxTokensPerByte)
	tokens := func(bytes int64) int64 { return int64(math.Ceil(float64(bytes) * ratio)) }

	fixed := int64(len(in.System))
	for _, t := range in.Tools {
		fixed += int64(len(t.Name) + len(t.Description) + len(t.Schema))
	}
	current := append([]ChatMessage(nil), in.Current...)
	if len(current) > 0 && tokens(fixed+messageBytes(current[0])) > in.Budget {
		b := fixed + messagesBytes(current[:1])
		return ContextPlan{Oversize: true, Bytes: b, Tokens: tokens(b)}
	}
	earlier := make([][]ChatMessage, len(in.Earlier))
	earlierBytes := make([]int64, len(in.Earlier))
	var total = fixed + messagesBytes(current)
	for i, x := range in.Earlier {
		earlier[i] = closeExchange(x.Messages)
		earlierBytes[i] = messagesBytes(earlier[i])
		total += earlierBytes[i]
	}
	var head []ChatMessage
	if in.Summary != nil {
		head = append(head, SummaryMessage(*in.Summary))
		total += messagesBytes(head)
	}

	if tokens(total) > in.Budget && in.MayCompact && len(earlier) > 0 {
		// Room for the exchanges kept beside the summary: what the thread
		// and a summary (an eighth of the budget) leave, at most a quarter.
		room := in.Budget - tokens(fixed+messagesBytes(current)) - in.Budget/8
		keep := min(room, in.Budget/4)
		kept := 0
		var cum int64
		for i := len(earlier) - 1; i >= 0; i-- {
			if cum+tokens(earlierBytes[i]) > keep {
				break
			}
			cum += tokens(earlierBytes[i])
			kept++
		}
		return ContextPlan{Compact: max(1, len(earlier)-kept), Bytes: total, Tokens: tokens(total)}
	}

	msgs := head
	for _, x := range earlier {
		msgs = append(msgs, x...)
	}
	// The thread's latest round: its results are what the model is about
	// to read, so they are never clipped.
	protectFrom := len(msgs)
	for i := len(current) - 1; i >= 0; i-- {
		if current[i].Role == "assistant" {
			protectFrom = len(msgs) + i
			break
		}
	}
	msgs = append(msgs, current...)
	clipped := 0
	for i := 0; i < protectFrom && tokens(total) > in.Budget; i++ {
		m := msgs[i]
		if m.Role != "tool" || len(m.Content) <= ClipToolResultBytes {
			continue
		}
		before := int64(len(m.Content))
		if c := ClipText(m.Content, ClipToolResultBytes); len(c) < len(m.Content) {
			m.Content = c
		} else {
			continue // the marker would cost more than the cut saves
		}
		msgs[i] = m
		total -= before - int64(len(m.Content))
		clipped++
	}
	return ContextPlan{Messages: msgs, Tokens: tokens(total), Bytes: total, Clipped: clipped}
}

// SummaryMessage is how a compaction summary reads to the model.
func SummaryMessage(s ConversationSummary) ChatMessage {
	return ChatMessage{Role: "user", Content: fmt.Sprintf(
		"Summary of the earlier part of this conversation (%d exchanges, compacted to fit the context budget):\n\n%s", s.Covered, s.Text)}
}

// ClipText keeps the first keep bytes of s (on a rune boundary) and says
// how much was cut.
func ClipText(s string, keep int) string {
	if len(s) <= keep {
		return s
	}
	kept := RunePrefix(s, keep)
	return fmt.Sprintf("%s\n[clipped: %d of %d bytes cut to keep the conversation within the context budget]", kept, len(s)-len(kept), len(s))
}

// Clip is s cut to at most most bytes, at a rune boundary, with a marker
// saying how much was left out: how an answer of the API clips a text.
func Clip(s string, most int) string {
	if len(s) <= most {
		return s
	}
	kept := RunePrefix(s, most)
	return kept + fmt.Sprintf("\n…[clipped by crewlet: %d of %d bytes left out; one text of this answer holds at most %d]", len(s)-len(kept), len(s), most)
}

// RunePrefix is the longest prefix of s of at most n bytes that does not
// split a rune: the one way every clip in crewlet cuts text.
func RunePrefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// closeExchange makes an earlier exchange sendable on its own: a note reads
// as what the seat said, an empty answer is dropped, every tool call has a
// result and every result a call, so no provider refuses the history.
func closeExchange(in []ChatMessage) []ChatMessage {
	out := make([]ChatMessage, 0, len(in))
	open := map[string]bool{}
	var pending []string
	flush := func() {
		for _, id := range pending {
			if open[id] {
				out = append(out, ChatMessage{Role: "tool", ToolCallID: id, IsError: true, Content: "No result was recorded for this call."})
			}
		}
		pending, open = nil, map[string]bool{}
	}
	for _, m := range in {
		switch m.Role {
		case "tool":
			if !open[m.ToolCallID] {
				continue
			}
			open[m.ToolCallID] = false
			out = append(out, m)
			continue
		case "note":
			m = ChatMessage{Role: "assistant", Content: m.Content}
		}
		flush()
		if m.Role == "assistant" && m.Content == "" && len(m.ToolCalls) == 0 {
			continue
		}
		out = append(out, m)
		for _, c := range m.ToolCalls {
			open[c.ID] = true
			pending = append(pending, c.ID)
		}
	}
	flush()
	return out
}

func messagesBytes(msgs []ChatMessage) int64 {
	var n int64
	for _, m := range msgs {
		n += messageBytes(m)
	}
	return n
}

// messageBytes is the size a message counts for in the estimate.
func messageBytes(m ChatMessage) int64 {
	n := int64(len(m.Content) + len(m.ToolCallID) + messageOverheadBytes)
	for _, c := range m.ToolCalls {
		n += int64(len(c.ID) + len(c.Name) + len(c.Args))
	}
	return n
}

// CompactionSystem is the system prompt of a compaction call.
const CompactionSystem = "You compact conversations for an AI agent so it can carry on without the full text. " +
	"Write a summary of the conversation you are given that keeps every fact, name, number, decision, request, " +
	"open question and commitment, and who said what; drop pleasantries and repetition. " +
	"Write plain prose, at most 300 words, and nothing but the summary."

// CompactionPrompt is the user message of a compaction call: the summary it
// folds in, if any, then each message of the exchanges to cover on one line
// ("- ..."), each clipped to its share of budgetBytes (at least 200 bytes);
// lines that would take the whole past budgetBytes are left out, with a
// line that says how many.
func CompactionPrompt(prev *ConversationSummary, exchanges []Exchange, budgetBytes int) string {
	var lines []string
	if prev != nil {
		lines = append(lines, "(summary of what came before) "+OneLine(prev.Text, 0))
	}
	for _, x := range exchanges {
		for _, m := range closeExchange(x.Messages) {
			switch m.Role {
			case "user":
				lines = append(lines, OneLine(m.Content, 0))
			case "assistant":
				if m.Content != "" {
					lines = append(lines, "you answered: "+OneLine(m.Content, 0))
				}
				for _, c := range m.ToolCalls {
					lines = append(lines, fmt.Sprintf("you called %s(%s)", c.Name, OneLine(string(c.Args), 0)))
				}
			case "tool":
				lines = append(lines, "tool result: "+OneLine(m.Content, 0))
			}
		}
	}
	perLine := max(200, budgetBytes/max(1, len(lines)))
	var b strings.Builder
	b.WriteString("Summarize this conversation:\n")
	for i, l := range lines {
		if len(l) > perLine {
			l = ClipText(l, perLine)
		}
		l = "\n- " + OneLine(l, 0)
		if b.Len()+len(l) > budgetBytes && i > 0 {
			// So many messages that even clipped they would not fit the
			// summarizer: the oldest are kept, the rest said to be missing.
			fmt.Fprintf(&b, "\n- (%d later messages left out: they did not fit)", len(lines)-i)
			break
		}
		b.WriteString(l)
	}
	return b.String()
}

// OneLine is s on one line (every run of white space one space) and, when
// max is above 0, at most max runes, an ellipsis marking a cut.
func OneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); max > 0 && len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
