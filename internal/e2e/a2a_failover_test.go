package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/testenv"
)

// a2aCall calls an A2A JSON-RPC method at path (a seat's, a role's or the
// company's endpoint) with params, and decodes its result into out. A
// JSON-RPC error comes back as an error naming its code.
func (c *company) a2aCall(path, method string, params, out any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	status, body, err := c.raw(http.MethodPost, path, a2a.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: method, Params: raw})
	if err != nil {
		return err
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *a2a.Error      `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return fmt.Errorf("%s: HTTP %d, not JSON-RPC: %s", method, status, body)
	}
	if resp.Error != nil {
		return fmt.Errorf("%s: HTTP %d, error %d: %s", method, status, resp.Error.Code, resp.Error.Message)
	}
	return json.Unmarshal(resp.Result, out)
}

// failoverA2AOrg: engineers whose every model call takes 4 s, pinned to
// nodes labelled for them, so a test can kill an engineer's node mid-turn.
const failoverA2AOrg = `company: { name: a2afail }
profiles:
  eng:
    provider: scripted
    delay: 4s
    rules:
      - { match: '^please fix (.*)', reply: 'Fixed {{index .Groups 1}}' }
roles:
  engineer: { charter: fixes what it is given, profile: eng }
seats:
  - { handle: eng-1, role: engineer }
`

// The node running eng-1's turn for an A2A task is killed with SIGKILL
// mid-turn: eng-1 fails over to the other node, its turn runs again, and
// the client's GetTask ends completed with exactly one answer, from
// exactly one ticket, and eng-1 replied once.
func TestA2ATaskSurvivesTheServingNodeDying(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", failoverA2AOrg))
	c.apiServer()
	nodes := map[string]*proc{"n1": c.worker("n1"), "n2": c.worker("n2")}
	c.waitAttached(60 * time.Second)
	before := len(c.tickets("limit=200"))

	var sent a2a.SendMessageResponse
	msg := a2a.Message{MessageID: "kill-" + testenv.Suffix(), Role: a2a.RoleUser, Parts: []a2a.Part{a2a.TextPart("please fix the failover")}}
	if err := c.a2aCall("/a2a/seats/eng-1", a2a.MethodSendMessage, a2a.SendMessageRequest{
		Message: &msg, Configuration: a2a.SendMessageConfiguration{ReturnImmediately: true},
	}, &sent); err != nil || sent.Task == nil {
		t.Fatalf("SendMessage: %v (%+v)", err, sent)
	}
	id := sent.Task.ID
	testenv.Eventually(t, 30*time.Second, "eng-1 running the task's turn", func() error {
		if st := c.state("eng-1"); st.Turn == nil {
			return fmt.Errorf("no turn yet")
		}
		return nil
	})
	victim := c.nodeOf("eng-1")
	nodes[victim].kill(t)
	t.Logf("killed %s while eng-1's turn served task %s", victim, id)

	var task a2a.Task
	testenv.Eventually(t, 2*time.Minute, "the task completed", func() error {
		if err := c.a2aCall("/a2a/seats/eng-1", a2a.MethodGetTask, a2a.TaskRequest{ID: id}, &task); err != nil {
			return err
		}
		if task.Status.State != a2a.StateCompleted {
			return fmt.Errorf("task is %s", task.Status.State)
		}
		return nil
	})
	if len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 1 || task.Artifacts[0].Parts[0].Text == nil || *task.Artifacts[0].Parts[0].Text != "Fixed the failover" {
		t.Fatalf("the completed task's artifacts are %+v; want one: eng-1's reply", task.Artifacts)
	}
	if got := c.nodeOf("eng-1"); got == victim {
		t.Fatalf("eng-1 is still on the killed node %s", got)
	}
	all := c.tickets("limit=200")
	if len(all)-before != 1 || all[0].ID != id || all[0].Phase != crewlet.TicketDone {
		t.Fatalf("the company has %d new tickets (newest %+v); want one, task %s, done", len(all)-before, all[0], id)
	}
	// eng-1 replied once in the task's conversation: the turn that ran
	// again did not answer a second time.
	var replies []string
	for _, conv := range c.conversation(task.ContextID) {
		for _, m := range conv.Messages {
			if m.From == "eng-1" {
				replies = append(replies, m.Body)
			}
		}
	}
	if len(replies) != 1 || !strings.Contains(replies[0], "Fixed the failover") {
		t.Fatalf("eng-1's replies in the task's conversation: %q; want one", replies)
	}
}
