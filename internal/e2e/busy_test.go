package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/wire"
)

// busyOrg has one seat per busy policy, each of whose turns over "note X"
// takes a model round (a second), a diary_write call and a second round.
const busyOrg = `company: { name: busyco }
profiles:
  slow:
    provider: scripted
    delay: 1s
    rules:
      - match: '^note (.*)'
        tools: [ { name: diary_write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'noted {{index .Groups 1}}'
roles:
  queuer: { charter: takes notes, profile: slow }
  refuser: { charter: takes notes, profile: slow, on_busy: reject }
  interruptee: { charter: takes notes, profile: slow, on_busy: interrupt }
seats:
  - { handle: q01, role: queuer }
  - { handle: r01, role: refuser }
  - { handle: i01, role: interruptee }
`

// sendWhileBusy sends "note {first}" to seat, waits until the turn over it
// runs its first round, and sends second in the same conversation 50 ms
// after the first (or at once, if the turn took longer to start).
func (c *company) sendWhileBusy(seat, first, second string) (crewlet.Message, crewlet.Message) {
	c.t.Helper()
	sentAt := time.Now()
	m1 := c.send(seat, "note "+first)
	testenv.Eventually(c.t, 10*time.Second, seat+" running its first round", func() error {
		if st := c.state(seat); st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Round != 1 {
			return fmt.Errorf("status %s, turn %+v", st.Status, st.Turn)
		}
		return nil
	})
	time.Sleep(time.Until(sentAt.Add(50 * time.Millisecond)))
	m2 := c.send(seat, second, inConversation(m1.Conversation))
	return m1, m2
}

// probeStarts returns the probe's model-call starts of a seat's trigger, in
// order.
func probeStarts(t *testing.T, path, seat, eventID string) []model.ProbeRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []model.ProbeRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r model.ProbeRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("probe line %q: %v", sc.Text(), err)
		}
		if r.Seat == seat && r.EventID == eventID && r.Phase == "start" {
			out = append(out, r)
		}
	}
	return out
}

// A second message 50 ms after the first, while the seat's turn over the
// first runs, under each busy policy: enqueue answers it in a turn of its
// own afterwards; reject answers it at once that the seat is busy and
// ledgers it; interrupt stops the turn at its round boundary, and the next
// turn's model request holds both messages and the interrupted round, and
// sends one answer. Every trigger is in the completion ledger once, nothing
// is left pending.
func TestBusyPolicies(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", busyOrg))
	probe := filepath.Join(t.TempDir(), "probe.jsonl")
	c.setenv(testhook.Hooks{ScriptedProbe: probe}.Env())
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	// Each seat's first turn takes over two seconds, so the three run at
	// once.
	type sent struct{ first, second crewlet.Message }
	send := func(seat string) sent {
		m1, m2 := c.sendWhileBusy(seat, "the build is red", "also: the deploy is blocked")
		return sent{m1, m2}
	}
	qs, rs, is := send("q01"), send("r01"), send("i01")

	t.Run("enqueue", func(t *testing.T) {
		if got, want := c.waitReply(qs.first, 30*time.Second), "noted the build is red"; got != want {
			t.Fatalf("reply to the first %q; want %q", got, want)
		}
		if got, want := c.waitReply(qs.second, 30*time.Second), "[q01] also: the deploy is blocked"; got != want {
			t.Fatalf("reply to the second %q; want %q", got, want)
		}
		c.assertLedger(t, "q01", map[string]string{
			qs.first.EventID:  crewlet.WorkKey([]string{qs.first.EventID}),
			qs.second.EventID: crewlet.WorkKey([]string{qs.second.EventID}),
		})
	})

	t.Run("reject", func(t *testing.T) {
		busy := c.waitReply(rs.second, 30*time.Second)
		if !strings.HasPrefix(busy, "r01 is busy with another turn (turn/r01/") {
			t.Fatalf("reply to the second %q; want the busy answer", busy)
		}
		if got, want := c.waitReply(rs.first, 30*time.Second), "noted the build is red"; got != want {
			t.Fatalf("reply to the first %q; want %q", got, want)
		}
		// The busy answer is recorded before the first's answer: the second
		// was answered while the turn ran.
		seq := map[string]int64{}
		for _, conv := range c.conversation(rs.first.Conversation) {
			for _, m := range conv.Messages {
				seq[m.InReplyTo] = m.Seq
			}
		}
		if seq[rs.second.EventID] >= seq[rs.first.EventID] {
			t.Fatalf("busy answer at seq %d, the first's answer at %d; want the busy answer first", seq[rs.second.EventID], seq[rs.first.EventID])
		}
		c.assertLedger(t, "r01", map[string]string{
			rs.first.EventID:  crewlet.WorkKey([]string{rs.first.EventID}),
			rs.second.EventID: "busy:" + crewlet.ThreadKey(rs.second.EventID),
		})
		if got := c.repliesTo(rs.second); len(got) != 1 {
			t.Fatalf("replies to the second %q; want one", got)
		}
		c.assertSeatEvent(t, "r01", "busy_rejected", rs.second.EventID)
		if st := c.state("r01"); st.Counters.BusyRejected != 1 {
			t.Fatalf("counters %+v; want busy_rejected 1", st.Counters)
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		both := crewlet.WorkKey([]string{is.first.EventID, is.second.EventID})
		if got, want := c.waitReply(is.first, 30*time.Second), "noted the build is red"; got != want {
			t.Fatalf("reply to the first %q; want %q", got, want)
		}
		c.assertLedger(t, "i01", map[string]string{is.first.EventID: both, is.second.EventID: both})
		var replies []string
		for _, conv := range c.conversation(is.first.Conversation) {
			for _, m := range conv.Messages {
				if m.Type == crewlet.MessageReply {
					replies = append(replies, m.Body)
				}
			}
		}
		if len(replies) != 1 {
			t.Fatalf("replies in the conversation %q; want one answer to both messages", replies)
		}

		var view struct {
			Turn struct {
				Status string `json:"status"`
				Rounds int    `json:"rounds"`
			} `json:"turn"`
		}
		if err := c.call(http.MethodGet, "/turns/i01/"+crewlet.WorkKey([]string{is.first.EventID}), nil, &view); err != nil {
			t.Fatal(err)
		}
		if view.Turn.Status != string(crewlet.TurnInterrupted) || view.Turn.Rounds != 1 {
			t.Fatalf("first turn %+v; want interrupted after 1 round", view.Turn)
		}

		// The interrupted turn asked the model once; the next turn's first
		// call is its second request for this thread.
		starts := probeStarts(t, probe, "i01", is.first.EventID)
		if len(starts) < 2 {
			t.Fatalf("%d model calls for the first message; want the interrupted round and the next turn's", len(starts))
		}
		var roles []string
		var text strings.Builder
		for _, m := range starts[1].Messages {
			roles = append(roles, m.Role)
			fmt.Fprintf(&text, "[%s] %s\n", m.Role, m.Content)
			for _, call := range m.ToolCalls {
				fmt.Fprintf(&text, "call %s %s\n", call.Name, call.Args)
			}
		}
		t.Logf("the next turn's first model request:\n%s", text.String())
		for _, conv := range c.conversation(is.first.Conversation) {
			for _, m := range conv.Messages {
				t.Logf("conversation %s #%d %s %s→%s: %q", conv.ID, m.Seq, m.Type, m.From, m.To, m.Body)
			}
		}
		if got, want := strings.Join(roles, ","), "user,assistant,tool,user"; got != want {
			t.Fatalf("next turn's request roles %s; want %s (the first message, the interrupted round's call and result, the second)", got, want)
		}
		for _, want := range []string{"note the build is red", "call diary_write", "also: the deploy is blocked", "interrupted"} {
			if !strings.Contains(text.String(), want) {
				t.Fatalf("next turn's request lacks %q:\n%s", want, text.String())
			}
		}
		c.assertSeatEvent(t, "i01", "turn_interrupted", is.second.EventID)
		if st := c.state("i01"); st.Counters.Interrupted != 1 {
			t.Fatalf("counters %+v; want interrupted 1", st.Counters)
		}
	})
}

// assertLedger waits until the seat's completion ledger holds exactly want
// (trigger → work key) and its mailbox has nothing pending.
func (c *company) assertLedger(t *testing.T, seat string, want map[string]string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, seat+" ledgered and acked", func() error {
		rows := c.ledgerRows(seat)
		if len(rows) != len(want) {
			return fmt.Errorf("ledger %v; want %v", rows, want)
		}
		for k, v := range want {
			if rows[k] != v {
				return fmt.Errorf("ledger %v; want %v", rows, want)
			}
		}
		if n, err := c.mailbox().Pending(context.Background(), seat); err != nil || n != 0 {
			return fmt.Errorf("pending = %d (%v); want 0", n, err)
		}
		return nil
	})
}

// assertSeatEvent fails unless the seat's event history holds exactly one
// event of kind about eventID; it logs the history.
func (c *company) assertSeatEvent(t *testing.T, seat, kind, eventID string) {
	t.Helper()
	var events []wire.SeatEvent
	if err := c.call(http.MethodGet, "/seats/"+seat+"/events", nil, &events); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		t.Logf("%s event %s %s %v", seat, e.Kind, e.EventID, e.Detail)
		if e.Kind == kind && e.EventID == eventID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%s has %d %s events for %s; want one", seat, n, kind, eventID)
	}
}
