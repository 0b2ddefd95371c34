package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
)

// remoteAgentOrg: cto delegates reviews to the remote agent a2a:review,
// waiting for them, and answers its question about which part.
const remoteAgentOrg = `company: { name: outco }
agents:
  - { name: review, card_url: "%s/.well-known/agent-card.json", token_env: REVIEW_AGENT_TOKEN }
profiles:
  lead:
    provider: scripted
    rules:
      - match: '^get a review of (.*)'
        tools: [ { name: delegate, args: { to: 'a2a:review', task: 'please review {{index .Groups 1}}', wait: true } } ]
        reply: 'review says: {{.Last}}'
      - on_result: '(?s)asks:\s*(.*?)\s*Answer with answer\(ticket: "(\S+)"'
        tools: [ { name: answer, args: { ticket: '{{index .Groups 2}}', text: 'the auth part', wait: true } } ]
roles:
  lead: { charter: leads and delegates reviews, profile: lead, may: { delegate: ["a2a:review"] } }
seats:
  - { handle: cto, role: lead }
`

// remoteAgent is testdata/a2a_agent.mjs running under node: an A2A agent
// served by @a2a-js/sdk, reached at url with token, that finishes a
// plain review once release is called.
type remoteAgent struct {
	t          *testing.T
	url, token string
	releaseAt  string
	out        *testenv.Log
}

func startRemoteAgent(t *testing.T) *remoteAgent {
	t.Helper()
	dir := npmPackage(t, a2aSDK, "express@5")
	script, err := os.ReadFile(filepath.Join("testdata", "a2a_agent.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "agent.mjs")
	if err := os.WriteFile(scriptPath, script, 0o600); err != nil {
		t.Fatal(err)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	a := &remoteAgent{t: t, url: "http://" + addr, token: hex.EncodeToString(b[:]), releaseAt: filepath.Join(t.TempDir(), "release"), out: &testenv.Log{}}
	ctx, cancel := context.WithCancel(context.Background())
	node := exec.CommandContext(ctx, "node", scriptPath)
	node.Env = append(os.Environ(), "PORT="+port, "TOKEN="+a.token, "RELEASE="+a.releaseAt)
	node.Stdout, node.Stderr = a.out, a.out
	if err := node.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = node.Wait()
		t.Logf("the remote agent's transcript:\n%s", a.out.String())
	})
	a.waitLine(`^listening `+port+`$`, 30*time.Second)
	return a
}

// waitLine waits until the agent printed a line matching pattern.
func (a *remoteAgent) waitLine(pattern string, timeout time.Duration) {
	a.t.Helper()
	re := regexp.MustCompile(`(?m)` + pattern)
	testenv.Eventually(a.t, timeout, "the remote agent printing "+pattern, func() error {
		if !re.MatchString(a.out.String()) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

// messages are the messages the agent's executor was given: id, task
// (new for one that made a task) and text of each.
func (a *remoteAgent) messages() [][]string {
	var out [][]string
	for _, m := range regexp.MustCompile(`(?m)^message (\S+) task (\S+) (.*)$`).FindAllStringSubmatch(a.out.String(), -1) {
		out = append(out, m[1:])
	}
	return out
}

// release lets the agent finish its plain reviews.
func (a *remoteAgent) release() {
	a.t.Helper()
	if err := os.WriteFile(a.releaseAt, nil, 0o600); err != nil {
		a.t.Fatal(err)
	}
}

// newRemoteAgentCompany is the org delegating to agent, its token in the
// environment of every crewlet process.
func newRemoteAgentCompany(t *testing.T, agent *remoteAgent) *company {
	t.Helper()
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(remoteAgentOrg, agent.url)))
	c.setenv("REVIEW_AGENT_TOKEN=" + agent.token)
	return c
}

// cto delegates to a remote A2A agent (an @a2a-js/sdk server) and waits;
// the node running cto, its turn and the wait on the remote task is killed
// with kill -9 while the agent works. A node started after it takes the
// seat and the wait up; the agent answers; the reply reaches cto's turn
// once, through one ticket and one remote task.
func TestRemoteAgentAnswerReachesTheDelegatorOnceAcrossAKilledNode(t *testing.T) {
	agent := startRemoteAgent(t)
	c := newRemoteAgentCompany(t, agent)
	c.apiServer()
	first := c.worker("w1")
	c.waitAttached(60 * time.Second)

	ask := c.send("cto", "get a review of the login page", inConversation("remote-"+testenv.Suffix()))
	tk := c.openTicketFrom("cto")
	if tk.To != "a2a:review" {
		t.Fatalf("cto's ticket goes to %q; want a2a:review", tk.To)
	}
	// The agent has the task and the wait streams it; cto's turn waits.
	agent.waitLine(`^message `+tk.ID+` task new please review the login page$`, 60*time.Second)
	agent.waitLine(`^rpc SubscribeToTask$`, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, "cto's turn waiting on its ticket", func() error {
		st := c.state("cto")
		if st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Waiting == nil {
			return fmt.Errorf("cto not waiting yet")
		}
		return nil
	})
	first.kill(t)
	t.Logf("killed w1 while cto's turn and the wait on remote ticket %s ran there", tk.ID)
	c.worker("w2")
	agent.release()

	reply := c.waitReply(ask, 2*time.Minute)
	if want := "Reviewed the login page"; strings.Count(reply, want) != 1 || !strings.HasPrefix(reply, "review says: ") {
		t.Fatalf("cto's reply %q; want it to carry the remote agent's answer %q once", reply, want)
	}
	c.waitAnswered(30*time.Second, ask.To)
	if replies := c.repliesTo(ask); len(replies) != 1 {
		t.Fatalf("replies to the person: %q; want one", replies)
	}
	ts := c.tickets("from=cto")
	if len(ts) != 1 || ts[0].Phase != crewlet.TicketDone || ts[0].Reply != "Reviewed the login page" || ts[0].RemoteTask == "" {
		t.Fatalf("tickets = %+v; want one, done with the agent's review, naming its remote task", ts)
	}
	if ms := agent.messages(); len(ms) != 1 || ms[0][0] != tk.ID {
		t.Fatalf("the agent was given messages %q; want one, the task, its message id the ticket's", ms)
	}
	if n := strings.Count(agent.out.String(), "rpc SendMessage"); n != 1 {
		t.Fatalf("the agent was sent %d messages; want one remote task from one send", n)
	}
}

// The remote agent asks which part to review (input-required): cto's
// waiting delegate call reads the question, cto answers, and the answer
// goes back on the same remote task, which the agent then completes.
func TestRemoteAgentQuestionIsAnsweredByTheDelegator(t *testing.T) {
	agent := startRemoteAgent(t)
	c := newRemoteAgentCompany(t, agent)
	c.serve()

	ask := c.send("cto", "get a review of the API carefully", inConversation("remote-ask-"+testenv.Suffix()))
	reply := c.waitReply(ask, 2*time.Minute)
	if want := "Reviewed the API, looking at the auth part"; !strings.Contains(reply, want) {
		t.Fatalf("cto's reply %q; want it to carry the agent's review of the part cto named: %q", reply, want)
	}
	ts := c.tickets("from=cto")
	if len(ts) != 1 || ts[0].Phase != crewlet.TicketDone || ts[0].Question != "which part of the API?" || ts[0].Answer != "the auth part" {
		t.Fatalf("tickets = %+v; want one, done, with the agent's question and cto's answer", ts)
	}
	ms := agent.messages()
	if len(ms) != 2 || ms[0][0] != ts[0].ID || ms[0][1] != "new" || ms[1][1] != ts[0].RemoteTask || ms[1][2] != "the auth part" {
		t.Fatalf("the agent was given messages %q; want the task, then cto's answer on the same remote task %s", ms, ts[0].RemoteTask)
	}
	if strings.Contains(agent.out.String(), "refused ") {
		t.Fatalf("the agent refused a request of crewlet's: the token must reach it on every call")
	}
}

// A ticket to a remote agent cancelled on crewlet's side cancels the
// remote task: the agent is told, once, and the delegating turn hears the
// ticket ended.
func TestRemoteAgentTaskIsCancelledWithItsTicket(t *testing.T) {
	agent := startRemoteAgent(t)
	c := newRemoteAgentCompany(t, agent)
	c.serve()

	ask := c.send("cto", "get a review of the cache layer", inConversation("remote-cancel-"+testenv.Suffix()))
	tk := c.openTicketFrom("cto")
	agent.waitLine(`^rpc SubscribeToTask$`, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, "the ticket naming its remote task", func() error {
		if err := c.call(http.MethodGet, "/tickets/"+tk.ID, nil, &tk); err != nil {
			return err
		}
		if tk.RemoteTask == "" {
			return fmt.Errorf("no remote task yet")
		}
		return nil
	})
	if err := c.call(http.MethodPost, "/tickets/"+tk.ID+"/cancel", api.CancelTicketRequest{Reason: "not needed any more", By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	agent.waitLine(`^cancel `+regexp.QuoteMeta(tk.RemoteTask)+`$`, 60*time.Second)
	reply := c.waitReply(ask, time.Minute)
	if !strings.Contains(reply, "cancelled") {
		t.Fatalf("cto's reply %q; want it to say the ticket was cancelled", reply)
	}
	if n := strings.Count(agent.out.String(), "rpc CancelTask"); n != 1 {
		t.Fatalf("the agent was asked to cancel %d times; want once", n)
	}
	if ms := agent.messages(); len(ms) != 1 {
		t.Fatalf("the agent was given messages %q; want only the task", ms)
	}
}
