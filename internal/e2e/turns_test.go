package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
)

// toolsOrg is an org whose seats have one stdio MCP server, the tools
// package's test server: its write tool appends a line per call to
// countFile, and it writes its pid to pidFile when it starts.
func toolsOrg(t *testing.T, countFile, pidFile string) string {
	t.Helper()
	bin := toolstest.BuildT(t)
	org := fmt.Sprintf(`company: { name: toolco }
profiles:
  tooled:
    provider: scripted
    rules:
      - match: '^record (.*)'
        tools: [ { name: ledger__write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'recorded: {{index .Results 0}}'
      - match: '^count'
        tools: [ { name: ledger__read_counter, args: {} } ]
        reply: 'count: {{index .Results 0}}'
roles:
  clerk:
    charter: keeps the ledger
    profile: tooled
    mcp:
      - { name: ledger, command: [ %q ], env: [ "TESTSERVER_COUNT_FILE=%s", "TESTSERVER_PID_FILE=%s" ] }
    sandbox: { write: [ %q, %q ] }
seats:
  - { handle: s01, role: clerk }
`, bin, countFile, pidFile, filepath.Dir(countFile), filepath.Dir(pidFile))
	return writeFile(t, "org.yaml", org)
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, 20*time.Second, "MCP child pid file", func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return pid
}

// running reports whether pid is a live process (a zombie counts as gone).
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat))
	return len(fields) > 2 && fields[2] != "Z"
}

// A scripted turn calls an MCP write tool; the worker is killed right after
// the write reached the server, before the turn recorded its result. The
// seat fails over, the turn resumes on the other node and does not call the
// write again: the server counted one write, and the model was told that
// the outcome is unknown.
func TestWriteToolIsNotRepeatedWhenTheWorkerDiesMidTurn(t *testing.T) {
	dir := t.TempDir()
	countFile, pidFile := filepath.Join(dir, "count"), filepath.Join(dir, "pid")
	c := newCompany(t, toolsOrg(t, countFile, pidFile))
	c.apiServer()
	crashing := c.workerWithEnv("n1", []string{testhook.Hooks{CrashAt: testhook.AfterToolCall, CrashSeat: "s01"}.Env()})
	c.waitAttached(30 * time.Second)
	firstChild := readPID(t, pidFile)

	msg := c.send("s01", "record invoice 42")
	if code := crashing.wait(t, 30*time.Second); code == 0 {
		t.Fatal("worker exited 0; want it killed after the tool call")
	}
	c.worker("n2")
	reply := c.waitReply(msg, 60*time.Second)

	writes := toolstest.Writes(t, countFile)
	if len(writes) != 1 {
		t.Fatalf("the write tool ran %d times (%v); want once", len(writes), writes)
	}
	if want := crewlet.ThreadKey(msg.EventID) + ":1:0"; writes[0].Key != want {
		t.Errorf("idempotency key %q; want %s ({work_key}:{round}:{call})", writes[0].Key, want)
	}
	if !strings.Contains(reply, "Outcome unknown") {
		t.Errorf("reply %q; want the model told the write's outcome is unknown", reply)
	}
	testenv.Eventually(t, 20*time.Second, "the dead node's MCP child gone", func() error {
		if running(firstChild) {
			return fmt.Errorf("pid %d still runs", firstChild)
		}
		return nil
	})
}

// A seat's MCP children live with its tenure: after the seat moves off a
// drained node, the child that node started is gone, and the seat's turns
// use the child its new node started.
func TestMCPChildStopsWhenTheSeatMoves(t *testing.T) {
	dir := t.TempDir()
	countFile, pidFile := filepath.Join(dir, "count"), filepath.Join(dir, "pid")
	c := newCompany(t, toolsOrg(t, countFile, pidFile))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)
	first := readPID(t, pidFile)
	if reply := c.waitReply(c.send("s01", "record one"), 30*time.Second); reply != "recorded: written: one" {
		t.Fatalf("reply %q; want %q", reply, "recorded: written: one")
	}
	c.worker("n2")
	if err := c.call(http.MethodPost, "/nodes/n1/drain", nil, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "seat on n2", func() error {
		// A query may go unanswered while the draining node lets go of
		// the seat's workflow; ask again.
		var d api.SeatDetail
		if err := c.call(http.MethodGet, "/seats/s01", nil, &d); err != nil || d.State == nil {
			return fmt.Errorf("no state yet (%v %s)", err, d.StateError)
		}
		if st := d.State; !strings.HasPrefix(st.Node, "n2:") || st.Status != crewlet.StatusIdle {
			return fmt.Errorf("seat on %q status %s", st.Node, st.Status)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, "n1's MCP child gone", func() error {
		if running(first) {
			return fmt.Errorf("pid %d still runs", first)
		}
		return nil
	})
	second := readPID(t, pidFile)
	if second == first || !running(second) {
		t.Fatalf("MCP child after the move: pid %d (running %v); want a new live child, not %d", second, running(second), first)
	}
	if reply := c.waitReply(c.send("s01", "count"), 30*time.Second); reply != "count: 1" {
		t.Fatalf("reply %q; want %q", reply, "count: 1")
	}
}

// A person stops a turn mid-way with pause {stop_turn: true}: the round in
// flight finishes, no further model call is made, the trigger is answered
// with a note naming who stopped it, recorded in the ledger and acked, and
// the seat stays paused.
func TestPauseWithStopTurnStopsATurnMidway(t *testing.T) {
	org := `company: { name: stopco }
profiles:
  slow:
    provider: scripted
    delay: 2s
    rules:
      - match: '^note (.*)'
        tools: [ { name: diary_write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'noted'
roles:
  clerk: { charter: takes notes, profile: slow }
seats:
  - { handle: s01, role: clerk }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	msg := c.send("s01", "note the build is red")
	testenv.Eventually(t, 10*time.Second, "s01 running the turn's first round", func() error {
		if st := c.state("s01"); st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Round != 1 {
			return fmt.Errorf("status %s, turn %+v", st.Status, st.Turn)
		}
		return nil
	})
	stop := crewlet.PauseRequest{StopTurn: true, Reason: "wrong repo", By: "olga"}
	if err := c.call(http.MethodPost, "/seats/s01/pause", stop, nil); err != nil {
		t.Fatal(err)
	}
	if reply, want := c.waitReply(msg, 30*time.Second), "Turn stopped by olga: wrong repo"; reply != want {
		t.Fatalf("reply %q; want %q", reply, want)
	}
	workKey := crewlet.WorkKey([]string{msg.EventID})
	testenv.Eventually(t, 10*time.Second, "trigger ledgered and acked, seat paused", func() error {
		if rows := c.ledgerRows("s01"); rows[msg.EventID] != workKey {
			return fmt.Errorf("ledger %v; want the trigger under %s", rows, workKey)
		}
		if n, err := c.mailbox().Pending(context.Background(), "s01"); err != nil || n != 0 {
			return fmt.Errorf("pending = %d (%v); want 0", n, err)
		}
		if st := c.state("s01"); st.Status != crewlet.StatusPaused {
			return fmt.Errorf("status %s; want paused", st.Status)
		}
		return nil
	})
	var view struct {
		Turn struct {
			Status    string `json:"status"`
			StoppedBy string `json:"stopped_by"`
			Rounds    int    `json:"rounds"`
		} `json:"turn"`
		Messages []struct {
			Message crewlet.ChatMessage `json:"message"`
		} `json:"messages"`
	}
	if err := c.call(http.MethodGet, "/turns/s01/"+workKey, nil, &view); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range view.Messages {
		roles = append(roles, m.Message.Role)
	}
	if view.Turn.Status != "stopped" || view.Turn.StoppedBy != "olga" || view.Turn.Rounds != 1 ||
		strings.Join(roles, ",") != "user,assistant,tool,note" {
		t.Fatalf("turn %+v with messages %v; want stopped by olga after 1 round: user, assistant, tool, note", view.Turn, roles)
	}
}

// A node drain waits nodes.release_wait for the turn in flight, then cancels
// it: the seat moves at once instead of after the slow model call, and the
// trigger runs again on the new tenure and is answered exactly once.
func TestDrainCancelsATurnLongerThanTheReleaseWait(t *testing.T) {
	org := `company: { name: slowco }
nodes: { release_wait: 500ms }
profiles:
  slow: { provider: scripted, delay: 8s }
roles:
  thinker: { charter: thinks slowly, profile: slow }
seats:
  - { handle: s01, role: thinker }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)
	c.worker("n2")

	msg := c.send("s01", "ponder this")
	testenv.Eventually(t, 10*time.Second, "s01 running the turn", func() error {
		if st := c.state("s01"); st.Turn == nil {
			return fmt.Errorf("status %s, no turn in flight", st.Status)
		}
		return nil
	})
	drained := time.Now()
	if err := c.call(http.MethodPost, "/nodes/n1/drain", nil, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 6*time.Second, "s01 moved to n2 before the slow turn could end", func() error {
		if st := c.state("s01"); !strings.HasPrefix(st.Node, "n2:") {
			return fmt.Errorf("s01 on %q (%s)", st.Node, st.Status)
		}
		return nil
	})
	t.Logf("s01 moved %s after the drain", time.Since(drained).Round(time.Millisecond))
	c.assertExactlyOneReply(t, []crewlet.Message{msg}, 30*time.Second)
	if n, err := c.mailbox().Pending(context.Background(), "s01"); err != nil || n != 0 {
		t.Fatalf("pending = %d (%v); want 0", n, err)
	}
}

// send_message puts a message in another seat's mailbox: that seat answers
// it in a conversation of its own, and its reply comes back to the sender's
// mailbox, recorded and not answered again.
func TestSendMessageToolReachesAnotherSeat(t *testing.T) {
	org := `company: { name: relayco }
profiles:
  relay:
    provider: scripted
    rules:
      - match: '^tell (\S+) (.+)'
        tools: [ { name: send_message, args: { to: '{{index .Groups 1}}', text: '{{index .Groups 2}}' } } ]
        reply: '{{index .Results 0}}'
roles:
  relay: { charter: passes messages on, profile: relay }
seats:
  - { handle: s01, role: relay }
  - { handle: s02, role: relay }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	msg := c.send("s01", "tell s02 the build is green")
	if reply := c.waitReply(msg, 30*time.Second); !strings.HasPrefix(reply, "sent to s02 (conversation ") {
		t.Fatalf("reply %q; want the tool's receipt", reply)
	}
	var relayed crewlet.Message
	testenv.Eventually(t, 30*time.Second, "s02 answered s01's message and the answer reached s01", func() error {
		var inbox []crewlet.Message
		if err := c.call(http.MethodGet, "/seats/s02/inbox?limit=10", nil, &inbox); err != nil {
			return err
		}
		for _, m := range inbox {
			if m.From == "s01" && m.Body == "the build is green" {
				relayed = m
			}
		}
		if relayed.EventID == "" {
			return fmt.Errorf("s02's inbox %v has no message from s01", inbox)
		}
		if replies := c.repliesTo(relayed); len(replies) != 1 || replies[0] != "[s02] the build is green" {
			return fmt.Errorf("replies to the relayed message: %q; want s02's one echo", replies)
		}
		var back []crewlet.Message
		if err := c.call(http.MethodGet, "/seats/s01/inbox?limit=10", nil, &back); err != nil {
			return err
		}
		for _, m := range back {
			if m.InReplyTo == relayed.EventID && m.Type == crewlet.MessageReply {
				return nil
			}
		}
		return fmt.Errorf("s02's reply is not in s01's mailbox")
	})
	// The reply is recorded by s01, never answered: the ledger holds it and
	// nothing is pending, and s01 ran exactly two turns (the operator's
	// message and s02's reply).
	testenv.Eventually(t, 10*time.Second, "s01 settled", func() error {
		if n, err := c.mailbox().Pending(context.Background(), "s01"); err != nil || n != 0 {
			return fmt.Errorf("pending = %d (%v)", n, err)
		}
		if st := c.state("s01"); st.Counters.Triggers != 2 {
			return fmt.Errorf("s01 handled %d triggers; want 2", st.Counters.Triggers)
		}
		return nil
	})
}
