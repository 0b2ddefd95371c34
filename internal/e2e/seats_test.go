package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
)

const replyWait = 20 * time.Second

func TestEveryAgentSeatOfTheExampleOrgReplies(t *testing.T) {
	org, err := config.Load(exampleOrg)
	if err != nil {
		t.Fatal(err)
	}
	c := newCompany(t, exampleOrg)
	c.serve()

	for _, seat := range org.AgentSeats() {
		t.Run(seat.Handle, func(t *testing.T) {
			msg := c.send(seat.Handle, "hello")
			want := fmt.Sprintf("Hello operator, %s here. What can I do for you?", seat.Handle)
			if got := c.waitReply(msg, replyWait); got != want {
				t.Fatalf("reply = %q; want %q", got, want)
			}
			if got := c.repliesTo(msg); len(got) != 1 {
				t.Fatalf("replies = %v; want exactly one", got)
			}
		})
	}

	t.Run("unmatched text is echoed under the seat's handle", func(t *testing.T) {
		msg := c.send("eng-1", "ship the fix")
		if got, want := c.waitReply(msg, replyWait), "[eng-1] ship the fix"; got != want {
			t.Fatalf("reply = %q; want %q", got, want)
		}
	})

	t.Run("a reply to a seat lands in its mailbox", func(t *testing.T) {
		msg := c.send("cto", "status please", from("alice"))
		c.waitReply(msg, replyWait)
		testenv.Eventually(t, replyWait, "reply in alice's inbox", func() error {
			var inbox []crewlet.Message
			if err := c.call(http.MethodGet, "/seats/alice/inbox", nil, &inbox); err != nil {
				return err
			}
			for _, m := range inbox {
				if m.InReplyTo == msg.EventID && m.From == "cto" && m.Type == crewlet.MessageReply {
					return nil
				}
			}
			return fmt.Errorf("inbox = %+v", inbox)
		})
	})

	t.Run("agent to agent mail is answered once and the answer is not answered", func(t *testing.T) {
		msg := c.send("eng-2", "hello", from("eng-1"))
		c.waitReply(msg, replyWait)
		// eng-1 gets the reply as a trigger and records it without replying.
		testenv.Eventually(t, replyWait, "eng-1 records eng-2's reply", func() error {
			st := c.state("eng-1")
			if st.Counters.Triggers == 0 {
				return fmt.Errorf("eng-1 counters = %+v", st.Counters)
			}
			return nil
		})
		conv := c.conversation(msg.Conversation)[0]
		if len(conv.Messages) != 2 {
			t.Fatalf("conversation has %d messages; want the message and one reply: %+v", len(conv.Messages), conv.Messages)
		}
	})

	t.Run("crewlet send prints the reply", func(t *testing.T) {
		out, err := c.cli("send", "cto", "hello")
		if err != nil {
			t.Fatalf("crewlet send: %v\n%s", err, out)
		}
		if want := "cto: Hello operator, cto here. What can I do for you?\n"; out != want {
			t.Fatalf("output = %q; want %q", out, want)
		}
	})

	t.Run("crewlet seats ls lists every seat with its status", func(t *testing.T) {
		// A reply is recorded before its turn has closed and the seat is
		// idle again, so the listing may still show the last turn running.
		testenv.Eventually(t, replyWait, "every seat listed idle (agents) or human", func() error {
			out, err := c.cli("seats", "ls")
			if err != nil {
				return fmt.Errorf("crewlet seats ls: %v\n%s", err, out)
			}
			for _, s := range org.Seats {
				want := "human"
				if s.Kind == "agent" {
					want = "idle"
				}
				if !lineHas(out, s.Handle, want) {
					return fmt.Errorf("no line for %s with status %s in:\n%s", s.Handle, want, out)
				}
			}
			return nil
		})
	})

	t.Run("temporal lists seats by CrewletStatus", func(t *testing.T) {
		testenv.Eventually(t, 10*time.Second, "seat workflows visible as idle", func() error {
			resp, err := c.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
				Query: "CrewletStatus = 'idle' AND ExecutionStatus = 'Running'",
			})
			if err != nil {
				return err
			}
			var ids []string
			for _, ex := range resp.GetExecutions() {
				ids = append(ids, ex.GetExecution().GetWorkflowId())
			}
			for _, s := range org.AgentSeats() {
				if !slices.Contains(ids, crewlet.SeatWorkflowID(s.Handle)) {
					return fmt.Errorf("%s missing from %v", crewlet.SeatWorkflowID(s.Handle), ids)
				}
			}
			return nil
		})
	})
}

func lineHas(out string, words ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && fields[0] == words[0] && containsAll(fields, words[1:]) {
			return true
		}
	}
	return false
}

func containsAll(fields, words []string) bool {
	for _, w := range words {
		if !slices.Contains(fields, w) {
			return false
		}
	}
	return true
}

func TestPausedSeatHoldsMailAndAnswersItInOrderAfterResume(t *testing.T) {
	c := newCompany(t, exampleOrg)
	c.serve()

	if err := c.call(http.MethodPost, "/seats/cto/pause", crewlet.PauseRequest{Reason: "maintenance", By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "cto paused", func() error {
		if st := c.state("cto"); st.Status != crewlet.StatusPaused {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	st := c.state("cto")
	if st.Pause == nil || st.Pause.By != "tester" || st.Pause.Reason != "maintenance" {
		t.Fatalf("pause hold = %+v; want by tester, reason maintenance", st.Pause)
	}

	sending := time.Now()
	first := c.send("cto", "one")
	conv := inConversation(first.Conversation)
	held := []crewlet.Message{first, c.send("cto", "two", conv), c.send("cto", "three", conv)}
	// Another seat keeps working meanwhile, which proves the stack is live,
	// and cto was woken by the mail and stayed paused.
	c.waitReply(c.send("eng-1", "hello"), replyWait)
	c.waitWakeHandled("cto", sending, replyWait)
	for _, m := range held {
		if r := c.repliesTo(m); len(r) != 0 {
			t.Fatalf("paused seat replied to %q: %v", m.Body, r)
		}
	}

	if err := c.call(http.MethodPost, "/seats/cto/resume", crewlet.ResumeRequest{By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range held {
		c.waitReply(m, replyWait)
	}
	c.waitAnswered(replyWait, "cto")
	var order []string
	for _, m := range c.conversation(first.Conversation)[0].Messages {
		order = append(order, m.Body)
	}
	// The held messages are answered in one turn: each takes its place in
	// the transcript when the turn begins, and the answers follow, in the
	// same order.
	want := []string{"one", "two", "three", "[cto] one", "[cto] two", "[cto] three"}
	if !slices.Equal(order, want) {
		t.Fatalf("transcript = %q; want %q (each message once, answered once, in order)", order, want)
	}
	if st := c.state("cto"); st.Status != crewlet.StatusIdle || st.Pause != nil {
		t.Fatalf("after resume state = %s, pause %+v; want idle with no hold", st.Status, st.Pause)
	}
}

func TestMailSentWhileServeIsDownIsAnsweredOnceAfterRestart(t *testing.T) {
	c := newCompany(t, exampleOrg)
	serve := c.serve()
	c.waitReply(c.send("cto", "hello"), replyWait)
	// Acked too, so what waits in cto's mailbox below is only what the API
	// alone accepted.
	c.waitAnswered(replyWait, "cto")
	serve.kill(t)

	// The API alone accepts mail while no worker runs.
	apiOnly := c.start("api", "api")
	testenv.Eventually(t, 30*time.Second, "api-only process ready", func() error {
		return c.call(http.MethodGet, "/readyz", nil, nil)
	})
	first := c.send("cto", "while down 1")
	conv := inConversation(first.Conversation)
	sent := []crewlet.Message{first, c.send("cto", "while down 2", conv), c.send("cto", "while down 3", conv)}
	if b, err := c.mailbox().Backlogs(context.Background(), []string{"cto"}); err != nil || b["cto"].Waiting != 3 {
		t.Fatalf("cto's mailbox with no worker running: %+v (%v); want the 3 messages waiting", b["cto"], err)
	}
	apiOnly.kill(t)

	c.serve()
	for _, m := range sent {
		c.waitReply(m, replyWait)
	}
	c.waitAnswered(replyWait, "cto")
	for _, m := range sent {
		if r := c.repliesTo(m); len(r) != 1 {
			t.Fatalf("replies to %q = %v; want exactly one", m.Body, r)
		}
	}
}

func TestAPIErrorsAreJSONWithTheRightStatus(t *testing.T) {
	c := newCompany(t, exampleOrg)
	c.serve()
	if err := c.call(http.MethodPost, "/seats/eng-2/pause", crewlet.PauseRequest{By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.call(http.MethodPost, "/seats/support-1/drain", crewlet.DrainRequest{By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "eng-2 paused, support-1 drained", func() error {
		if s := c.state("eng-2"); s.Pause == nil {
			return fmt.Errorf("eng-2 %s", s.Status)
		}
		if s := c.state("support-1"); s.Status != crewlet.StatusDrained {
			return fmt.Errorf("support-1 %s", s.Status)
		}
		return nil
	})

	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"unknown seat", http.MethodGet, "/seats/nobody", nil, 404, crewlet.ENOTFOUND},
		{"message to unknown seat", http.MethodPost, "/seats/nobody/messages", `{"text":"hi"}`, 404, crewlet.ENOTFOUND},
		{"pause unknown seat", http.MethodPost, "/seats/nobody/pause", `{}`, 404, crewlet.ENOTFOUND},
		{"malformed JSON", http.MethodPost, "/seats/cto/messages", `{"text":`, 400, crewlet.EINVALID},
		{"JSON of the wrong shape", http.MethodPost, "/seats/cto/messages", `["hi"]`, 400, crewlet.EINVALID},
		{"unknown field", http.MethodPost, "/seats/cto/messages", `{"text":"hi","urgent":true}`, 400, crewlet.EINVALID},
		{"missing text", http.MethodPost, "/seats/cto/messages", `{}`, 400, crewlet.EINVALID},
		{"empty body", http.MethodPost, "/seats/cto/messages", ``, 400, crewlet.EINVALID},
		{"blank text", http.MethodPost, "/seats/cto/messages", `{"text":"   "}`, 400, crewlet.EINVALID},
		{"from an unknown seat", http.MethodPost, "/seats/cto/messages", `{"text":"hi","from":"mallory"}`, 400, crewlet.EINVALID},
		{"pause bad JSON", http.MethodPost, "/seats/cto/pause", `{"stop_turn":"yes"}`, 400, crewlet.EINVALID},
		{"pause a human seat", http.MethodPost, "/seats/alice/pause", `{}`, 400, crewlet.EINVALID},
		{"pause a paused seat", http.MethodPost, "/seats/eng-2/pause", `{}`, 409, crewlet.ECONFLICT},
		{"resume a running seat", http.MethodPost, "/seats/cto/resume", `{}`, 409, crewlet.ECONFLICT},
		{"drain a drained seat", http.MethodPost, "/seats/support-1/drain", `{}`, 409, crewlet.ECONFLICT},
		{"unknown conversation", http.MethodGet, "/conversations/nope", nil, 404, crewlet.ENOTFOUND},
		{"inbox limit out of range", http.MethodGet, "/seats/alice/inbox?limit=0", nil, 400, crewlet.EINVALID},
		{"unknown route", http.MethodGet, "/nothing/here", nil, 404, crewlet.ENOTFOUND},
		{"wrong method", http.MethodDelete, "/seats/cto", nil, 405, "method_not_allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, data, err := c.raw(tc.method, tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			var body struct{ Error, Detail string }
			if err := json.Unmarshal(data, &body); err != nil {
				t.Fatalf("body is not JSON: %q", data)
			}
			if status != tc.status || body.Error != tc.code || body.Detail == "" {
				t.Fatalf("got %d %+v; want %d with error %q and a detail", status, body, tc.status, tc.code)
			}
		})
	}

	t.Run("resume releases a drained seat onto a new epoch", func(t *testing.T) {
		before := c.state("support-1").Epoch
		if err := c.call(http.MethodPost, "/seats/support-1/resume", crewlet.ResumeRequest{By: "tester"}, nil); err != nil {
			t.Fatal(err)
		}
		msg := c.send("support-1", "hello")
		c.waitReply(msg, replyWait)
		if after := c.state("support-1").Epoch; after != before+1 {
			t.Fatalf("epoch after resume = %d; want %d", after, before+1)
		}
	})

	t.Run("readyz reports each dependency", func(t *testing.T) {
		var r map[string]any
		if err := c.call(http.MethodGet, "/readyz", nil, &r); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"temporal", "postgres", "redis"} {
			if r[k] != "ok" {
				t.Errorf("readyz %s = %v; want ok", k, r[k])
			}
		}
	})
}

func TestSeatShowHasStateAndRow(t *testing.T) {
	c := newCompany(t, exampleOrg)
	c.serve()
	var d api.SeatDetail
	if err := c.call(http.MethodGet, "/seats/cto", nil, &d); err != nil {
		t.Fatal(err)
	}
	if d.Row == nil || d.State == nil || d.Row.Epoch != d.State.Epoch || d.Row.Node == "" || d.Row.AcquiredAt == nil {
		t.Fatalf("seat detail = %+v; want a row and a state agreeing on the epoch, with node and acquired_at", d)
	}
}

// While a turn runs, GET /seats shows its seat running and the seat's own
// CrewletStatus attribute stays idle: the open Turn workflow is what says
// it runs (node-liveness 4), so a turn costs no status write of the
// seat's. Once the turn ends the seat shows idle again.
func TestSeatsShowRunningFromTheOpenTurn(t *testing.T) {
	org := `company: { name: runco }
profiles:
  slow: { provider: scripted, delay: 3s, rules: [ { match: ".", reply: "done" } ] }
roles:
  clerk: { charter: answers slowly, profile: slow }
seats:
  - { handle: s01, role: clerk }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	c.serve()
	c.waitAttached(30 * time.Second)
	listed := func() string {
		var seats []api.SeatSummary
		if err := c.call(http.MethodGet, "/seats", nil, &seats); err != nil {
			t.Fatal(err)
		}
		for _, s := range seats {
			if s.Handle == "s01" {
				return s.Status
			}
		}
		t.Fatalf("GET /seats has no s01: %+v", seats)
		return ""
	}
	attribute := func() string {
		d := c.describe(crewlet.SeatWorkflowID("s01"), "")
		var v string
		if p := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[crewlet.SAStatus]; p != nil {
			if err := json.Unmarshal(p.GetData(), &v); err != nil {
				t.Fatalf("CrewletStatus %s: %v", p.GetData(), err)
			}
		}
		return v
	}
	testenv.Eventually(t, 10*time.Second, "s01 idle", func() error {
		if got := listed(); got != string(crewlet.StatusIdle) {
			return fmt.Errorf("GET /seats says s01 is %s", got)
		}
		return nil
	})

	msg := c.send("s01", "hello")
	testenv.Eventually(t, 10*time.Second, "s01 running its turn", func() error {
		if st := c.state("s01"); st.Turn == nil {
			return fmt.Errorf("s01 is %s with no turn", st.Status)
		}
		if got := listed(); got != string(crewlet.StatusRunning) {
			return fmt.Errorf("GET /seats says s01 is %s during its turn", got)
		}
		return nil
	})
	if got := attribute(); got != string(crewlet.StatusIdle) {
		t.Fatalf("s01's CrewletStatus is %q during its turn; want idle (the open turn shows running)", got)
	}
	c.waitReply(msg, replyWait)
	testenv.Eventually(t, 10*time.Second, "s01 idle after its turn", func() error {
		if got := listed(); got != string(crewlet.StatusIdle) {
			return fmt.Errorf("GET /seats says s01 is %s after its turn", got)
		}
		return nil
	})
}
