package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
)

// a2aSDK is the A2A client the interop test drives: the reference
// JavaScript SDK, at the version whose wire (A2A 1.0) crewlet was checked
// against.
const a2aSDK = "@a2a-js/sdk@1.3.0"

// a2aOrg: engineers that fix what they are asked to, and a reviewer that
// asks which part to review first.
const a2aOrg = `company: { name: delegco }
profiles:
  eng:
    provider: scripted
    rules:
      - { match: '^please fix (.*)', reply: 'Fixed {{index .Groups 1}}' }
  asks:
    provider: scripted
    rules:
      - match: '^please review (.*)'
        tools: [ { name: ask, args: { question: 'which part of {{index .Groups 1}}?' } } ]
        reply: 'Reviewed. {{.Last}}'
roles:
  engineer: { charter: fixes what it is given, profile: eng }
  reviewer: { charter: reviews what it is given, profile: asks }
seats:
  - { handle: eng-1, role: engineer }
  - { handle: eng-2, role: engineer }
  - { handle: eng-3, role: engineer }
  - { handle: rev-1, role: reviewer }
`

// npmPackage installs pkg (name@version), and the packages it needs
// beside it (a peer dependency), from npm into a folder of the test's and
// returns it, for a Node.js client or server nobody here wrote; a script
// written there finds the packages. Without node or npm the test is
// skipped, saying what to install.
func npmPackage(t *testing.T, pkg string, with ...string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: this test runs %s's client under Node.js 20 or later; install Node.js to run it", tool, pkg)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "npm", append([]string{"install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", pkg}, with...)...)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", pkg, err, out)
	}
	return dir
}

// npmScript installs pkg as npmPackage does and writes the script
// testdata/name beside it, where Node finds the package, and returns the
// script's path.
func npmScript(t *testing.T, pkg, name string) string {
	t.Helper()
	dir := npmPackage(t, pkg)
	script, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, script, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A client nobody here wrote (@a2a-js/sdk, installed from npm) finds a
// seat by its agent card and sends it a task that comes back completed
// with the seat's reply; streams one to its end; cancels one; its stream
// dropped, subscribes again, gets the task as it stands, and reads on to
// the reply; and answers the question of a task that asks, which then
// completes. Each task is exactly one ticket.
func TestA2AClientFromNPM(t *testing.T) {
	scriptPath := npmScript(t, a2aSDK, "a2a_client.mjs")

	c := newCompany(t, writeFile(t, "org.yaml", a2aOrg))
	c.serve()
	// eng-3 holds the task the client cancels, eng-1 the one whose stream
	// it drops (until the client resumes eng-1).
	for _, seat := range []string{"eng-1", "eng-3"} {
		if err := c.call(http.MethodPost, "/seats/"+seat+"/pause", crewlet.PauseRequest{Reason: "holds a task of the A2A client", By: "tester"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := len(c.tickets("limit=200"))

	// The client's steps take seconds; one that waits for an event that
	// never comes fails the test in two minutes.
	clientCtx, cancelClient := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelClient()
	node := exec.CommandContext(clientCtx, "node", scriptPath)
	node.Env = append(os.Environ(), "A2A_API="+c.api, "A2A_TOKEN="+c.bearer())
	out, err := node.CombinedOutput()
	transcript := string(out)
	t.Logf("client transcript:\n%s", transcript)
	if err != nil {
		t.Fatalf("the client failed: %v", err)
	}

	want := []string{
		`(?m)^card eng-2 at delegco streaming=true$`,
		`(?m)^send (t-\w+) TASK_STATE_COMPLETED Fixed the login$`,
		`(?m)^get (t-\w+) TASK_STATE_COMPLETED Fixed the login$`,
		`(?m)^stream task (t-\w+) TASK_STATE_(WORKING|COMPLETED)`,
		`(?m)^stream (artifact (t-\w+) reply|task (t-\w+) TASK_STATE_COMPLETED) Fixed the stream$`,
		`(?m)^held (t-\w+) TASK_STATE_WORKING$`,
		`(?m)^cancel (t-\w+) TASK_STATE_CANCELED$`,
		`(?m)^cancel again: TaskNotCancelableError$`,
		`(?m)^before-drop task (t-\w+) TASK_STATE_WORKING$`,
		`(?m)^resubscribed task (t-\w+) TASK_STATE_WORKING$`,
		`(?m)^resume eng-1 202$`,
		`(?m)^resubscribed artifact (t-\w+) reply Fixed the dropped one$`,
		`(?m)^resubscribed status (t-\w+) TASK_STATE_COMPLETED Fixed the dropped one$`,
		`(?m)^asked (t-\w+) TASK_STATE_INPUT_REQUIRED which part of the API\?$`,
		`(?ms)^answered (t-\w+) TASK_STATE_COMPLETED Reviewed\. .*?the auth part$`,
		`(?m)^get unknown: TaskNotFoundError$`,
		`(?m)^done$`,
	}
	for _, w := range want {
		if !regexp.MustCompile(w).MatchString(transcript) {
			t.Errorf("the transcript has no line matching %s", w)
		}
	}
	if strings.Contains(transcript, "stream status") && !regexp.MustCompile(`(?m)^stream status (t-\w+) TASK_STATE_COMPLETED Fixed the stream$`).MatchString(transcript) {
		t.Errorf("the stream's status updates end without the completed one")
	}

	// The company's endpoint, called as docs/operations.md's curl calls a
	// seat's, with the seat named in metadata.to.
	status, body, err := c.raw(http.MethodPost, "/a2a", `{"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
		"params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "please fix the company"}]}, "metadata": {"to": "eng-2"}}}`)
	var sent struct {
		Result struct{ Task a2a.Task } `json:"result"`
	}
	if err == nil {
		err = json.Unmarshal(body, &sent)
	}
	if task := sent.Result.Task; err != nil || status != http.StatusOK || task.Status.State != a2a.StateCompleted || len(task.Artifacts) != 1 || *task.Artifacts[0].Parts[0].Text != "Fixed the company" {
		t.Fatalf("SendMessage to the company for eng-2: %d %s %v; want it completed with eng-2's reply", status, body, err)
	}

	// One ticket per task: six tasks, six tickets, each as the client
	// saw it end.
	ids := map[string]bool{sent.Result.Task.ID: true}
	for _, m := range regexp.MustCompile(`(?m)^(?:send|stream task|held|before-drop task|asked|answered) (t-\w+)`).FindAllStringSubmatch(transcript, -1) {
		ids[m[1]] = true
	}
	all := c.tickets("limit=200")
	if len(ids) != 6 || len(all)-before != 6 {
		t.Fatalf("the clients made %d tasks and the company %d tickets; want 6 and 6, one ticket per task", len(ids), len(all)-before)
	}
	phases := map[crewlet.TicketPhase]int{}
	for _, tk := range all {
		if ids[tk.ID] {
			phases[tk.Phase]++
		}
	}
	if phases[crewlet.TicketDone] != 5 || phases[crewlet.TicketCancelled] != 1 {
		t.Fatalf("the tasks' tickets end %v; want 5 done and 1 cancelled", phases)
	}
}
