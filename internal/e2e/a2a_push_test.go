package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/a2a/push"
	"github.com/crewlet/crewlet/internal/testenv"
)

// webhook is an A2A push receiver, as docs/operations.md tells one to be
// written: it checks the token, the authentication and the signature, and
// drops a notification whose event id it has had.
type webhook struct {
	mu       sync.Mutex
	seen     map[string]bool
	states   []string // of each notification kept, in arrival order
	posts    int
	problems []string
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts++
	id, ts := r.Header.Get(push.EventIDHeader), r.Header.Get(push.TimestampHeader)
	var ev a2a.StreamResponse
	switch {
	case r.Header.Get(push.TokenHeader) != "hook-token" || r.Header.Get("Authorization") != "Bearer hook-secret":
		h.problems = append(h.problems, fmt.Sprintf("post %d has token %q and authorization %q", h.posts, r.Header.Get(push.TokenHeader), r.Header.Get("Authorization")))
	case r.Header.Get(push.SignatureHeader) != push.Sign("hook-token", ts, body):
		h.problems = append(h.problems, fmt.Sprintf("post %d's signature %q is not of its body", h.posts, r.Header.Get(push.SignatureHeader)))
	case json.Unmarshal(body, &ev) != nil || ev.Task == nil:
		h.problems = append(h.problems, fmt.Sprintf("post %d's body %s is not a stream response with a task", h.posts, body))
	case id == "":
		h.problems = append(h.problems, fmt.Sprintf("post %d has no event id", h.posts))
	case !h.seen[id]:
		h.seen[id] = true
		h.states = append(h.states, ev.Task.Status.State)
	}
}

// kept is what the receiver kept so far.
func (h *webhook) kept() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.states...)
}

// A webhook registered for a task with @a2a-js/sdk's client gets each of
// the task's state changes once, in order, signed, though the API process
// is killed mid-task and the task changes while no API is up: the change
// waits in Postgres for the API that starts next.
func TestA2APushWebhookGetsEachStateOnceAcrossAnAPIRestart(t *testing.T) {
	dir := npmPackage(t, a2aSDK)
	script, err := os.ReadFile(filepath.Join("testdata", "a2a_push_client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "client.mjs")
	if err := os.WriteFile(scriptPath, script, 0o600); err != nil {
		t.Fatal(err)
	}
	hook := &webhook{seen: map[string]bool{}}
	receiver := httptest.NewServer(hook)
	t.Cleanup(receiver.Close)

	// The receiver is on loopback, which a webhook may reach only when
	// a2a.push.allow lets it.
	c := newCompany(t, writeFile(t, "org.yaml", a2aOrg+"a2a: { push: { allow: [\""+receiver.URL+"/hooks/\"] } }\n"))
	apiProc := c.apiServer()
	c.worker("n1")
	c.waitAttached(60 * time.Second)
	// rev-1 holds the task until the webhook is set.
	if err := c.call(http.MethodPost, "/seats/rev-1/pause", crewlet.PauseRequest{Reason: "holds the task until its webhook is set", By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", scriptPath)
	node.Env = append(os.Environ(), "A2A_API="+c.api, "A2A_TOKEN="+c.bearer(), "A2A_HOOK="+receiver.URL+"/hooks/a2a")
	out, err := node.CombinedOutput()
	transcript := string(out)
	t.Logf("client transcript:\n%s", transcript)
	if err != nil {
		t.Fatalf("the client failed: %v", err)
	}
	for _, w := range []string{
		`(?m)^card pushNotifications=true$`,
		`(?m)^task t-\w+ TASK_STATE_WORKING$`,
		`(?m)^created hook-1 t-\w+ ` + regexp.QuoteMeta(receiver.URL) + `/hooks/a2a hook-token$`,
		`(?m)^got hook-1 token=hidden scheme=Bearer$`,
		`(?m)^listed hook-1$`,
		`(?m)^internal: .*a2a\.push\.allow`,
		`(?m)^done$`,
	} {
		if !regexp.MustCompile(w).MatchString(transcript) {
			t.Errorf("the transcript has no line matching %s", w)
		}
	}
	m := regexp.MustCompile(`(?m)^task (t-\w+)`).FindStringSubmatch(transcript)
	if m == nil {
		t.Fatal("the client printed no task")
	}
	task := m[1]

	// rev-1 goes on and the API dies at once; rev-1 asks its question while
	// no API is up.
	if err := c.call(http.MethodPost, "/seats/rev-1/resume", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	apiProc.kill(t)
	testenv.Eventually(t, time.Minute, "rev-1 asks its question", func() error {
		tk, err := c.store().Ticket(ctx, task)
		if err != nil || tk.Phase != crewlet.TicketAsking {
			return fmt.Errorf("ticket %s is %s (%v)", task, tk.Phase, err)
		}
		return nil
	})
	c.apiServer()
	testenv.Eventually(t, time.Minute, "the webhook gets input-required", func() error {
		if got := hook.kept(); len(got) == 0 {
			return fmt.Errorf("the webhook has had nothing")
		}
		return nil
	})

	// The answer, from the API that started since, completes the task.
	status, body, err := c.raw(http.MethodPost, "/a2a/seats/rev-1", `{"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
		"params": {"message": {"messageId": "m-answer", "taskId": "`+task+`", "role": "ROLE_USER", "parts": [{"text": "the auth part"}]}, "configuration": {"returnImmediately": true}}}`)
	if err != nil || status != http.StatusOK || !strings.Contains(string(body), a2a.StateWorking) {
		t.Fatalf("the answer: %d %s %v; want the task working", status, body, err)
	}
	// A config's notifications go out in order, the next only once the one
	// before is delivered: once the completed one is in, no earlier one can
	// come again.
	testenv.Eventually(t, time.Minute, "the webhook gets completed", func() error {
		if got := hook.kept(); len(got) == 0 || got[len(got)-1] != a2a.StateCompleted {
			return fmt.Errorf("the webhook has had %v", got)
		}
		return nil
	})
	hook.mu.Lock()
	defer hook.mu.Unlock()
	want := []string{a2a.StateInputRequired, a2a.StateWorking, a2a.StateCompleted}
	if strings.Join(hook.states, " ") != strings.Join(want, " ") || len(hook.problems) > 0 {
		t.Fatalf("the webhook kept %v (of %d posts), with problems %v; want %v, each once", hook.states, hook.posts, hook.problems, want)
	}
	if hook.posts != len(want) {
		t.Logf("%d posts for %d notifications: a post the killed API made and did not record was made again, with its event id", hook.posts, len(want))
	}
}
