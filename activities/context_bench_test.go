package activities

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// benchContextOrg is contextOrg with a context far larger than the
// conversations below, so assembly never compacts and the timing is the
// reads and the layout alone.
const benchContextOrg = `
company: { name: acme }
profiles:
  local: { provider: scripted, context_tokens: 200000 }
roles:
  clerk: { charter: keeps notes, profile: local }
seats:
  - { handle: cto, role: clerk }
`

// benchExchanges is how long the long conversation is before the message
// whose context is timed.
const benchExchanges = 20

// BenchmarkContextAssembly times what one model round spends on its
// context: (*Turns).assemble, which reads the conversation from Postgres
// (ThreadContext, TokensPerByte) and lays it out. prior=0 is a first
// message; prior=20 follows 20 earlier exchanges of the same conversation,
// every third with a diary_write call and its result, as turns leave them.
// It reports p50 and p99 per assembly, and on prior=20 added-p50-ms, what
// the 20 exchanges add to p50 over prior=0.
//
//	go test ./activities -run '^$' -bench ContextAssembly -benchtime 200x
func BenchmarkContextAssembly(b *testing.B) {
	e := setupTurnsOrg(b, benchContextOrg, nil)
	filler := strings.Repeat("some words of an ordinary message. ", 8)
	model := &fakeModel{answer: func(req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "user" && strings.Contains(last.Content, "note this") {
			return crewlet.ModelResponse{ToolCalls: []crewlet.ToolCall{{ID: "c1", Name: "diary_write", Args: []byte(`{"text":"a note worth keeping"}`)}}}, nil
		}
		return text("Here is an answer of about the length a person reads. " + filler), nil
	}}
	e.turns.models.byProfile["local"] = model

	for i := 1; i <= benchExchanges; i++ {
		body := fmt.Sprintf("message %d: %s", i, filler)
		if i%3 == 0 {
			body = fmt.Sprintf("message %d, note this: %s", i, filler)
		}
		e.say(b, fmt.Sprintf("long-%d", i), "long", body)
	}
	// Earlier turns leave 2 messages (trigger, answer), 4 with a tool call.
	wantLong := benchExchanges*2 + benchExchanges/3*2 + 1
	cases := []struct {
		prior    int
		conv     string
		messages int
	}{
		{0, "short", 1},
		{benchExchanges, "long", wantLong},
	}
	p50 := map[int]time.Duration{}
	for _, c := range cases {
		trigger := fmt.Sprintf("%s-next", c.conv)
		e.beginIn(b, trigger, c.conv, "and one more message: "+filler)
		b.Run(fmt.Sprintf("prior=%d", c.prior), func(b *testing.B) {
			assemble := benchAssembler(b, e, trigger)
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				plan, err := assemble()
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if len(plan.Messages) != c.messages || plan.Compact != 0 || plan.Clipped != 0 {
					b.Fatalf("plan has %d messages (compact %d, clipped %d); want %d, the whole conversation", len(plan.Messages), plan.Compact, plan.Clipped, c.messages)
				}
			}
			b.StopTimer()
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			p50[c.prior] = took[len(took)/2]
			b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
			b.ReportMetric(ms(took[len(took)*99/100]), "p99-ms")
			if base, ok := p50[0]; ok && c.prior > 0 {
				b.ReportMetric(ms(took[len(took)/2]-base), "added-p50-ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchAssembler returns a call of assemble for the first round of the turn
// triggered by eventID, with what ModelRound reads before it.
func benchAssembler(b *testing.B, e *turnEnv, eventID string) func() (crewlet.ContextPlan, error) {
	b.Helper()
	turn, err := e.store.Turn(e.ctx, "cto", crewlet.WorkKey([]string{eventID}))
	if err != nil {
		b.Fatal(err)
	}
	catalog, err := decodeCatalog(turn.Tools)
	if err != nil {
		b.Fatal(err)
	}
	trigger, key, err := threadOf(turn, 0)
	if err != nil {
		b.Fatal(err)
	}
	thread, err := e.store.TurnMessages(e.ctx, "cto", key, 0)
	if err != nil {
		b.Fatal(err)
	}
	seat, role, err := e.turns.role(e.ctx, "cto")
	if err != nil {
		b.Fatal(err)
	}
	system := e.turns.systemPrompt("cto", seat.Role, role)
	return func() (crewlet.ContextPlan, error) {
		return e.turns.assemble(e.ctx, "cto", role.Pool()[0], "", system, catalog, trigger, key, thread)
	}
}
