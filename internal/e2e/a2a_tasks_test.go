package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
	"github.com/crewlet/crewlet/internal/wire"
)

// a2aCall calls an A2A JSON-RPC method at path (a seat's, a role's or the
// company's endpoint) with params, and decodes its result into out. A
// JSON-RPC error comes back as an *a2aError.
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
		return &a2aError{Status: status, Code: resp.Error.Code, Message: resp.Error.Message}
	}
	return json.Unmarshal(resp.Result, out)
}

// a2aCallAs is a2aCall with another token.
func (c *company) a2aCallAs(token, path, method string, params, out any) error {
	saved := c.token
	c.token = token
	defer func() { c.token = saved }()
	return c.a2aCall(path, method, params, out)
}

// a2aError is a JSON-RPC error and the HTTP status it came with.
type a2aError struct {
	Status  int
	Code    int
	Message string
}

func (e *a2aError) Error() string {
	return fmt.Sprintf("HTTP %d, error %d: %s", e.Status, e.Code, e.Message)
}

// a2aText is a message of text from the user, sent on task (none: a new
// task).
func a2aText(task, text string) *a2a.Message {
	return &a2a.Message{MessageID: "m-" + testenv.Suffix(), TaskID: task, Role: a2a.RoleUser, Parts: []a2a.Part{a2a.TextPart(text)}}
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
	if err := c.a2aCall("/a2a/seats/eng-1", a2a.MethodSendMessage, a2a.SendMessageRequest{
		Message: a2aText("", "please fix the failover"), Configuration: a2a.SendMessageConfiguration{ReturnImmediately: true},
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

// A task whose seat's tool call waits for an approval is input-required,
// naming the approval, its tool and its approvers; a principal the policy
// does not name is refused when it answers on the task, a denial without a
// reason is sent back to say so, and an approver's "approve" on the task
// lets the call run once, and the task completes with the seat's reply.
func TestA2ATaskWaitingForAnApprovalNeedsAnApproversInput(t *testing.T) {
	c, countFile := newApprovalsCompany(t)
	c.worker("n1")
	c.waitAttached(60 * time.Second)

	const endpoint = "/a2a/seats/s01"
	var sent a2a.SendMessageResponse
	if err := c.a2aCall(endpoint, a2a.MethodSendMessage, a2a.SendMessageRequest{Message: a2aText("", "record invoice 77")}, &sent); err != nil || sent.Task == nil {
		t.Fatalf("SendMessage: %v (%+v)", err, sent)
	}
	// SendMessage waits for what ends its wait: the approval.
	task := *sent.Task
	asked := c.pendingApproval("s01", "invoice 77")
	if task.Status.State != a2a.StateInputRequired || task.Metadata["approval"] != asked.ID || task.Status.Message == nil ||
		!strings.Contains(*task.Status.Message.Parts[0].Text, "s01 waits for approval "+asked.ID+" of ledger__write by olga") {
		t.Fatalf("the task SendMessage answered: %+v; want it input-required for %s", task, asked.ID)
	}
	if asked.Ticket != task.ID {
		t.Fatalf("approval %s names ticket %q; want the task's, %s", asked.ID, asked.Ticket, task.ID)
	}
	var got a2a.Task
	if err := c.a2aCall(endpoint, a2a.MethodGetTask, a2a.TaskRequest{ID: task.ID}, &got); err != nil || got.Status.State != a2a.StateInputRequired {
		t.Fatalf("GetTask: %v %+v; want input-required", err, got.Status)
	}

	var e *a2aError
	err := c.a2aCallAs(approvalOpsToken, endpoint, a2a.MethodSendMessage, a2a.SendMessageRequest{Message: a2aText(task.ID, "approve")}, &sent)
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Code != a2a.CodeRefused {
		t.Fatalf("ops (not named) approving on the task: %v; want 403 with %d", err, a2a.CodeRefused)
	}
	err = c.a2aCall(endpoint, a2a.MethodSendMessage, a2a.SendMessageRequest{Message: a2aText(task.ID, "deny")}, &sent)
	if !errors.As(err, &e) || e.Code != a2a.CodeInvalidParams || !strings.Contains(e.Message, "needs a reason") {
		t.Fatalf("a denial without a reason: %v; want invalid params asking for one", err)
	}
	if n := len(toolstest.Writes(t, countFile)); n != 0 {
		t.Fatalf("%d writes before the decision; want none", n)
	}

	if err := c.a2aCall(endpoint, a2a.MethodSendMessage, a2a.SendMessageRequest{Message: a2aText(task.ID, "Approve: checked it")}, &sent); err != nil || sent.Task == nil {
		t.Fatalf("the admin approving on the task: %v", err)
	}
	if sent.Task.Status.State != a2a.StateCompleted || *sent.Task.Artifacts[0].Parts[0].Text != "recorded: written: invoice 77" {
		t.Fatalf("after the approval the task is %+v; want it completed with the write's result", sent.Task)
	}
	var all []crewlet.Approval
	if err := c.call(http.MethodGet, "/approvals?seat=s01&status=all", nil, &all); err != nil || len(all) != 1 ||
		all[0].Status != crewlet.ApprovalApproved || all[0].Reason != "checked it" || all[0].DecidedBy != "ann" {
		t.Fatalf("approvals of s01: %+v %v; want %s approved by ann with the note", all, err, asked.ID)
	}
	if n := len(toolstest.Writes(t, countFile)); n != 1 {
		t.Fatalf("the write ran %d times; want once", n)
	}
}

// cancelOrg: a researcher whose every model call takes 3 s and whose turn
// takes two rounds: a recall, then the reply.
const cancelOrg = `company: { name: cancelco }
profiles:
  slow:
    provider: scripted
    delay: 3s
    rules:
      - match: '^research (.*)'
        tools: [ { name: recall, args: { query: '{{index .Groups 1}}' } } ]
        reply: 'Found nothing on {{index .Groups 1}}'
roles:
  researcher: { charter: researches what it is given, profile: slow }
seats:
  - { handle: res-1, role: researcher }
`

// A task cancelled while its seat's turn runs stops that turn at its next
// round boundary: the round that was running finishes, the next one never
// calls the model, and the turn is recorded stopped by the ticket, with a
// note saying why, and no error of its seat; the task stays canceled.
func TestA2ACancelStopsTheServingTurnAtItsNextRound(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", cancelOrg))
	c.serve()
	c.waitAttached(60 * time.Second)

	const endpoint = "/a2a/seats/res-1"
	var sent a2a.SendMessageResponse
	if err := c.a2aCall(endpoint, a2a.MethodSendMessage, a2a.SendMessageRequest{
		Message: a2aText("", "research the moon"), Configuration: a2a.SendMessageConfiguration{ReturnImmediately: true},
	}, &sent); err != nil || sent.Task == nil {
		t.Fatalf("SendMessage: %v (%+v)", err, sent)
	}
	var turns []wire.TurnRow
	testenv.Eventually(t, 30*time.Second, "res-1's turn started", func() error {
		if err := c.call(http.MethodGet, "/seats/res-1/turns?limit=1", nil, &turns); err != nil {
			return err
		}
		if len(turns) != 1 {
			return fmt.Errorf("no turn yet")
		}
		return nil
	})
	var cancelled a2a.Task
	if err := c.a2aCall(endpoint, a2a.MethodCancelTask, a2a.TaskRequest{ID: sent.Task.ID}, &cancelled); err != nil || cancelled.Status.State != a2a.StateCanceled {
		t.Fatalf("CancelTask: %v %+v", err, cancelled.Status)
	}

	var view wire.TurnView
	testenv.Eventually(t, 60*time.Second, "res-1's turn ended", func() error {
		if err := c.call(http.MethodGet, "/turns/res-1/"+url.PathEscape(turns[0].WorkKey), nil, &view); err != nil {
			return err
		}
		if view.Turn.FinishedAt == nil {
			return fmt.Errorf("turn still runs (%d receipts)", len(view.Receipts))
		}
		return nil
	})
	t.Logf("turn %s: status %s, %d model calls, note %q", view.Turn.TurnID, view.Turn.Status, len(view.Receipts), view.Turn.Note)
	if len(view.Receipts) > 1 {
		t.Fatalf("the turn made %d model calls after its task was cancelled in round 1; want it stopped at round 2's boundary", len(view.Receipts))
	}
	if view.Turn.Status != string(crewlet.TurnStopped) || view.Turn.StoppedBy != sent.Task.ID || !strings.Contains(view.Turn.Note, "the ticket it served is cancelled") {
		t.Fatalf("the turn ended %s by %q, note %q; want it stopped by its ticket, saying it was cancelled", view.Turn.Status, view.Turn.StoppedBy, view.Turn.Note)
	}
	// A cancelled task is no failure of its seat.
	if st := c.state("res-1"); st.LastError != "" {
		t.Fatalf("res-1's last error is %q; want none", st.LastError)
	}
	var got a2a.Task
	if err := c.a2aCall(endpoint, a2a.MethodGetTask, a2a.TaskRequest{ID: sent.Task.ID}, &got); err != nil || got.Status.State != a2a.StateCanceled || len(got.Artifacts) != 0 {
		t.Fatalf("GetTask after the turn ended: %v %+v; want it canceled, without a reply", err, got)
	}
}
