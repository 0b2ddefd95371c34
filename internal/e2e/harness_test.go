// Package e2e runs the crewlet binary as real OS processes against the real
// dev stack (Temporal dev server, Postgres, Redis) and checks what a user sees.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/workers"
)

// binary is the crewlet binary built once for the package.
var binary string

// namespace is the package's own Temporal namespace: its tests close every
// seat workflow they find, and seat ids are fixed (seat/{handle}), so in the
// shared "default" namespace they would close other packages' seats, or
// another run's.
var namespace string

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	ns, dropNamespace, err := testenv.Namespace(ctx, os.Getenv("CREWLET_TEMPORAL_ADDRESS"), "crewlet-e2e")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	namespace = ns
	dir, err := os.MkdirTemp("", "crewlet-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "crewlet")
	build := exec.Command("go", "build", "-o", binary, "github.com/crewlet/crewlet/cmd/crewlet")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build crewlet:", err)
		os.Exit(1)
	}
	// The local tokens the package's APIs mint, which its CLI runs and
	// the harness read, live in a folder of the package's own (after the
	// build, which reads Go's own config there): a process killed with -9
	// leaves its token file, which another package's test on the same
	// port would otherwise find.
	if err := os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// And so do the seats' sandbox workspaces.
	if err := os.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	dropNamespace()
	os.Exit(code)
}

// exampleOrg is the org the README runs.
const exampleOrg = "../../deploy/examples/org.yaml"

// company is one test's crewlet deployment: its own database, Redis prefix
// and task queue on the shared dev stack, and the processes it started.
type company struct {
	t         testing.TB
	taskQueue string
	dbURL     string
	prefix    string
	db        *store.Store
	mb        *mailbox.Mailbox
	config    string
	env       []string
	api       string
	temporal  client.Client
	// httpClient calls the API; nil is http.DefaultClient (an API over
	// TLS needs one that trusts its certificate).
	httpClient *http.Client
	// token, when set, is the bearer token of the company's API calls.
	token string
	mu    sync.Mutex
	procs []*proc
}

// proc is one crewlet process and its output.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testenv.Log
	done chan struct{}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// newCompany prepares a deployment of the org file configPath. Nothing runs
// until the test starts processes.
func newCompany(t testing.TB, configPath string) *company {
	t.Helper()
	return newCompanyOn(t, configPath, testenv.MigratedDatabase(t))
}

// newCompanyOn is newCompany on the migrated database dbURL, for a test
// with a Postgres of its own (testenv.OwnPostgres).
func newCompanyOn(t testing.TB, configPath, dbURL string) *company {
	t.Helper()
	return newCompanyOnTemporal(t, configPath, dbURL, testenv.Stack(t).Temporal, namespace)
}

// newCompanyOnTemporal is newCompanyOn on the Temporal frontend temporal
// and its namespace ns, for a test with a Temporal of its own
// (testenv.OwnTemporal).
func newCompanyOnTemporal(t testing.TB, configPath, dbURL, temporal, ns string) *company {
	t.Helper()
	stack := testenv.Stack(t)
	suffix := testenv.Suffix()
	addr := freeAddr(t)
	c := &company{
		t:      t,
		config: configPath,
		api:    "http://" + addr,
		dbURL:  dbURL,
		prefix: "e2e" + suffix,
		env: append(os.Environ(),
			"CREWLET_PG_URL="+dbURL,
			"CREWLET_REDIS_URL="+stack.RedisURL,
			"CREWLET_TEMPORAL_ADDRESS="+temporal,
			"CREWLET_TEMPORAL_NAMESPACE="+ns,
			"CREWLET_TEMPORAL_TASK_QUEUE=crewlet-e2e-"+suffix,
			"CREWLET_MAILBOX_KEY_PREFIX=e2e"+suffix,
			"CREWLET_API_LISTEN="+addr,
		),
	}
	tc, err := client.Dial(client.Options{HostPort: temporal, Namespace: ns})
	if err != nil {
		t.Fatalf("connect temporal: %v", err)
	}
	c.temporal = tc
	// Seat workflow ids are fixed by design (seat/{handle}), so the package's
	// tests share them: close whatever an earlier test left open, before and
	// after.
	c.terminateSeats()
	c.taskQueue = "crewlet-e2e-" + suffix
	t.Cleanup(func() {
		c.stopAll()
		c.replayHistories()
		c.terminateSeats()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tc.ScheduleClient().GetHandle(ctx, workers.RebalanceScheduleID(c.taskQueue)).Delete(ctx)
		_ = tc.ScheduleClient().GetHandle(ctx, workers.MaintenanceScheduleID(c.taskQueue)).Delete(ctx)
		_ = tc.ScheduleClient().GetHandle(ctx, workers.HealthScheduleID(c.taskQueue)).Delete(ctx)
		_ = tc.ScheduleClient().GetHandle(ctx, workers.ReconcileScheduleID(c.taskQueue)).Delete(ctx)
		tc.Close()
	})
	return c
}

// setenv sets an environment variable for every process the company starts
// from now on (e.g. CREWLET_NODES_REBALANCE_INTERVAL=2s).
func (c *company) setenv(kv ...string) {
	c.env = append(c.env, kv...)
}

// worker starts `crewlet worker --node-id ID` with extra flags, and waits
// until its presence row is live.
func (c *company) worker(nodeID string, flags ...string) *proc {
	c.t.Helper()
	return c.workerWithEnv(nodeID, nil, flags...)
}

// workerWithEnv is worker with extra environment variables for this process.
func (c *company) workerWithEnv(nodeID string, env []string, flags ...string) *proc {
	c.t.Helper()
	return c.workerOf(binary, nodeID, env, flags...)
}

// workerOf is workerWithEnv running the crewlet binary bin (another
// build's, see buildAt).
func (c *company) workerOf(bin, nodeID string, env []string, flags ...string) *proc {
	c.t.Helper()
	p := c.startBinary(bin, "worker "+nodeID, env, append([]string{"worker", "--node-id", nodeID}, flags...)...)
	testenv.Eventually(c.t, 30*time.Second, "node "+nodeID+" live", func() error {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, p.out.String())
		default:
		}
		for _, n := range c.nodes().Nodes {
			if n.NodeID == nodeID && n.Live {
				return nil
			}
		}
		return fmt.Errorf("node %s not live yet", nodeID)
	})
	return p
}

// apiServer starts `crewlet api` and waits until it answers.
func (c *company) apiServer() *proc {
	c.t.Helper()
	return c.apiServerWithEnv(nil)
}

// apiServerWithEnv is apiServer with extra environment variables for this
// process.
func (c *company) apiServerWithEnv(env []string) *proc {
	c.t.Helper()
	p := c.startWithEnv("api", env, "api")
	testenv.Eventually(c.t, 30*time.Second, "api ready", func() error {
		select {
		case <-p.done:
			return fmt.Errorf("api exited: %s", p.out.String())
		default:
		}
		return c.call(http.MethodGet, "/readyz", nil, nil)
	})
	return p
}

// nodes returns GET /nodes; an empty view while the API is not up.
func (c *company) nodes() api.NodesView {
	var v api.NodesView
	_ = c.call(http.MethodGet, "/nodes", nil, &v)
	return v
}

// seats returns GET /seats.
func (c *company) seats() []api.SeatSummary {
	c.t.Helper()
	var seats []api.SeatSummary
	if err := c.call(http.MethodGet, "/seats", nil, &seats); err != nil {
		c.t.Fatalf("GET /seats: %v", err)
	}
	return seats
}

// waitAttached waits until every agent seat holds a tenure on a live node.
func (c *company) waitAttached(timeout time.Duration) {
	c.t.Helper()
	testenv.Eventually(c.t, timeout, "every agent seat attached", func() error {
		live := map[string]bool{}
		for _, n := range c.nodes().Nodes {
			if n.Live {
				live[n.Incarnation] = true
			}
		}
		var seats []api.SeatSummary
		if err := c.call(http.MethodGet, "/seats", nil, &seats); err != nil {
			return err
		}
		for _, s := range seats {
			if s.Kind == "agent" && (s.Status != string(crewlet.StatusIdle) || !live[s.Node]) {
				return fmt.Errorf("seat %s is %s on %q", s.Handle, s.Status, s.Node)
			}
		}
		return nil
	})
}

// signal sends a signal to a process.
func (p *proc) signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
		return -1
	}
}

// terminateSeats ends every open seat workflow in the namespace.
func (c *company) terminateSeats() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A person's notes workflow has a fixed id too (notes/{person}). Every
	// page: a benchmark leaves thousands.
	var ids []string
	for _, wt := range []string{crewlet.WorkflowSeat, crewlet.WorkflowPersonNotes} {
		var token []byte
		for {
			resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Query:         fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", wt),
				NextPageToken: token,
			})
			if err != nil {
				c.t.Fatalf("list %s workflows: %v", wt, err)
			}
			for _, ex := range resp.GetExecutions() {
				if ex.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
					ids = append(ids, ex.GetExecution().GetWorkflowId())
				}
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := c.temporal.TerminateWorkflow(ctx, id, "", "e2e test cleanup")
			if err != nil && !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "already completed") {
				c.t.Logf("terminate %s: %v", id, err)
			}
		}()
	}
	wg.Wait()
}

// start runs `crewlet args... --config FILE` with the company's env.
func (c *company) start(name string, args ...string) *proc {
	c.t.Helper()
	return c.startWithEnv(name, nil, args...)
}

// joinHooks merges the CREWLET_TEST_HOOKS entries of env into one, so the
// company's hooks (setenv) and a process's own (workerWithEnv) both apply; a
// hook named in both makes the process refuse to start.
func joinHooks(env []string) []string {
	var out, hooks []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, testhook.Env+"="); ok {
			hooks = append(hooks, v)
			continue
		}
		out = append(out, kv)
	}
	if len(hooks) > 0 {
		out = append(out, testhook.Env+"="+strings.Join(hooks, ","))
	}
	return out
}

// startWithEnv is start with extra environment variables for this process
// only (a test hook, say).
func (c *company) startWithEnv(name string, env []string, args ...string) *proc {
	c.t.Helper()
	return c.startBinary(binary, name, env, args...)
}

// startBinary is startWithEnv running the crewlet binary bin.
func (c *company) startBinary(bin, name string, env []string, args ...string) *proc {
	c.t.Helper()
	args = append(args, "--config", c.config)
	cmd := exec.Command(bin, args...)
	cmd.Env = joinHooks(append(append([]string(nil), c.env...), env...))
	p := &proc{name: name, cmd: cmd, out: &testenv.Log{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if dir := os.Getenv("CREWLET_E2E_LOGS"); dir != "" {
		// Keep every process's output, for looking into a benchmark or a
		// test that passed slowly.
		f, err := os.Create(filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(c.t.Name()+"-"+name)+".log"))
		if err != nil {
			c.t.Fatalf("CREWLET_E2E_LOGS: %v", err)
		}
		c.t.Cleanup(func() { _ = f.Close() })
		cmd.Stdout, cmd.Stderr = io.MultiWriter(p.out, f), io.MultiWriter(p.out, f)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("--- output of %s ---\n%s", p.name, p.out.String())
		}
	})
	return p
}

// serve starts `crewlet serve` and waits until the API is ready and every
// agent seat has attached.
func (c *company) serve() *proc {
	c.t.Helper()
	p := c.start("serve", "serve")
	c.waitReady(p)
	return p
}

func (c *company) waitReady(p *proc) {
	c.t.Helper()
	testenv.Eventually(c.t, 60*time.Second, "API ready and seats attached", func() error {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, p.out.String())
		default:
		}
		var seats []api.SeatSummary
		if err := c.call(http.MethodGet, "/seats", nil, &seats); err != nil {
			return err
		}
		for _, s := range seats {
			if s.Kind == "agent" && (s.Status == "absent" || s.Status == string(crewlet.StatusEstablishing) || s.Status == string(crewlet.StatusUnplaceable) || s.Epoch == 0) {
				return fmt.Errorf("seat %s is %s (epoch %d)", s.Handle, s.Status, s.Epoch)
			}
		}
		return nil
	})
}

// kill ends a process at once, as a crash would.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit after SIGKILL", p.name)
	}
}

func (c *company) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	c.procs = nil
}

// call sends a request to the API; an error response becomes *apiStatus.
func (c *company) call(method, path string, body, out any) error {
	status, data, err := c.raw(method, path, body)
	if err != nil {
		return err
	}
	if status >= 300 {
		return &apiStatus{Status: status, Body: string(data)}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

type apiStatus struct {
	Status int
	Body   string
}

func (e *apiStatus) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// raw sends a request and returns the status and body, whatever they are.
// A string body is sent as it is, anything else as JSON.
func (c *company) raw(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.api+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token := c.bearer(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// client is the HTTP client of the company's API calls.
func (c *company) client() *http.Client {
	if c.httpClient != nil {
		return c.httpClient
	}
	return http.DefaultClient
}

// bearer is the token the company's API calls carry: c.token when a test
// set one, else the local token the API process minted (the org names no
// tokens), read afresh each call as the CLI on this machine reads it, so a
// restarted API's new token is the one sent.
func (c *company) bearer() string {
	if c.token != "" {
		return c.token
	}
	u, err := url.Parse(c.api)
	if err != nil {
		return ""
	}
	path, err := config.LocalTokenPath(u.Port())
	if err != nil {
		return ""
	}
	data, _ := os.ReadFile(path)
	return strings.TrimSpace(string(data))
}

// getAs sends GET url with token as its bearer (none when empty) and
// returns the status and body.
func getAs(t testing.TB, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body
}

// send posts a message and returns it as queued.
func (c *company) send(to, text string, opts ...func(*api.SendMessageRequest)) crewlet.Message {
	c.t.Helper()
	req := api.SendMessageRequest{Text: text}
	for _, o := range opts {
		o(&req)
	}
	var msg crewlet.Message
	if err := c.call(http.MethodPost, "/seats/"+to+"/messages", req, &msg); err != nil {
		c.t.Fatalf("send to %s: %v", to, err)
	}
	return msg
}

func inConversation(id string) func(*api.SendMessageRequest) {
	return func(r *api.SendMessageRequest) { r.Conversation = id }
}

func from(handle string) func(*api.SendMessageRequest) {
	return func(r *api.SendMessageRequest) { r.From = handle }
}

// conversation returns a conversation's transcript; empty if none yet.
func (c *company) conversation(id string) []api.Conversation {
	var conv api.Conversation
	err := c.call(http.MethodGet, "/conversations/"+id, nil, &conv)
	if as, ok := err.(*apiStatus); ok && as.Status == http.StatusNotFound {
		return nil
	}
	if err != nil {
		c.t.Fatalf("read conversation %s: %v", id, err)
	}
	return []api.Conversation{conv}
}

// repliesTo returns the recorded replies to msg.
func (c *company) repliesTo(msg crewlet.Message) []string {
	var out []string
	for _, conv := range c.conversation(msg.Conversation) {
		for _, m := range conv.Messages {
			if m.InReplyTo == msg.EventID {
				out = append(out, m.Body)
			}
		}
	}
	return out
}

// waitReply waits for msg's reply and returns it.
func (c *company) waitReply(msg crewlet.Message, timeout time.Duration) string {
	c.t.Helper()
	var reply string
	testenv.Eventually(c.t, timeout, "reply to "+msg.Body, func() error {
		r := c.repliesTo(msg)
		if len(r) == 0 {
			return fmt.Errorf("no reply yet to %q (event %s)", msg.Body, msg.EventID)
		}
		reply = r[0]
		return nil
	})
	return reply
}

// state returns a seat's live state. A query can go unanswered for a moment
// while the worker that holds the seat's workflow lets go of it (a drain, a
// kill), so it asks again for a few seconds before failing the test.
func (c *company) state(handle string) crewlet.SeatState {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var d api.SeatDetail
		err := c.call(http.MethodGet, "/seats/"+handle, nil, &d)
		if err == nil && d.State != nil {
			return *d.State
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("seat %s has no state: %v %s", handle, err, d.StateError)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitAnswered waits until the seats have acked every entry in their
// mailboxes: each turn that could reply has finished, so a test that then
// finds no second reply has seen the positive signal, not a quiet second.
func (c *company) waitAnswered(timeout time.Duration, handles ...string) {
	c.t.Helper()
	testenv.Eventually(c.t, timeout, fmt.Sprintf("every entry of %v answered and acked", handles), func() error {
		backlogs, err := c.mailbox().Backlogs(context.Background(), handles)
		if err != nil {
			return err
		}
		for _, h := range handles {
			if b := backlogs[h]; b.Waiting != 0 {
				return fmt.Errorf("%s has %d entries waiting", h, b.Waiting)
			}
		}
		return nil
	})
}

// waitWakeHandled waits until the seat's workflow has finished a workflow
// task after a wake signal received at or after since. A test that then
// finds mail unanswered has seen the seat decide not to answer it (paused,
// or placed nowhere), not a quiet second.
func (c *company) waitWakeHandled(handle string, since time.Time, timeout time.Duration) {
	c.t.Helper()
	testenv.Eventually(c.t, timeout, "seat "+handle+" handled a wake", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.temporal.GetWorkflowHistory(ctx, crewlet.SeatWorkflowID(handle), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		woken := false
		for iter.HasNext() {
			e, err := iter.Next()
			if err != nil {
				return err
			}
			switch {
			case e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == crewlet.SignalWake && !e.GetEventTime().AsTime().Before(since):
				woken = true
			case woken && e.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				return nil
			}
		}
		if woken {
			return fmt.Errorf("the wake is not handled yet")
		}
		return fmt.Errorf("no wake since %s", since.Format(time.RFC3339Nano))
	})
}

// cli runs the crewlet binary as a client against the company's API.
func (c *company) cli(args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "CREWLET_API="+c.api)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fleetOrg writes an org file with n agent seats s01..sNN of one role run by
// a scripted profile with the given delay, plus extra YAML seat lines (for
// pinned roles, see pinnedRole), and returns its path.
func fleetOrg(t testing.TB, n int, delay time.Duration, extraSeats ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "company: { name: fleet }\n")
	fmt.Fprintf(&b, "profiles:\n  slow: { provider: scripted, delay: %s, rules: [ { match: '^poison', fail: 'this message always fails', fail_kind: auth },\n", delay)
	fmt.Fprintf(&b, "    { match: '^malformed', fail: 'the provider refuses this request' } ] }\n")
	fmt.Fprintf(&b, "roles:\n  worker: { charter: works, profile: slow }\n")
	fmt.Fprintf(&b, "  gitter: { charter: needs git, profile: slow, placement: { labels: { tools: git } } }\n")
	fmt.Fprintf(&b, "seats:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - { handle: s%02d, role: worker }\n", i)
	}
	for _, line := range extraSeats {
		fmt.Fprintf(&b, "  - %s\n", line)
	}
	path := filepath.Join(t.TempDir(), "org.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// store returns a connection to the company's database.
func (c *company) store() *store.Store {
	c.t.Helper()
	if c.db == nil {
		st, err := store.Open(context.Background(), c.dbURL)
		if err != nil {
			c.t.Fatalf("open company database: %v", err)
		}
		c.t.Cleanup(st.Close)
		c.db = st
	}
	return c.db
}

// mailbox returns a client of the company's mailboxes.
func (c *company) mailbox() *mailbox.Mailbox {
	c.t.Helper()
	if c.mb == nil {
		mb, err := mailbox.Open(context.Background(), testenv.Stack(c.t).RedisURL, c.prefix)
		if err != nil {
			c.t.Fatalf("open company mailboxes: %v", err)
		}
		c.t.Cleanup(func() { _ = mb.Close() })
		c.mb = mb
	}
	return c.mb
}
