package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
)

// conversationSeats is fewer than BenchmarkThroughput's 100: at the dev
// stack's ~15 turns/s a seat must get through 20 messages of a conversation
// within a 20 s run.
const conversationSeats = 10

// conversationLength is how many messages a sender sends in one
// conversation before it starts a fresh one.
const conversationLength = 20

// BenchmarkConversationThroughput is BenchmarkThroughput with memory: each
// seat's sender keeps one conversation for 20 messages (send, wait for the
// reply, send the next), then starts a fresh one, so a turn's context holds
// up to 19 earlier exchanges read from Postgres. The same company first runs
// a phase of fresh conversations (one message each) for comparison. It
// reports replies/s and publish→reply p50/p99 of both phases, and the
// Temporal history size of the turns that answered messages 1 and 20 of one
// conversation (TestTurnHistoryDoesNotGrowWithTheConversation asserts that
// they match).
//
//	go test ./internal/e2e -run '^$' -bench ConversationThroughput -benchtime 1x
func BenchmarkConversationThroughput(b *testing.B) {
	d := benchDuration(b)
	c := newCompany(b, fleetOrg(b, conversationSeats, 0))
	defer c.stopAll()
	// The benchmark sends as one principal far faster than the API's
	// per-principal mutation limit allows a person to.
	c.setenv("CREWLET_API_MUTATIONS_PER_MINUTE=0", "CREWLET_MAILBOX_SENDER_PER_MINUTE=0")
	c.serve()
	c.waitAttached(2 * time.Minute)
	replied := watchReplies(b, c.dbURL)

	fresh := conversationPhase(b, c, replied, d, "fresh", 1)
	long := conversationPhase(b, c, replied, d, "long", conversationLength)
	for _, p := range []struct {
		prefix string
		r      phaseResult
	}{{"fresh-", fresh}, {"", long}} {
		b.ReportMetric(p.r.rate, p.prefix+"replies/s")
		b.ReportMetric(float64(p.r.p50.Milliseconds()), p.prefix+"p50-ms")
		b.ReportMetric(float64(p.r.p99.Milliseconds()), p.prefix+"p99-ms")
	}
	b.ReportMetric(long.meanPrior, "mean-prior")
	b.Logf("%d seats, %s a phase: fresh conversations %.1f replies/s (p50 %s p99 %s); "+
		"%d-message conversations %.1f replies/s (p50 %s p99 %s, %.1f earlier exchanges a turn on average)",
		conversationSeats, d, fresh.rate, fresh.p50, fresh.p99, conversationLength, long.rate, long.p50, long.p99, long.meanPrior)

	if long.first == "" || long.last == "" {
		b.Logf("s01 did not finish a %d-message conversation in %s; no history sizes", conversationLength, d)
		return
	}
	events1, bytes1, _ := turnHistory(b, c, "s01", long.first)
	eventsN, bytesN, _ := turnHistory(b, c, "s01", long.last)
	b.ReportMetric(float64(bytes1), "turn1-history-B")
	b.ReportMetric(float64(bytesN), "turn20-history-B")
	b.Logf("s01's turn for message 1: %d events, %d bytes of history; for message %d: %d events, %d bytes",
		events1, bytes1, conversationLength, eventsN, bytesN)
}

// phaseResult is what one phase of BenchmarkConversationThroughput measured.
type phaseResult struct {
	rate      float64
	p50, p99  time.Duration
	meanPrior float64
	// first and last are the event ids of messages 1 and conversationLength
	// of s01's first conversation; empty if it did not get that far.
	first, last string
}

// conversationPhase runs one sender per seat for d, each sending perConv
// messages in a conversation before starting another.
func conversationPhase(b *testing.B, c *company, replied *replyWatcher, d time.Duration, name string, perConv int) phaseResult {
	suffix := testenv.Suffix()
	var mu sync.Mutex
	var latencies []time.Duration
	var res phaseResult
	prior := 0
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, seat := range seatNames(conversationSeats) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				conv := fmt.Sprintf("%s-%s-%s-%d", name, seat, suffix, n/perConv)
				start := time.Now()
				var msg crewlet.Message
				req := api.SendMessageRequest{Text: "ping", Conversation: conv}
				if err := c.call(http.MethodPost, "/seats/"+seat+"/messages", req, &msg); err != nil {
					b.Error(err)
					return
				}
				at := replied.wait(msg.EventID)
				mu.Lock()
				latencies = append(latencies, at.Sub(start))
				prior += n % perConv
				if seat == "s01" && n == 0 {
					res.first = msg.EventID
				}
				if seat == "s01" && n == perConv-1 {
					res.last = msg.EventID
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(latencies) == 0 {
		b.Fatalf("%s phase: no replies in %s", name, d)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	res.rate = float64(len(latencies)) / d.Seconds()
	res.p50 = latencies[len(latencies)/2]
	res.p99 = latencies[len(latencies)*99/100]
	res.meanPrior = float64(prior) / float64(len(latencies))
	return res
}

// turnHistory is the history one turn added to its seat's run (the turn
// of the one message eventID): the events from the seat's CrewletTurn
// upsert naming the turn to the one that clears it, their bytes, and the
// summaries of the activities it scheduled, in order.
func turnHistory(tb testing.TB, c *company, handle, eventID string) (events, bytes int, summaries []string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := crewlet.TurnWorkflowID(handle, crewlet.WorkKey([]string{eventID}))
	named := func(e *historypb.HistoryEvent) (string, bool) {
		p := e.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()[crewlet.SATurn]
		if p == nil {
			return "", false
		}
		var v string
		_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
		return v, true
	}
	var err error
	testenv.Eventually(tb, 30*time.Second, "the turn "+id+" ended in its seat's history", func() error {
		events, bytes, summaries = 0, 0, nil
		in, ended := false, false
		iter := c.temporal.GetWorkflowHistory(ctx, crewlet.SeatWorkflowID(handle), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() && !ended {
			var e *historypb.HistoryEvent
			if e, err = iter.Next(); err != nil {
				return err
			}
			if v, ok := named(e); ok {
				switch {
				case v == id:
					in = true
				case in:
					ended = true
				}
			}
			if in {
				events++
				bytes += proto.Size(e)
				if e.GetActivityTaskScheduledEventAttributes() != nil {
					var summary string
					_ = converter.GetDefaultDataConverter().FromPayload(e.GetUserMetadata().GetSummary(), &summary)
					summaries = append(summaries, summary)
				}
			}
		}
		if !ended {
			return fmt.Errorf("%d events of it so far", events)
		}
		return nil
	})
	return events, bytes, summaries
}

// Twenty messages in one conversation, each asking for everything said
// before, so the context and the answer grow with every message: the turn
// that answers the 20th has the history of the turn that answered the
// first, give or take a few bytes of counters: the turn adds as much to its
// seat's history for the 20th message as for the first. A turn carries ids;
// the conversation lives in Postgres.
func TestTurnHistoryDoesNotGrowWithTheConversation(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(memoryOrg, 32000, "0s")))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	conv := "history-" + testenv.Suffix()
	filler := strings.Repeat("words that make the message longer. ", 4)
	var first, last crewlet.Message
	var reply string
	for i := 1; i <= conversationLength; i++ {
		last = c.send("cto", fmt.Sprintf("what did I tell you? This is message %d: %s", i, filler), inConversation(conv))
		if i == 1 {
			first = last
		}
		reply = c.waitReply(last, 30*time.Second)
	}
	if !strings.Contains(reply, "This is message 1:") || !strings.Contains(reply, fmt.Sprintf("This is message %d:", conversationLength-1)) {
		t.Fatalf("reply to message %d %q; want it to carry the earlier messages", conversationLength, reply)
	}
	events1, bytes1, _ := turnHistory(t, c, "cto", first.EventID)
	eventsN, bytesN, summaries := turnHistory(t, c, "cto", last.EventID)
	// In the Temporal UI each step of the turn says what it is.
	turnID := crewlet.TurnWorkflowID("cto", crewlet.WorkKey([]string{last.EventID}))
	if len(summaries) == 0 || summaries[0] != "model round 1 of thread 1, turn "+turnID {
		t.Errorf("summaries of the turn's activities: %q; want the first to be its first model round", summaries)
	}
	t.Logf("turn for message 1: %d events, %d bytes; for message %d: %d events, %d bytes (its reply %d bytes)",
		events1, bytes1, conversationLength, eventsN, bytesN, len(reply))
	if eventsN > events1+2 || eventsN < events1-2 || bytesN > bytes1+bytes1/10 {
		t.Fatalf("turn for message %d: %d events, %d bytes of history; want those of message 1's turn (%d events, %d bytes) within 2 events and +10%%",
			conversationLength, eventsN, bytesN, events1, bytes1)
	}
}
