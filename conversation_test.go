package crewlet

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Builders for the conversations below.

func userMsg(s string) ChatMessage { return ChatMessage{Role: "user", Content: s} }
func noteMsg(s string) ChatMessage { return ChatMessage{Role: "note", Content: s} }
func answerMsg(s string, calls ...ToolCall) ChatMessage {
	return ChatMessage{Role: "assistant", Content: s, ToolCalls: calls}
}
func resultMsg(id, s string) ChatMessage {
	return ChatMessage{Role: "tool", ToolCallID: id, Content: s}
}
func callOf(id, name, args string) ToolCall {
	return ToolCall{ID: id, Name: name, Args: json.RawMessage(args)}
}
func missingResult(id string) ChatMessage {
	return ChatMessage{Role: "tool", ToolCallID: id, IsError: true, Content: "No result was recorded for this call."}
}

// sized is a user message that counts for exactly n bytes in the estimate.
func sized(n int) ChatMessage {
	return userMsg(strings.Repeat("x", n-messageOverheadBytes))
}

// exchangeOf is an earlier exchange of one user message worth exactly
// tokens tokens at DefaultTokensPerByte.
func exchangeOf(i, tokens int) Exchange {
	return Exchange{MessageID: fmt.Sprintf("m%d", i), Seq: int64(i), Messages: []ChatMessage{sized(tokens * 4)}}
}

func exchangesOf(n, tokens int) []Exchange {
	out := make([]Exchange, n)
	for i := range out {
		out[i] = exchangeOf(i, tokens)
	}
	return out
}

// roundsThread is a turn's thread: a trigger, then rounds of one tool call
// each whose result is resultBytes long; the last round has its result too.
func roundsThread(rounds, resultBytes int) []ChatMessage {
	msgs := []ChatMessage{userMsg("please look into the build")}
	for r := range rounds {
		id := fmt.Sprintf("c%d", r)
		msgs = append(msgs,
			answerMsg("", callOf(id, "read_file", fmt.Sprintf(`{"path":"f%d.go"}`, r))),
			resultMsg(id, strings.Repeat(string(rune('a'+r%26)), resultBytes)))
	}
	return msgs
}

// wantBytes is the documented measure: system prompt, tools, and each
// message's text, call id, calls and framing.
func wantBytes(in ContextInput, msgs []ChatMessage) int64 {
	n := int64(len(in.System))
	for _, t := range in.Tools {
		n += int64(len(t.Name) + len(t.Description) + len(t.Schema))
	}
	for _, m := range msgs {
		n += int64(len(m.Content) + len(m.ToolCallID) + messageOverheadBytes)
		for _, c := range m.ToolCalls {
			n += int64(len(c.ID) + len(c.Name) + len(c.Args))
		}
	}
	return n
}

// threadOfBytes is a thread of one round whose result makes it, with a
// system prompt, exactly n bytes.
func threadOfBytes(system string, n int) []ChatMessage {
	thread := []ChatMessage{userMsg("hi"), answerMsg("", callOf("c1", "read_file", `{}`)), resultMsg("c1", "")}
	thread[2].Content = strings.Repeat("r", n-int(wantBytes(ContextInput{System: system}, thread)))
	return thread
}

func wantTokens(bytes int64, ratio float64) int64 {
	if ratio == 0 {
		ratio = DefaultTokensPerByte
	}
	return int64(math.Ceil(float64(bytes) * ratio))
}

// checkMeasure asserts a sendable plan's Bytes and Tokens describe its
// Messages.
func checkMeasure(t *testing.T, in ContextInput, plan ContextPlan) {
	t.Helper()
	if got, want := plan.Bytes, wantBytes(in, plan.Messages); got != want {
		t.Errorf("Bytes = %d, want %d (system + tools + messages)", got, want)
	}
	if got, want := plan.Tokens, wantTokens(plan.Bytes, in.TokensPerByte); got != want {
		t.Errorf("Tokens = %d, want ceil(%d bytes * ratio) = %d", got, plan.Bytes, want)
	}
}

func cloneMessages(msgs []ChatMessage) []ChatMessage {
	if msgs == nil {
		return nil
	}
	out := make([]ChatMessage, len(msgs))
	for i, m := range msgs {
		if m.ToolCalls != nil {
			calls := make([]ToolCall, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				c.Args = append(json.RawMessage(nil), c.Args...)
				calls[j] = c
			}
			m.ToolCalls = calls
		}
		out[i] = m
	}
	return out
}

func cloneInput(in ContextInput) ContextInput {
	out := in
	out.Tools = append([]ToolSpec(nil), in.Tools...)
	if in.Summary != nil {
		s := *in.Summary
		out.Summary = &s
	}
	if in.Earlier != nil {
		out.Earlier = make([]Exchange, len(in.Earlier))
		for i, x := range in.Earlier {
			x.Messages = cloneMessages(x.Messages)
			out.Earlier[i] = x
		}
	}
	out.Current = cloneMessages(in.Current)
	return out
}

func concat(parts ...[]ChatMessage) []ChatMessage {
	var out []ChatMessage
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestAssembleContextFits(t *testing.T) {
	t.Parallel()
	tools := []ToolSpec{{Name: "read_file", Description: "Reads a file.", Schema: json.RawMessage(`{"type":"object"}`)}}
	summary := &ConversationSummary{ThroughID: "m0", ThroughSeq: 1, Covered: 3, Text: "Ann asked for the Q3 numbers; they were sent."}
	earlier := []Exchange{
		{MessageID: "m1", Seq: 2, Messages: []ChatMessage{userMsg("what is the build status?"), answerMsg("", callOf("e1", "read_file", `{"path":"ci.log"}`)), resultMsg("e1", "all green"), answerMsg("The build is green.")}},
		{MessageID: "m2", Seq: 3, Messages: []ChatMessage{userMsg("thanks"), answerMsg("You're welcome.")}},
	}
	current := []ChatMessage{userMsg("and the deploy?"), answerMsg("", callOf("c1", "read_file", `{"path":"deploy.log"}`)), resultMsg("c1", "deployed at 10:02")}

	tests := []struct {
		name  string
		in    ContextInput
		want  []ChatMessage
		ratio float64 // the ratio Tokens must have been estimated with
	}{
		{
			name: "trigger only",
			in:   ContextInput{System: "You are Bob.", Current: current[:1], Budget: 1000},
			want: current[:1], ratio: DefaultTokensPerByte,
		},
		{
			name: "earlier exchanges then thread",
			in:   ContextInput{System: "You are Bob.", Tools: tools, Earlier: earlier, Current: current, Budget: 1000, MayCompact: true},
			want: concat(earlier[0].Messages, earlier[1].Messages, current), ratio: DefaultTokensPerByte,
		},
		{
			name: "summary first",
			in:   ContextInput{System: "You are Bob.", Tools: tools, Summary: summary, Earlier: earlier, Current: current, Budget: 1000, MayCompact: true},
			want: concat([]ChatMessage{SummaryMessage(*summary)}, earlier[0].Messages, earlier[1].Messages, current), ratio: DefaultTokensPerByte,
		},
		{
			name: "summary with no earlier exchanges",
			in:   ContextInput{System: "You are Bob.", Summary: summary, Current: current, Budget: 1000},
			want: concat([]ChatMessage{SummaryMessage(*summary)}, current), ratio: DefaultTokensPerByte,
		},
		{
			name: "calibrated ratio",
			in:   ContextInput{System: "You are Bob.", Tools: tools, Summary: summary, Earlier: earlier, Current: current, Budget: 1000, TokensPerByte: 1.0 / 3},
			want: concat([]ChatMessage{SummaryMessage(*summary)}, earlier[0].Messages, earlier[1].Messages, current), ratio: 1.0 / 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan := AssembleContext(tt.in)
			if !reflect.DeepEqual(plan.Messages, tt.want) {
				t.Fatalf("Messages:\ngot  %+v\nwant %+v", plan.Messages, tt.want)
			}
			if plan.Compact != 0 || plan.Clipped != 0 || plan.Oversize {
				t.Errorf("Compact, Clipped, Oversize = %d, %d, %v; want 0, 0, false", plan.Compact, plan.Clipped, plan.Oversize)
			}
			if got, want := plan.Bytes, wantBytes(tt.in, tt.want); got != want {
				t.Errorf("Bytes = %d, want %d", got, want)
			}
			if got, want := plan.Tokens, int64(math.Ceil(float64(plan.Bytes)*tt.ratio)); got != want {
				t.Errorf("Tokens = %d, want ceil(%d * %v) = %d", got, plan.Bytes, tt.ratio, want)
			}
			if plan.Tokens > tt.in.Budget {
				t.Errorf("Tokens = %d over Budget %d", plan.Tokens, tt.in.Budget)
			}
		})
	}

	t.Run("calibration changes tokens, not bytes", func(t *testing.T) {
		t.Parallel()
		in := ContextInput{System: "You are Bob.", Tools: tools, Earlier: earlier, Current: current, Budget: 1000}
		def := AssembleContext(in)
		in.TokensPerByte = 0.5
		cal := AssembleContext(in)
		if def.Bytes != cal.Bytes {
			t.Errorf("Bytes = %d with ratio 0.5, %d with the default; want equal", cal.Bytes, def.Bytes)
		}
		if want := int64(math.Ceil(float64(cal.Bytes) * 0.5)); cal.Tokens != want || cal.Tokens == def.Tokens {
			t.Errorf("Tokens = %d at 0.5 (default %d), want %d", cal.Tokens, def.Tokens, want)
		}
	})
}

func TestAssembleContextDeterministic(t *testing.T) {
	t.Parallel()
	thread := roundsThread(6, 10_000)
	in := ContextInput{
		System:  "You are Bob.",
		Tools:   []ToolSpec{{Name: "read_file", Description: "Reads a file.", Schema: json.RawMessage(`{"type":"object"}`)}},
		Summary: &ConversationSummary{ThroughID: "m0", Covered: 2, Text: "Earlier: the user asked about builds."},
		Earlier: []Exchange{
			{MessageID: "m1", Messages: concat(roundsThread(2, 8_000), []ChatMessage{noteMsg("looked at two files"), answerMsg("")})},
			{MessageID: "m2", Messages: []ChatMessage{userMsg("status?"), answerMsg("", callOf("x", "read_file", `{}`), callOf("y", "read_file", `{}`)), resultMsg("y", strings.Repeat("y", 5000)), resultMsg("zz", "stray")}},
		},
		Current: thread,
		Budget:  8_000,
	}
	orig := cloneInput(in)

	first := AssembleContext(in)
	if first.Clipped == 0 {
		t.Fatalf("Clipped = 0; the input is meant to need clipping (Tokens %d, Budget %d)", first.Tokens, in.Budget)
	}
	if !reflect.DeepEqual(in, orig) {
		t.Fatalf("AssembleContext changed its input:\ngot  %+v\nwant %+v", in, orig)
	}
	second := AssembleContext(in)
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("two calls on the same input differ:\nfirst  %+v\nsecond %+v", first, second)
	}
	for i, m := range in.Current {
		if m.Role == "tool" && len(m.Content) != 10_000 {
			t.Errorf("Current[%d] tool result is %d bytes after the call, want 10000", i, len(m.Content))
		}
	}
	for i, m := range in.Earlier[0].Messages {
		if m.Role == "tool" && len(m.Content) != 8_000 {
			t.Errorf("Earlier[0].Messages[%d] tool result is %d bytes after the call, want 8000", i, len(m.Content))
		}
	}
	if got := len(in.Earlier[1].Messages); got != 4 {
		t.Errorf("Earlier[1] has %d messages after the call, want 4 (normalization must work on a copy)", got)
	}
}

func TestAssembleContextOversize(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("z", 4_000)
	tools := []ToolSpec{{Name: "search", Description: strings.Repeat("d", 2_000), Schema: json.RawMessage(`{}`)}}
	tests := []struct {
		name string
		in   ContextInput
		want bool
	}{
		{"trigger alone over budget", ContextInput{Current: []ChatMessage{userMsg(big)}, Budget: 900}, true},
		{"trigger and system over budget", ContextInput{System: big, Current: []ChatMessage{userMsg("hi")}, Budget: 1_000}, true},
		{"trigger and tools over budget", ContextInput{Tools: tools, Current: []ChatMessage{userMsg(big[:2_000])}, Budget: 1_000}, true},
		{
			name: "not compaction, even with earlier exchanges",
			in:   ContextInput{Earlier: exchangesOf(5, 400), Current: []ChatMessage{userMsg(big)}, Budget: 900, MayCompact: true},
			want: true,
		},
		{
			name: "trigger exactly at budget",
			in:   ContextInput{System: "sys", Current: []ChatMessage{sized(4_000 - 3)}, Budget: 1_000},
			want: false,
		},
		{
			name: "thread over budget but trigger fits",
			in:   ContextInput{Current: roundsThread(3, 4_000), Budget: 1_000},
			want: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan := AssembleContext(tt.in)
			if plan.Oversize != tt.want {
				t.Fatalf("Oversize = %v, want %v (plan %+v)", plan.Oversize, tt.want, plan)
			}
			if !tt.want {
				if plan.Messages == nil {
					t.Errorf("Messages = nil, want the thread")
				}
				return
			}
			if plan.Messages != nil || plan.Compact != 0 {
				t.Errorf("Messages, Compact = %d messages, %d; want none, 0", len(plan.Messages), plan.Compact)
			}
			if got, want := plan.Bytes, wantBytes(tt.in, tt.in.Current[:1]); got != want {
				t.Errorf("Bytes = %d, want %d (system, tools and trigger)", got, want)
			}
			if got, want := plan.Tokens, wantTokens(plan.Bytes, tt.in.TokensPerByte); got != want || got <= tt.in.Budget {
				t.Errorf("Tokens = %d, want %d over Budget %d", got, want, tt.in.Budget)
			}
		})
	}
}

func TestAssembleContextCompaction(t *testing.T) {
	t.Parallel()
	// Budget 8000 tokens: a quarter is 2000, a summary's eighth 1000. The
	// system prompt and trigger cost 6 tokens, so the quarter binds.
	const budget = 8_000
	trigger := []ChatMessage{userMsg("hi")}
	// bigThread costs 6000 tokens with the system prompt: the room left
	// beside it and a summary is 8000-6000-1000 = 1000 tokens.
	bigThread := threadOfBytes("sys", 6_000*4)

	tests := []struct {
		name    string
		in      ContextInput
		compact int
	}{
		{
			name:    "keeps newest that fill the quarter exactly",
			in:      ContextInput{System: "sys", Earlier: exchangesOf(25, 400), Current: trigger, Budget: budget, MayCompact: true},
			compact: 20, // 5 x 400 = 2000
		},
		{
			name:    "one token over the quarter keeps one fewer",
			in:      ContextInput{System: "sys", Earlier: exchangesOf(25, 401), Current: trigger, Budget: budget, MayCompact: true},
			compact: 21, // 4 x 401 = 1604; 5 x 401 = 2005
		},
		{
			name:    "keeps only a newest run",
			in:      ContextInput{System: "sys", Earlier: append(exchangesOf(20, 400), exchangeOf(20, 2_001)), Current: trigger, Budget: budget, MayCompact: true},
			compact: 21,
		},
		{
			name:    "a large thread leaves less room",
			in:      ContextInput{System: "sys", Earlier: exchangesOf(10, 400), Current: bigThread, Budget: budget, MayCompact: true},
			compact: 8, // 2 x 400 = 800 fit in the 1000 left
		},
		{
			name:    "at least one when nothing can be kept",
			in:      ContextInput{System: "sys", Earlier: exchangesOf(1, 9_000), Current: trigger, Budget: budget, MayCompact: true},
			compact: 1,
		},
		{
			name: "at least one when all could be kept",
			in: ContextInput{System: "sys", Summary: &ConversationSummary{Covered: 40, Text: strings.Repeat("s", 7_900*4)},
				Earlier: exchangesOf(3, 100), Current: trigger, Budget: budget, MayCompact: true},
			compact: 1,
		},
		{
			name:    "not when compaction is not allowed",
			in:      ContextInput{System: "sys", Earlier: exchangesOf(25, 400), Current: trigger, Budget: budget},
			compact: 0,
		},
		{
			name:    "not when there is nothing earlier",
			in:      ContextInput{System: "sys", Current: roundsThread(10, 4_000), Budget: budget, MayCompact: true},
			compact: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan := AssembleContext(tt.in)
			if plan.Compact != tt.compact {
				t.Fatalf("Compact = %d, want %d (Tokens %d, Budget %d)", plan.Compact, tt.compact, plan.Tokens, tt.in.Budget)
			}
			if plan.Oversize {
				t.Errorf("Oversize = true, want false")
			}
			if tt.compact == 0 {
				if plan.Messages == nil {
					t.Errorf("Messages = nil, want the context as it stands")
				}
				checkMeasure(t, tt.in, plan)
				return
			}
			if plan.Messages != nil {
				t.Errorf("Messages = %d, want none while compaction is asked", len(plan.Messages))
			}
			if plan.Tokens <= tt.in.Budget {
				t.Errorf("Tokens = %d, want over Budget %d when compaction is asked", plan.Tokens, tt.in.Budget)
			}
			if got, want := plan.Tokens, wantTokens(plan.Bytes, tt.in.TokensPerByte); got != want {
				t.Errorf("Tokens = %d, want ceil(Bytes*ratio) = %d", got, want)
			}
		})
	}
}

// After a compaction, the summary must be reusable: the next assembly fits
// without compacting, and so do the next turns', each one exchange longer.
func TestAssembleContextCompactionHysteresis(t *testing.T) {
	t.Parallel()
	bigThread := threadOfBytes("sys", 6_000*4-400)
	tests := []struct {
		name string
		in   ContextInput
	}{
		{"many exchanges", ContextInput{System: "sys", Earlier: exchangesOf(25, 400), Current: []ChatMessage{userMsg("hi")}, Budget: 8_000, MayCompact: true}},
		{"small exchanges, calibrated", ContextInput{System: "sys", Earlier: exchangesOf(200, 60), Current: []ChatMessage{userMsg("hi")}, Budget: 10_000, TokensPerByte: 0.3, MayCompact: true}},
		{"large thread", ContextInput{System: "sys", Earlier: exchangesOf(10, 400), Current: bigThread, Budget: 8_000, MayCompact: true}},
		{
			name: "folding an earlier summary",
			in: ContextInput{System: "sys", Summary: &ConversationSummary{Covered: 30, Text: strings.Repeat("s", 2_000)},
				Earlier: exchangesOf(30, 300), Current: []ChatMessage{userMsg("hi")}, Budget: 8_000, MayCompact: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan := AssembleContext(tt.in)
			if plan.Compact == 0 {
				t.Fatalf("Compact = 0; the input is meant to need compaction (Tokens %d, Budget %d)", plan.Tokens, tt.in.Budget)
			}
			covered := plan.Compact
			if tt.in.Summary != nil {
				covered += tt.in.Summary.Covered
			}
			// A summary is short: a few hundred bytes, well under an
			// eighth of the budget.
			in := tt.in
			in.Summary = &ConversationSummary{ThroughID: fmt.Sprintf("m%d", plan.Compact-1), Covered: covered, Text: strings.Repeat("summary ", 50)}
			in.Earlier = tt.in.Earlier[plan.Compact:]
			in.MayCompact = false
			again := AssembleContext(in)
			if again.Compact != 0 || again.Clipped != 0 || again.Oversize || again.Tokens > in.Budget {
				t.Fatalf("after compaction: Compact %d, Clipped %d, Oversize %v, Tokens %d; want 0, 0, false, <= %d",
					again.Compact, again.Clipped, again.Oversize, again.Tokens, in.Budget)
			}

			// The next turn: one more small exchange, a new trigger.
			next := in
			next.Earlier = append(append([]Exchange(nil), in.Earlier...),
				Exchange{MessageID: "next", Messages: []ChatMessage{userMsg("one more thing"), answerMsg("Sure, done.")}})
			next.Current = []ChatMessage{userMsg("and now?")}
			next.MayCompact = true
			nextPlan := AssembleContext(next)
			if nextPlan.Compact != 0 || nextPlan.Tokens > next.Budget {
				t.Fatalf("next turn: Compact %d, Tokens %d; want 0, <= %d (the summary should be reused)", nextPlan.Compact, nextPlan.Tokens, next.Budget)
			}

			// Not only the next turn: what was kept fills at most a quarter
			// of the budget, so turns like the compacted ones worth another
			// quarter go by before the summary must be made again.
			typical := tt.in.Earlier[len(tt.in.Earlier)-1].Messages
			perTurn := wantTokens(wantBytes(ContextInput{}, typical), in.TokensPerByte)
			turns := 0
			for ; turns < 1_000; turns++ {
				next.Earlier = append(next.Earlier, Exchange{MessageID: fmt.Sprintf("t%d", turns), Messages: typical})
				if AssembleContext(next).Compact > 0 {
					break
				}
			}
			if want := int(in.Budget / 4 / perTurn); turns < want {
				t.Errorf("compaction asked again after %d turns of %d tokens, want at least %d (a quarter of Budget %d)", turns, perTurn, want, in.Budget)
			}
		})
	}
}

func TestAssembleContextClipping(t *testing.T) {
	t.Parallel()
	tenKB := strings.Repeat("k", 10*1024)
	earlierWithResult := Exchange{MessageID: "m1", Messages: []ChatMessage{
		userMsg("read it"), answerMsg("", callOf("e1", "read_file", `{}`)), resultMsg("e1", tenKB), answerMsg("Read."),
	}}
	twoRounds := []ChatMessage{
		userMsg("go"),
		answerMsg("", callOf("c1", "read_file", `{}`)), resultMsg("c1", tenKB),
		answerMsg("", callOf("c2", "read_file", `{}`), callOf("c3", "read_file", `{}`)), resultMsg("c2", tenKB), resultMsg("c3", tenKB),
	}

	tests := []struct {
		name string
		in   ContextInput
		// clipped are (message index in plan.Messages) of the results
		// expected clipped; every other tool result must be whole.
		clipped []int
		fits    bool
	}{
		{
			name:    "latest round never clipped",
			in:      ContextInput{System: "sys", Current: twoRounds, Budget: 3_000},
			clipped: []int{2}, fits: false,
		},
		{
			name:    "earlier exchange first, then stop when it fits",
			in:      ContextInput{System: "sys", Earlier: []Exchange{earlierWithResult}, Current: twoRounds, Budget: 8_100},
			clipped: []int{2}, fits: true,
		},
		{
			name:    "earlier exchange, then the thread's older rounds",
			in:      ContextInput{System: "sys", Earlier: []Exchange{earlierWithResult}, Current: twoRounds, Budget: 6_000},
			clipped: []int{2, 6}, fits: true,
		},
		{
			name:    "everything but the latest round, and still over",
			in:      ContextInput{System: "sys", Earlier: []Exchange{earlierWithResult}, Current: twoRounds, Budget: 4_000},
			clipped: []int{2, 6}, fits: false,
		},
		{
			name:    "earlier exchange when the thread is only its trigger",
			in:      ContextInput{System: "sys", Earlier: []Exchange{earlierWithResult}, Current: []ChatMessage{userMsg("go")}, Budget: 1_000, MayCompact: false},
			clipped: []int{2}, fits: true,
		},
		{
			name:    "results at the limit are left whole",
			in:      ContextInput{System: "sys", Current: roundsThread(10, ClipToolResultBytes), Budget: 1_000},
			clipped: nil, fits: false,
		},
		{
			name:    "allowed to compact but nothing earlier",
			in:      ContextInput{System: "sys", Current: twoRounds, Budget: 3_000, MayCompact: true},
			clipped: []int{2}, fits: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan := AssembleContext(tt.in)
			if plan.Compact != 0 || plan.Oversize {
				t.Fatalf("Compact, Oversize = %d, %v; want 0, false", plan.Compact, plan.Oversize)
			}
			checkMeasure(t, tt.in, plan)
			if plan.Clipped != len(tt.clipped) {
				t.Errorf("Clipped = %d, want %d", plan.Clipped, len(tt.clipped))
			}
			if fits := plan.Tokens <= tt.in.Budget; fits != tt.fits {
				t.Errorf("Tokens %d <= Budget %d is %v, want %v", plan.Tokens, tt.in.Budget, fits, tt.fits)
			}
			want := map[int]bool{}
			for _, i := range tt.clipped {
				want[i] = true
			}
			for i, m := range plan.Messages {
				if m.Role != "tool" {
					continue
				}
				isClipped := strings.Contains(m.Content, "[clipped: ")
				if isClipped != want[i] {
					t.Errorf("Messages[%d] (%s) clipped = %v, want %v", i, m.ToolCallID, isClipped, want[i])
				}
				if isClipped && m.Content != ClipText(tenKB, ClipToolResultBytes) {
					t.Errorf("Messages[%d] = %.80q..., want ClipText(result, %d)", i, m.Content, ClipToolResultBytes)
				}
			}
		})
	}

	t.Run("fifty rounds of 10 KB fit 40k tokens", func(t *testing.T) {
		t.Parallel()
		in := ContextInput{System: "You are Bob.", Current: roundsThread(50, 10*1024), Budget: 40_000}
		plan := AssembleContext(in)
		if plan.Clipped == 0 || plan.Tokens > in.Budget {
			t.Fatalf("Clipped %d, Tokens %d; want > 0 and <= %d", plan.Clipped, plan.Tokens, in.Budget)
		}
		checkMeasure(t, in, plan)
		if len(plan.Messages) != len(in.Current) {
			t.Fatalf("%d messages, want %d", len(plan.Messages), len(in.Current))
		}
		// Oldest first: the clipped results are the first Clipped ones.
		n, lastClipped := 0, -1
		for i, m := range plan.Messages {
			if m.Role != "tool" {
				continue
			}
			orig := in.Current[i].Content
			if n < plan.Clipped {
				want := ClipText(orig, ClipToolResultBytes)
				if m.Content != want {
					t.Fatalf("result %d = %.60q..., want it clipped", n, m.Content)
				}
				marker := fmt.Sprintf("[clipped: %d of %d bytes", len(orig)-ClipToolResultBytes, len(orig))
				if !strings.Contains(m.Content, marker) || !strings.HasPrefix(m.Content, orig[:ClipToolResultBytes]) {
					t.Errorf("result %d = %q, want the first %d bytes and %q", n, m.Content[ClipToolResultBytes:], ClipToolResultBytes, marker)
				}
				lastClipped = i
			} else if m.Content != orig {
				t.Errorf("result %d (of %d clipped) is %d bytes, want whole %d", n, plan.Clipped, len(m.Content), len(orig))
			}
			n++
		}
		if last := plan.Messages[len(plan.Messages)-1]; last.Content != in.Current[len(in.Current)-1].Content {
			t.Errorf("the latest result was clipped")
		}
		// Until it fits: one clip fewer would not have fit.
		unclipped := plan.Bytes + int64(len(in.Current[lastClipped].Content)-len(plan.Messages[lastClipped].Content))
		if wantTokens(unclipped, 0) <= in.Budget {
			t.Errorf("clipped %d results, but %d would have fit (%d tokens)", plan.Clipped, plan.Clipped-1, wantTokens(unclipped, 0))
		}
	})
}

// Clipping a result is meant to shrink the request; one just over
// ClipToolResultBytes gains more from the marker than it loses.
func TestAssembleContextClippingNeverGrows(t *testing.T) {
	t.Parallel()
	in := ContextInput{System: "sys", Current: roundsThread(20, ClipToolResultBytes+10), Budget: 1_000}
	whole := AssembleContext(ContextInput{System: in.System, Current: in.Current, Budget: 1 << 30})
	plan := AssembleContext(in)
	if plan.Bytes > whole.Bytes {
		t.Errorf("Bytes = %d after clipping %d results of %d bytes, want <= %d unclipped", plan.Bytes, plan.Clipped, ClipToolResultBytes+10, whole.Bytes)
	}
	for i, m := range plan.Messages {
		if m.Role == "tool" && len(m.Content) > len(in.Current[i].Content) {
			t.Errorf("Messages[%d] grew from %d to %d bytes by clipping", i, len(in.Current[i].Content), len(m.Content))
			break
		}
	}
}

func TestCloseExchange(t *testing.T) {
	t.Parallel()
	a, b, c := callOf("a", "read_file", `{"path":"a"}`), callOf("b", "search", `{"q":"b"}`), callOf("c", "list", `{}`)
	errResult := ChatMessage{Role: "tool", ToolCallID: "b", Content: "permission denied", IsError: true}
	tests := []struct {
		name string
		in   []ChatMessage
		want []ChatMessage
	}{
		{
			name: "a note reads as an answer",
			in:   []ChatMessage{userMsg("q"), noteMsg("handed it to Ann")},
			want: []ChatMessage{userMsg("q"), answerMsg("handed it to Ann")},
		},
		{
			name: "an empty answer is dropped",
			in:   []ChatMessage{userMsg("q"), answerMsg(""), answerMsg("A.")},
			want: []ChatMessage{userMsg("q"), answerMsg("A.")},
		},
		{
			name: "an empty note is dropped",
			in:   []ChatMessage{userMsg("q"), noteMsg("")},
			want: []ChatMessage{userMsg("q")},
		},
		{
			name: "complete rounds are kept as they are",
			in:   []ChatMessage{userMsg("q"), answerMsg("", a, b), resultMsg("a", "A"), errResult, answerMsg("A.")},
			want: []ChatMessage{userMsg("q"), answerMsg("", a, b), resultMsg("a", "A"), errResult, answerMsg("A.")},
		},
		{
			name: "missing results after the others, before the next message",
			in:   []ChatMessage{userMsg("q"), answerMsg("looking", a, b, c), resultMsg("b", "B"), answerMsg("A.")},
			want: []ChatMessage{userMsg("q"), answerMsg("looking", a, b, c), resultMsg("b", "B"), missingResult("a"), missingResult("c"), answerMsg("A.")},
		},
		{
			name: "missing result at the end of the exchange",
			in:   []ChatMessage{userMsg("q"), answerMsg("", a, b), resultMsg("a", "A")},
			want: []ChatMessage{userMsg("q"), answerMsg("", a, b), resultMsg("a", "A"), missingResult("b")},
		},
		{
			name: "missing results before a note",
			in:   []ChatMessage{userMsg("q"), answerMsg("", a), noteMsg("gave up")},
			want: []ChatMessage{userMsg("q"), answerMsg("", a), missingResult("a"), answerMsg("gave up")},
		},
		{
			name: "a result for an unknown call is dropped",
			in:   []ChatMessage{userMsg("q"), resultMsg("a", "early"), answerMsg("", a), resultMsg("zz", "stray"), resultMsg("a", "A")},
			want: []ChatMessage{userMsg("q"), answerMsg("", a), resultMsg("a", "A")},
		},
		{
			name: "a duplicate result is dropped",
			in:   []ChatMessage{userMsg("q"), answerMsg("", a), resultMsg("a", "first"), resultMsg("a", "second"), answerMsg("A.")},
			want: []ChatMessage{userMsg("q"), answerMsg("", a), resultMsg("a", "first"), answerMsg("A.")},
		},
		{
			name: "a result after the next message is dropped",
			in:   []ChatMessage{userMsg("q"), answerMsg("", a), answerMsg("", b), resultMsg("a", "late"), resultMsg("b", "B")},
			want: []ChatMessage{userMsg("q"), answerMsg("", a), missingResult("a"), answerMsg("", b), resultMsg("b", "B")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			trigger := userMsg("now")
			in := ContextInput{Earlier: []Exchange{{MessageID: "m1", Messages: tt.in}}, Current: []ChatMessage{trigger}, Budget: 1 << 20}
			plan := AssembleContext(in)
			want := append(append([]ChatMessage(nil), tt.want...), trigger)
			if !reflect.DeepEqual(plan.Messages, want) {
				t.Fatalf("Messages:\ngot  %+v\nwant %+v", plan.Messages, want)
			}
			checkMeasure(t, in, plan)
		})
	}
}

func TestClipText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    string
		keep int
		// kept is how many bytes of s survive.
		kept int
	}{
		{"short", "hello", 10, 5},
		{"exact", "hello", 5, 5},
		{"ascii", "hello world", 5, 5},
		{"two-byte runes", strings.Repeat("é", 10), 5, 4},
		{"three-byte runes", strings.Repeat("日本語", 3), 7, 6},
		{"four-byte runes", strings.Repeat("🙂", 4), 7, 4},
		{"on a boundary", strings.Repeat("é", 10), 6, 6},
		{"nothing kept", "日本", 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ClipText(tt.s, tt.keep)
			if tt.kept == len(tt.s) {
				if got != tt.s {
					t.Fatalf("ClipText(%q, %d) = %q, want unchanged", tt.s, tt.keep, got)
				}
				return
			}
			want := fmt.Sprintf("%s\n[clipped: %d of %d bytes cut to keep the conversation within the context budget]", tt.s[:tt.kept], len(tt.s)-tt.kept, len(tt.s))
			if got != want {
				t.Errorf("ClipText(%q, %d) = %q, want %q", tt.s, tt.keep, got, want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("ClipText(%q, %d) = %q, not valid UTF-8", tt.s, tt.keep, got)
			}
		})
	}
}

func TestCompactionPrompt(t *testing.T) {
	t.Parallel()
	prev := &ConversationSummary{Covered: 4, Text: "Ann asked for\nthe Q3 numbers.\n\nThey were sent."}
	exchanges := []Exchange{
		{MessageID: "m1", Messages: []ChatMessage{
			userMsg("how is\nthe build?"),
			answerMsg("Checking.", callOf("a", "read_file", `{"path": "ci.log",
  "lines": 20}`), callOf("b", "search", `{"q":"deploy"}`)),
			resultMsg("a", "line one\nline two"),
			answerMsg("It is green."),
		}},
		{MessageID: "m2", Messages: []ChatMessage{noteMsg("forwarded to Ann")}},
	}
	const want = "Summarize this conversation:\n" +
		"\n- (summary of what came before) Ann asked for the Q3 numbers. They were sent." +
		"\n- how is the build?" +
		"\n- you answered: Checking." +
		"\n- you called read_file({\"path\": \"ci.log\", \"lines\": 20})" +
		"\n- you called search({\"q\":\"deploy\"})" +
		"\n- tool result: line one line two" +
		"\n- tool result: No result was recorded for this call." +
		"\n- you answered: It is green." +
		"\n- you answered: forwarded to Ann"
	if got := CompactionPrompt(prev, exchanges, 100_000); got != want {
		t.Errorf("CompactionPrompt:\ngot  %q\nwant %q", got, want)
	}
	if got, want := CompactionPrompt(nil, exchanges[1:], 100_000), "Summarize this conversation:\n\n- you answered: forwarded to Ann"; got != want {
		t.Errorf("CompactionPrompt without a summary = %q, want %q", got, want)
	}

	t.Run("long lines clipped to the budget", func(t *testing.T) {
		t.Parallel()
		const budget, lines, lineBytes = 8_000, 10, 5_000
		var xs []Exchange
		for i := range lines {
			// A two-byte rune straddles each cut.
			text := "x" + strings.Repeat("é", lineBytes/4) + "\n" + strings.Repeat(string(rune('a'+i)), lineBytes/2)
			xs = append(xs, Exchange{MessageID: fmt.Sprintf("m%d", i), Messages: []ChatMessage{userMsg(text)}})
		}
		got := CompactionPrompt(nil, xs, budget)
		if !utf8.ValidString(got) {
			t.Fatalf("prompt is not valid UTF-8")
		}
		body := strings.Split(strings.TrimPrefix(got, "Summarize this conversation:\n"), "\n- ")
		if body[0] != "" {
			t.Fatalf("prompt does not start with its entries:\n%s", got)
		}
		// The clip markers take the whole past the budget: the oldest lines
		// are kept and the last entry says how many were left out.
		entries, last := body[1:len(body)-1], body[len(body)-1]
		if want := fmt.Sprintf("(%d later messages left out: they did not fit)", lines-len(entries)); last != want || len(entries) < lines-3 {
			t.Fatalf("prompt ends %q after %d entries; want %q after at least %d", last, len(entries), want, lines-3)
		}
		// Each line keeps its share of the budget and a marker of what was cut.
		marker := len(" [clipped: 4203 of 5002 bytes cut to keep the conversation within the context budget]")
		for i, l := range entries {
			if !strings.Contains(l, "[clipped: ") || len(l) < budget/lines-4 || len(l) > budget/lines+marker {
				t.Errorf("line %d is %d bytes (%.40q...), want about %d and clipped", i, len(l), l, budget/lines)
			}
		}
		if len(got) > budget+len("\n- ")+len(last) {
			t.Errorf("prompt is %d bytes, want at most %d and the left-out line", len(got), budget)
		}
	})
}
