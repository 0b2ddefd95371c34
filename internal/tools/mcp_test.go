package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
)

// testserverBin is the testserver binary, built once by TestMain.
var testserverBin string

// probeServerEnv hands the probe helper (protect_test.go) the testserver
// binary, so that it builds none.
const probeServerEnv = "CREWLET_TOOLS_PROBE_SERVER"

func TestMain(m *testing.M) {
	if bin := os.Getenv(probeServerEnv); bin != "" {
		// The probe helper, perhaps as a user who may not build.
		testserverBin = bin
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "crewlet-tools-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Reachable by every user: a test runs it as another one (run_as).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testserverBin, err = toolstest.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The stubborn tests wait through every stop step; keep them short.
	stopGrace = 200 * time.Millisecond
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type bundle struct {
	s         *Session
	countFile string
	pidFile   string
	logs      *testenv.Log
}

// setup starts a session with one testserver named "ts", with extra env.
func setup(t *testing.T, env ...string) bundle {
	t.Helper()
	dir := t.TempDir()
	b := bundle{
		countFile: filepath.Join(dir, "count"),
		pidFile:   filepath.Join(dir, "pid"),
		logs:      &testenv.Log{},
	}
	env = append([]string{"TESTSERVER_COUNT_FILE=" + b.countFile, "TESTSERVER_PID_FILE=" + b.pidFile}, env...)
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := Start(context.Background(), []ServerConfig{{Name: "ts", Command: []string{testserverBin}, Env: env}}, log)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	b.s = s
	return b
}

func call(t *testing.T, s *Session, name, args, key string) Result {
	t.Helper()
	res, err := s.Call(context.Background(), name, json.RawMessage(args), key)
	if err != nil {
		t.Fatalf("Call(%s): %v", name, err)
	}
	return res
}

// exited reports whether pid is gone entirely: exited and reaped.
func exited(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// notRunning reports whether pid is gone or a zombie. A grandchild orphaned
// to a pid 1 that does not reap stays a zombie, which runs nothing.
func notRunning(pid int) bool {
	if exited(pid) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && (b[i+2] == 'Z' || b[i+2] == 'X')
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var b []byte
	for range 100 {
		var err error
		if b, err = os.ReadFile(path); err == nil && len(b) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("pid file %s: %q: %v", path, b, err)
	}
	return pid
}

func TestToolsAreNamespacedWithReadOnlyFlags(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := map[string]bool{ // name → ReadOnly
		"ts__fail":         false,
		"ts__lookup":       true,
		"ts__probe_parent": true,
		"ts__read_counter": true,
		"ts__read_files":   true,
		"ts__slow_write":   false,
		"ts__write":        false,
		"ts__write_file":   false,
	}
	got := b.s.Tools()
	var names []string
	for _, tool := range got {
		names = append(names, tool.Spec.Name)
		ro, ok := want[tool.Spec.Name]
		if !ok {
			t.Errorf("unexpected tool %q", tool.Spec.Name)
			continue
		}
		if tool.Spec.ReadOnly != ro {
			t.Errorf("%s: ReadOnly = %v, want %v", tool.Spec.Name, tool.Spec.ReadOnly, ro)
		}
		if tool.Server != "ts" || tool.Spec.Name != "ts__"+tool.Name {
			t.Errorf("%s: Server, Name = %q, %q; want ts, %s", tool.Spec.Name, tool.Server, tool.Name, strings.TrimPrefix(tool.Spec.Name, "ts__"))
		}
		if tool.Spec.Description == "" {
			t.Errorf("%s: empty description", tool.Spec.Name)
		}
	}
	if len(got) != len(want) || !slices.IsSorted(names) {
		t.Errorf("tools = %v, want the %d of %v, sorted", names, len(want), want)
	}

	write, ok := b.s.Lookup("ts__write")
	if !ok {
		t.Fatal("Lookup(ts__write) found nothing")
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(write.Spec.Schema, &schema); err != nil {
		t.Fatalf("write schema %s: %v", write.Spec.Schema, err)
	}
	if _, ok := schema.Properties["text"]; schema.Type != "object" || !ok {
		t.Errorf("write schema = %s, want an object with property text", write.Spec.Schema)
	}
}

func TestWriteCarriesIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ text, key string }{{"one", "wk1:0:0"}, {"two", "wk1:1:0"}} {
		res := call(t, b.s, "ts__write", fmt.Sprintf(`{"text":%q}`, c.text), c.key)
		if want := "written: " + c.text; res.Text != want || res.IsError {
			t.Errorf("write %s = %+v, want Text %q", c.text, res, want)
		}
	}
	lines := toolstest.Writes(t, b.countFile)
	want := []toolstest.Write{{Key: "wk1:0:0", Text: "one"}, {Key: "wk1:1:0", Text: "two"}}
	if !slices.Equal(lines, want) {
		t.Errorf("count file = %+v, want %+v", lines, want)
	}
	if res := call(t, b.s, "ts__read_counter", "", ""); res.Text != "2" || res.IsError {
		t.Errorf("read_counter = %+v, want Text 2", res)
	}
}

func TestCallWithoutKeySendsNone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	call(t, b.s, "ts__write", `{"text":"x"}`, "")
	if lines := toolstest.Writes(t, b.countFile); len(lines) != 1 || lines[0].Key != "" {
		t.Errorf("count file = %+v, want one line without a key", lines)
	}
}

func TestCallRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, tool, args, code string
	}{
		{"unknown tool", "ts__nope", `{}`, crewlet.ENOTFOUND},
		{"bare tool name", "write", `{"text":"x"}`, crewlet.ENOTFOUND},
		{"args not an object", "ts__write", `["x"]`, crewlet.EINVALID},
		{"args not JSON", "ts__write", `{"text":`, crewlet.EINVALID},
		{"args null", "ts__write", `null`, crewlet.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.s.Call(context.Background(), tt.tool, json.RawMessage(tt.args), "k")
			if got := crewlet.ErrorCode(err); got != tt.code {
				t.Errorf("Call(%s, %s) error = %v (code %q), want code %q", tt.tool, tt.args, err, got, tt.code)
			}
			if err != nil && !strings.Contains(err.Error(), tt.tool) {
				t.Errorf("error %q does not name the tool %q", err, tt.tool)
			}
		})
	}
	if lines := toolstest.Writes(t, b.countFile); len(lines) != 0 {
		t.Errorf("refused calls wrote %+v", lines)
	}
}

func TestFailIsAnErrorResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := call(t, b.s, "ts__fail", "", "k")
	if !res.IsError || res.Text != "failed on purpose" {
		t.Errorf("fail = %+v, want IsError with its text", res)
	}
}

func TestChildEnvironmentIsIsolated(t *testing.T) {
	t.Setenv("CREWLET_TOOLS_TEST_SECRET", "hunter2")
	b := setup(t, "EXTRA=1")
	pid := b.s.PIDs()[0]
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Skipf("no /proc environ: %v", err)
	}
	vars := strings.Split(string(env), "\x00")
	if slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "CREWLET_TOOLS_TEST_SECRET=") }) {
		t.Errorf("child inherited CREWLET_TOOLS_TEST_SECRET")
	}
	if !slices.Contains(vars, "EXTRA=1") || !slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "PATH=") }) {
		t.Errorf("child env %q lacks EXTRA=1 or PATH", vars)
	}
}

func TestChildStderrIsLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := fmt.Sprintf("ready pid=%d", b.s.PIDs()[0])
	testenv.Eventually(t, 10*time.Second, "the child's stderr logged", func() error {
		if logs := b.logs.String(); !strings.Contains(logs, want) {
			return fmt.Errorf("logs lack the child's %q:\n%s", want, logs)
		}
		return nil
	})
}

func TestStartContextBoundsOnlyTheStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, []ServerConfig{{Name: "ts", Command: []string{testserverBin}}}, nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(100 * time.Millisecond)
	if res := call(t, s, "ts__read_counter", "", ""); res.Text != "0" {
		t.Errorf("read_counter after the start ctx ended = %+v, want 0", res)
	}
}

func TestCloseStopsEveryChild(t *testing.T) {
	t.Parallel()
	s, err := Start(context.Background(), []ServerConfig{
		{Name: "a", Command: []string{testserverBin}},
		{Name: "b", Command: []string{testserverBin}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pids := s.PIDs()
	if len(pids) != 2 {
		t.Fatalf("PIDs = %v, want 2", pids)
	}
	for _, pid := range pids {
		if exited(pid) {
			t.Fatalf("child %d not running before Close", pid)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, pid := range pids {
		if !exited(pid) {
			t.Errorf("child %d still exists after Close", pid)
		}
	}
	if _, err := s.Call(context.Background(), "a__read_counter", nil, ""); crewlet.ErrorCode(err) != crewlet.EUNAVAILABLE {
		t.Errorf("Call after Close: %v, want code %q", err, crewlet.EUNAVAILABLE)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if got := s.PIDs(); !slices.Equal(got, pids) {
		t.Errorf("PIDs after Close = %v, want %v", got, pids)
	}
}

func TestCloseKillsStubbornChild(t *testing.T) {
	t.Parallel()
	b := setup(t, "TESTSERVER_STUBBORN=1")
	pid := b.s.PIDs()[0]
	if err := b.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !exited(pid) {
		t.Errorf("stubborn child %d still exists after Close", pid)
	}
}

// A child that forks the real server (as npx or a shell wrapper does) must
// not leave it behind when the child itself exits.
func TestCloseKillsGrandchildren(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// "; exit" keeps sh from exec'ing, so the server is sh's child.
	s, err := Start(context.Background(), []ServerConfig{{
		Name:    "wrapped",
		Command: []string{"/bin/sh", "-c", testserverBin + "; exit"},
		Env:     []string{"TESTSERVER_STUBBORN=1", "TESTSERVER_PID_FILE=" + pidFile},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	grandchild := readPID(t, pidFile)
	if grandchild == s.PIDs()[0] {
		t.Fatalf("sh exec'd the server; the test needs it as a grandchild")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !exited(s.PIDs()[0]) {
		t.Errorf("child %d still exists", s.PIDs()[0])
	}
	deadline := time.Now().Add(10 * time.Second)
	for !notRunning(grandchild) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !notRunning(grandchild) {
		t.Errorf("grandchild %d still running after Close", grandchild)
		syscall.Kill(grandchild, syscall.SIGKILL)
	}
}

func TestUnprovenTeardownIsReportedAndRetried(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	s, err := Start(context.Background(), []ServerConfig{{
		Name:    "wrapped",
		Command: []string{"/bin/sh", "-c", testserverBin + "; exit"},
		Env:     []string{"TESTSERVER_STUBBORN=1", "TESTSERVER_PID_FILE=" + pidFile},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	grandchild := readPID(t, pidFile)
	defer syscall.Kill(grandchild, syscall.SIGKILL)

	// The grandchild survives: as if it sat in an uninterruptible wait.
	killGroup, sweepWait = func(int) {}, 300*time.Millisecond
	err = s.Close()
	killGroup, sweepWait = killGroupNow, 2*time.Second
	if err == nil || !strings.Contains(err.Error(), "mcp server wrapped") {
		t.Fatalf("Close with a surviving grandchild = %v, want an error naming server wrapped", err)
	}
	if notRunning(grandchild) {
		t.Fatalf("grandchild %d stopped without the kill; the test proves nothing", grandchild)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("retried Close: %v", err)
	}
	if !notRunning(grandchild) {
		t.Errorf("grandchild %d still running after the retried Close", grandchild)
	}
}

func TestCloseDuringSlowCall(t *testing.T) {
	t.Parallel()
	b := setup(t, "TESTSERVER_SLOW=60s")
	pid := b.s.PIDs()[0]
	errc := make(chan error, 1)
	go func() {
		_, err := b.s.Call(context.Background(), "ts__slow_write", json.RawMessage(`{"text":"late"}`), "k")
		errc <- err
	}()
	testenv.Eventually(t, 10*time.Second, "slow_write reached the server", func() error {
		if !strings.Contains(b.logs.String(), "slow_write started") {
			return errors.New("not yet")
		}
		return nil
	})
	closed := make(chan error, 1)
	go func() { closed <- b.s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for a 60s tool call")
	}
	select {
	case err := <-errc:
		if !errors.Is(err, errStopping) {
			t.Errorf("slow_write cut off by Close: error %v, want one saying the session is stopping", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("slow_write did not return after Close")
	}
	if !exited(pid) {
		t.Errorf("child %d still exists", pid)
	}
	if lines := toolstest.Writes(t, b.countFile); len(lines) != 0 {
		t.Errorf("cut-off slow_write wrote %+v", lines)
	}
	// The SDK's Close waits for calls in flight; had Close not ended the
	// call first, the SDK would have been given up on as stuck.
	if logs := b.logs.String(); strings.Contains(logs, "mcp_session_close_stuck") {
		t.Errorf("Close waited on the call in flight:\n%s", logs)
	}
}

func TestStartFailureStopsWhatStarted(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err := Start(context.Background(), []ServerConfig{
		{Name: "good", Command: []string{testserverBin}, Env: []string{"TESTSERVER_PID_FILE=" + pidFile}},
		{Name: "missing", Command: []string{"/nonexistent/mcp-server"}},
		{Name: "dies", Command: []string{"/bin/sh", "-c", "exit 3"}},
	}, nil)
	if err == nil {
		t.Fatal("Start succeeded with a missing command")
	}
	for _, name := range []string{"missing", "dies"} {
		if !strings.Contains(err.Error(), "mcp server "+name) {
			t.Errorf("error %q does not name server %q", err, name)
		}
	}
	if strings.Contains(err.Error(), "mcp server good") {
		t.Errorf("error %q blames the good server", err)
	}
	if pid := readPID(t, pidFile); !exited(pid) {
		t.Errorf("good server %d still exists after the failed Start", pid)
	}
}

func TestStartFailureWithUnprovenTeardownReturnsSession(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	killGroup, sweepWait = func(int) {}, 300*time.Millisecond
	s, err := Start(context.Background(), []ServerConfig{
		{
			Name:    "wrapped",
			Command: []string{"/bin/sh", "-c", testserverBin + "; exit"},
			Env:     []string{"TESTSERVER_STUBBORN=1", "TESTSERVER_PID_FILE=" + pidFile},
		},
		{Name: "missing", Command: []string{"/nonexistent/mcp-server"}},
	}, nil)
	killGroup, sweepWait = killGroupNow, 2*time.Second
	grandchild := readPID(t, pidFile)
	defer syscall.Kill(grandchild, syscall.SIGKILL)
	if err == nil || s == nil || !strings.Contains(err.Error(), "mcp server wrapped") {
		t.Fatalf("Start = %v, %v; want a session to retry Close on and an error naming server wrapped", s, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("retried Close: %v", err)
	}
	if !notRunning(grandchild) {
		t.Errorf("grandchild %d still running after the retried Close", grandchild)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cmd := []string{"srv"}
	tests := []struct {
		name    string
		servers []ServerConfig
		want    []string // substrings of the error; none means valid
	}{
		{"ok", []ServerConfig{{Name: "fs", Command: cmd}, {Name: "web-1_x", URL: "http://h/mcp"}}, nil},
		{"empty name", []ServerConfig{{Command: cmd}}, []string{`name ""`}},
		{"upper case", []ServerConfig{{Name: "FS", Command: cmd}}, []string{`name "FS"`}},
		{"dot", []ServerConfig{{Name: "a.b", Command: cmd}}, []string{`name "a.b"`}},
		{"separator", []ServerConfig{{Name: "a__b", Command: cmd}}, []string{`name "a__b"`}},
		{"trailing underscore", []ServerConfig{{Name: "a_", Command: cmd}}, []string{`name "a_"`}},
		{"too long", []ServerConfig{{Name: strings.Repeat("a", 33), Command: cmd}}, []string{"1-32"}},
		{"twice", []ServerConfig{{Name: "a", Command: cmd}, {Name: "a", URL: "http://h"}}, []string{"used twice"}},
		{"neither", []ServerConfig{{Name: "a"}}, []string{"exactly one"}},
		{"both", []ServerConfig{{Name: "a", Command: cmd, URL: "http://h"}}, []string{"exactly one"}},
		{"env on url", []ServerConfig{{Name: "a", URL: "http://h", Env: []string{"K=V"}}}, []string{"env applies only"}},
		{"bad env", []ServerConfig{{Name: "a", Command: cmd, Env: []string{"NOVALUE"}}}, []string{`env entry "NOVALUE"`}},
		{"credentials in url", []ServerConfig{{Name: "a", URL: "https://user:pw-secret@h/mcp"}}, []string{"mcp[0] (a): url must not hold credentials"}},
		{"token as url user", []ServerConfig{{Name: "a", URL: "https://tok-secret@h/mcp"}}, []string{"mcp[0] (a): url must not hold credentials"}},
		{"unparsable url", []ServerConfig{{Name: "a", URL: "https://u:pw-secret@h/%zz"}}, []string{"mcp[0] (a): url is not a valid URL"}},
		{"every problem", []ServerConfig{{Name: "A"}, {Name: "b__c", Command: cmd}}, []string{`name "A"`, "exactly one", `name "b__c"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.servers)
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				return
			}
			if crewlet.ErrorCode(err) != crewlet.EINVALID {
				t.Fatalf("Validate = %v, want code %q", err, crewlet.EINVALID)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Validate = %q shows a credential", err)
			}
		})
	}
}

func TestStreamableHTTP(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1"}, nil)
	type echoArgs struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "echo",
		Description: "Echoes text and the idempotency key.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
		key, _ := req.Params.GetMeta()[IdempotencyKeyMeta].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: in.Text},
			&mcp.TextContent{Text: "key=" + key},
		}}, nil, nil
	})
	// Valid in MCP, but no model provider accepts a dot in a function name.
	mcp.AddTool(srv, &mcp.Tool{Name: "bad.name"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return nil, nil, nil
	})
	// The server answers only requests that carry the configured token.
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	defer hs.Close()

	if _, err := Start(context.Background(), []ServerConfig{{Name: "web", URL: hs.URL}}, nil); err == nil {
		t.Fatal("Start without the token succeeded; want the server's refusal")
	}
	s, err := Start(context.Background(), []ServerConfig{{Name: "web", URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer tok-1"}}}, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	tools := s.Tools()
	if len(tools) != 1 || tools[0].Spec.Name != "web__echo" || !tools[0].Spec.ReadOnly {
		t.Fatalf("Tools = %+v, want only web__echo, read-only", tools)
	}
	res := call(t, s, "web__echo", `{"text":"hi"}`, "wk:0:1")
	if want := "hi\nkey=wk:0:1"; res.Text != want || res.IsError {
		t.Errorf("echo = %+v, want Text %q", res, want)
	}
	if pids := s.PIDs(); len(pids) != 0 {
		t.Errorf("PIDs = %v for an HTTP server", pids)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := s.Call(context.Background(), "web__echo", nil, ""); err == nil {
		t.Error("Call after Close succeeded")
	}
}

func TestTextOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  *mcp.CallToolResult
		want string
	}{
		{"texts joined", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}}, "a\nb"},
		{"image noted", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "see"}, &mcp.ImageContent{MIMEType: "image/png"}}}, "see\n[image/png image omitted]"},
		{"structured only", &mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: map[string]int{"n": 1}}, `{"n":1}`},
		{"empty", &mcp.CallToolResult{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := textOf(tt.res); got != tt.want {
				t.Errorf("textOf = %q, want %q", got, tt.want)
			}
		})
	}
}

// recorder is an HTTP server that notes the Authorization header of every
// request it gets.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newRecorder(t *testing.T, h http.Handler) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auths = append(r.auths, req.Header.Get("Authorization"))
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.auths)
}

// An MCP server that redirects elsewhere must not get a seat's secret
// headers delivered to the other host.
func TestHeadersNeverFollowARedirectToAnotherHost(t *testing.T) {
	t.Parallel()
	const token = "Bearer tok-secret"
	other := newRecorder(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		return mcp.NewServer(&mcp.Implementation{Name: "other", Version: "1"}, nil)
	}, nil))
	redirector := newRecorder(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	logs := &testenv.Log{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := Start(context.Background(), []ServerConfig{{Name: "web", URL: redirector.URL + "/mcp", Headers: map[string]string{"Authorization": token}}}, log)
	if err == nil {
		s.Close()
		t.Error("Start through a redirect to another host succeeded; want it refused")
		err = errors.New("")
	}
	if got := redirector.seen(); len(got) == 0 || got[0] != token {
		t.Errorf("configured server saw Authorization %q, want %q first", got, token)
	}
	for _, a := range other.seen() {
		if a != "" {
			t.Errorf("the host redirected to saw Authorization %q", a)
		}
	}
	for _, text := range []string{err.Error(), logs.String()} {
		if strings.Contains(text, "tok-secret") {
			t.Errorf("the token leaked into %q", text)
		}
	}
}

// The transport itself sends the headers only to the configured origin,
// whatever redirect policy the client around it has.
func TestHeaderTransportSendsOnlyToTheConfiguredOrigin(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	other := newRecorder(t, ok)
	home := newRecorder(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, other.URL+"/x", http.StatusTemporaryRedirect)
			return
		}
		if r.URL.Path == "/here" {
			http.Redirect(w, r, "/mcp/", http.StatusTemporaryRedirect)
		}
	}))
	// A client with the default redirect policy, which follows both.
	client := &http.Client{Transport: headerClient(home.URL+"/mcp", map[string]string{"Authorization": "t"}).Transport}
	for _, path := range []string{"/here", "/away"} {
		resp, err := client.Post(home.URL+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
	}
	if got, want := home.seen(), []string{"t", "t", "t"}; !slices.Equal(got, want) {
		t.Errorf("configured origin saw Authorization %q, want %q (a same-host redirect keeps it)", got, want)
	}
	if got, want := other.seen(), []string{""}; !slices.Equal(got, want) {
		t.Errorf("other origin saw Authorization %q, want %q", got, want)
	}
}

func TestOriginOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		same bool
	}{
		{"http://h/mcp", "http://h:80/other", true},
		{"https://H/mcp", "https://h:443/", true},
		{"http://h/mcp", "https://h/mcp", false},
		{"http://h:8080/mcp", "http://h:8081/mcp", false},
		{"http://h/mcp", "http://h.evil/mcp", false},
	}
	for _, tt := range tests {
		if got := originOf(tt.a) == originOf(tt.b); got != tt.same {
			t.Errorf("same origin(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"https://user:pw@h:8443/mcp?token=x#f", "https://h:8443/mcp"},
		{"http://127.0.0.1:9000/mcp", "http://127.0.0.1:9000/mcp"},
		{"https://u:pw@h/%zz", "(unparsable url)"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
