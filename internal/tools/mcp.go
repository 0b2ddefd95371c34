// Package tools connects a seat tenure to its MCP servers
// (docs/architecture.md, "Tenure: which node runs a seat") through the official
// MCP Go SDK.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/sandbox"
	"github.com/crewlet/crewlet/internal/testhook"
)

// IdempotencyKeyMeta is the request _meta key that carries a tool call's
// idempotency key ({work_key}:{round}:{call}), so servers that can dedupe do.
const IdempotencyKeyMeta = "crewlet/idempotency_key"

// NameSeparator joins a server name and a tool name into the name a model
// sees: "{server}__{tool}". Server names may not contain it, nor end in "_",
// so the first "__" of a name always ends the server part.
const NameSeparator = "__"

// Timing of a stdio child's stop. The SDK closes stdin, waits stopGrace,
// sends SIGTERM, waits stopGrace, sends SIGKILL and waits stopGrace again;
// after that the child's process group is killed and watched for
// sweepWait. Variables so tests can shorten them, and stand in for a child
// that survives its kill.
var (
	stopGrace = 3 * time.Second
	sweepWait = 2 * time.Second
	killGroup = killGroupNow
)

// envPassthrough are the variables of this process a stdio child inherits.
// Everything else (database URLs, provider keys) stays here: a child gets
// only these plus its ServerConfig.Env.
var envPassthrough = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

var (
	serverNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	// toolNameRE is what model providers accept as a function name.
	toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// ServerConfig is one MCP server of a role: a stdio child (Command, with Env
// entries "KEY=VALUE" added to its environment) or a streamable-HTTP server
// (URL).
type ServerConfig struct {
	Name    string
	Command []string
	Env     []string
	// RunAs is the user (name or uid) a stdio child runs as; empty runs it
	// as crewlet's own user. Another user needs crewlet to run as root
	// (or with CAP_SETUID, CAP_SETGID and CAP_KILL: stopping a child of
	// another user needs the last).
	RunAs string
	// Sandbox confines a stdio child (internal/sandbox); nil runs it
	// unconfined, which only a role's explicit sandbox.mode: none asks.
	Sandbox *sandbox.Policy
	URL     string
	// Headers are sent with every request to an HTTP server (an
	// Authorization token, say); values may be secrets and are never logged.
	Headers map[string]string
}

// Validate reports every problem with a list of server configs at once.
func Validate(servers []ServerConfig) error {
	var errs []error
	seen := map[string]bool{}
	for i, sc := range servers {
		where := fmt.Sprintf("mcp[%d]", i)
		switch {
		case !serverNameRE.MatchString(sc.Name):
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s: name %q: want 1-32 of [a-z0-9_-]", where, sc.Name))
		case strings.Contains(sc.Name, NameSeparator) || strings.HasSuffix(sc.Name, "_"):
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s: name %q: may not contain %q or end in \"_\"", where, sc.Name, NameSeparator))
		case seen[sc.Name]:
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s: name %q is used twice", where, sc.Name))
		}
		seen[sc.Name] = true
		if (len(sc.Command) == 0) == (sc.URL == "") {
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): set exactly one of command and url", where, sc.Name))
		}
		if sc.URL != "" {
			// Never echoed: it may hold a password or token.
			if u, err := url.Parse(sc.URL); err != nil {
				errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): url is not a valid URL", where, sc.Name))
			} else if u.User != nil {
				errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): url must not hold credentials; send them as headers", where, sc.Name))
			}
		}
		if sc.URL != "" && len(sc.Env) > 0 {
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): env applies only to a command", where, sc.Name))
		}
		if sc.URL != "" && sc.RunAs != "" {
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): run_as applies only to a command", where, sc.Name))
		}
		if sc.URL != "" && sc.Sandbox != nil {
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): a sandbox applies only to a command", where, sc.Name))
		}
		if sc.URL == "" && len(sc.Headers) > 0 {
			errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): headers apply only to a url", where, sc.Name))
		}
		for _, kv := range sc.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				// Name only the key part: the value may be a secret.
				errs = append(errs, crewlet.Errorf(crewlet.EINVALID, "%s (%s): env entry %q: want KEY=VALUE", where, sc.Name, k))
			}
		}
	}
	return errors.Join(errs...)
}

var errStopping = errors.New("the session's MCP servers are stopping")

// Tool is one tool a session offers.
type Tool struct {
	// Spec is what a model is offered; Spec.Name is "{server}__{tool}".
	// Spec.ReadOnly is the server's readOnlyHint (false without
	// annotations): read-only calls may be retried, others are attempted
	// once.
	Spec crewlet.ToolSpec
	// Server and Name are the server's name and the tool's own name there.
	Server string
	Name   string
}

// Result is the outcome of a tool call the server answered.
type Result struct {
	// Text is the text content, items joined by newlines.
	Text string
	// IsError marks a failure the tool reported; the model should see it.
	IsError bool
}

// Refused is the error result of a call refused before it reached anything
// (an unknown tool, bad arguments): the model sees why.
func Refused(text string) Result { return Result{Text: text, IsError: true} }

// Session holds the MCP servers of one seat tenure on this node.
type Session struct {
	log     *slog.Logger
	servers []*server
	tools   []Tool
	byName  map[string]*Tool

	// stopping ends the calls in flight when Close starts: the SDK's
	// Close waits for them before it even closes a child's stdin.
	stopping context.Context
	stop     context.CancelFunc

	mu     sync.RWMutex
	closed bool
	// closeMu serialises Close so a retry does not race a running one.
	closeMu sync.Mutex
}

type server struct {
	cfg ServerConfig
	cs  *mcp.ClientSession
	// cmd is the stdio child; nil for HTTP. Only its Process.Pid is read
	// here, because the SDK owns Wait.
	cmd *exec.Cmd
	// sdkClosed is set once the SDK's Close ran (or was given up on);
	// proven once the child's process group has no live process left.
	sdkClosed bool
	proven    bool
}

// Start connects to every server, initializes it and lists its tools. ctx
// bounds the start, not the servers' life; Close stops them. On a failure
// Start stops what it started and returns a nil Session, unless a child
// would not stop: then the returned Session is already closed and only
// good for retrying Close.
func Start(ctx context.Context, servers []ServerConfig, log *slog.Logger) (*Session, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := Validate(servers); err != nil {
		return nil, err
	}
	warnRootChildren(servers, log)
	s := &Session{log: log, servers: make([]*server, len(servers)), byName: map[string]*Tool{}}
	s.stopping, s.stop = context.WithCancel(context.Background())
	toolLists := make([][]*mcp.Tool, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, sc := range servers {
		wg.Go(func() {
			s.servers[i], toolLists[i], errs[i] = s.connect(ctx, sc)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.servers = slices.DeleteFunc(s.servers, func(sv *server) bool { return sv == nil })
		if cerr := s.Close(); cerr != nil {
			// A child would not stop: hand the session back so that the
			// caller can retry Close, as after any unproven teardown.
			return s, errors.Join(err, cerr)
		}
		return nil, err
	}
	seen := map[string]bool{}
	for i, sv := range s.servers {
		for _, t := range toolLists[i] {
			tool, err := toolOf(sv.cfg.Name, t)
			if err != nil {
				// One odd tool should not keep the seat from the others.
				log.Warn("mcp_tool_skipped", "server", sv.cfg.Name, "tool", t.Name, "reason", err.Error())
				continue
			}
			if seen[tool.Spec.Name] {
				log.Warn("mcp_tool_skipped", "server", sv.cfg.Name, "tool", t.Name, "reason", "listed twice")
				continue
			}
			seen[tool.Spec.Name] = true
			s.tools = append(s.tools, tool)
		}
	}
	slices.SortFunc(s.tools, func(a, b Tool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	for i := range s.tools {
		s.byName[s.tools[i].Spec.Name] = &s.tools[i]
	}
	return s, nil
}

func (s *Session) connect(ctx context.Context, sc ServerConfig) (*server, []*mcp.Tool, error) {
	sv := &server{cfg: sc}
	client := mcp.NewClient(&mcp.Implementation{Name: "crewlet", Version: "1"}, &mcp.ClientOptions{Logger: s.log})
	var transport mcp.Transport
	var stderr *os.File
	if sc.URL != "" {
		// Nothing here consumes server-initiated notifications, so the
		// standalone SSE stream would only hold a connection open.
		transport = &mcp.StreamableClientTransport{Endpoint: sc.URL, DisableStandaloneSSE: true, HTTPClient: headerClient(sc.URL, sc.Headers)}
	} else {
		// Not CommandContext: the child outlives the start's ctx.
		cmd := exec.Command(sc.Command[0], sc.Command[1:]...)
		setProcGroup(cmd)
		var who *account
		if sc.RunAs != "" {
			a, err := lookupAccount(sc.RunAs)
			if err != nil {
				return nil, nil, fmt.Errorf("mcp server %s: %w", sc.Name, err)
			}
			setAccount(cmd, a)
			who = &a
		}
		cmd.Env = childEnv(sc.Env, who)
		if sc.Sandbox != nil {
			if err := confine(cmd, *sc.Sandbox, who); err != nil {
				return nil, nil, crewlet.Errorf(crewlet.EINVALID, "mcp server %s: sandbox: %v", sc.Name, err)
			}
		}
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("mcp server %s: stderr pipe: %w", sc.Name, err)
		}
		// An *os.File, so exec starts no copying goroutine that Wait would
		// block on while a grandchild holds the pipe.
		cmd.Stderr = w
		stderr = w
		go s.logStderr(sc.Name, r)
		sv.cmd = cmd
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: stopGrace}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if stderr != nil {
		stderr.Close() // the child holds its own copy
	}
	if err != nil {
		if sc.RunAs != "" && errors.Is(err, syscall.EPERM) {
			err = crewlet.Errorf(crewlet.EINVALID, "mcp server %s: run_as %q: crewlet (uid %d) may not start a process as another user; run crewlet as root (or with CAP_SETUID, CAP_SETGID and CAP_KILL), or remove run_as", sc.Name, sc.RunAs, os.Geteuid())
		} else {
			err = fmt.Errorf("mcp server %s: connect: %w", sc.Name, err)
		}
		if sv.started() {
			// The SDK has closed what it connected; Close still sweeps the
			// child's process group.
			sv.sdkClosed = true
			return sv, nil, err
		}
		return nil, nil, err
	}
	sv.cs = cs
	if sv.cmd != nil {
		s.log.Info("mcp_server_started", "server", sc.Name, "pid", sv.cmd.Process.Pid)
	} else {
		s.log.Info("mcp_server_connected", "server", sc.Name, "url", redactURL(sc.URL))
	}
	var tools []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return sv, nil, fmt.Errorf("mcp server %s: list tools: %w", sc.Name, err)
		}
		tools = append(tools, t)
	}
	return sv, tools, nil
}

// headerClient is an HTTP client that adds headers to every request to the
// server at endpoint; the SDK's default client when there are none. The
// headers are secrets meant for that server alone, so they go only to its
// origin (scheme, host and port), and a redirect to another origin is not
// followed: a compromised or misconfigured server cannot collect them by
// redirecting elsewhere.
func headerClient(endpoint string, headers map[string]string) *http.Client {
	if len(headers) == 0 {
		return nil
	}
	origin := originOf(endpoint)
	return &http.Client{
		Transport: headerTransport{base: http.DefaultTransport, origin: origin, headers: headers},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if o := originOf(req.URL.String()); o != origin {
				// Only the host is named: the location may hold credentials.
				return fmt.Errorf("refused a redirect to another host (%s)", req.URL.Host)
			}
			return nil
		},
	}
}

type headerTransport struct {
	base http.RoundTripper
	// origin is the configured server's; requests elsewhere go without
	// headers.
	origin  string
	headers map[string]string
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if originOf(req.URL.String()) != t.origin {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}

// originOf is a URL's scheme, host and port, lowercased, with the scheme's
// default port made explicit; "" when it does not parse.
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// redactURL is a URL fit for a log line: without userinfo, query or
// fragment, any of which may hold a secret.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

func (s *Session) logStderr(server string, r *os.File) {
	defer r.Close()
	buf := make([]byte, 4096)
	var line []byte
	flush := func() {
		if len(line) > 0 {
			// Debug: a child may print anything, secrets included.
			s.log.Debug("mcp_stderr", "server", server, "line", string(line))
			line = line[:0]
		}
	}
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b == '\n' || len(line) >= 1024 {
				flush()
				if b == '\n' {
					continue
				}
			}
			line = append(line, b)
		}
		if err != nil {
			flush()
			return
		}
	}
}

// childEnv is a stdio child's environment: envPassthrough from this process,
// then extra. A child running as another user (who) gets that user's HOME,
// USER and LOGNAME instead of crewlet's.
func childEnv(extra []string, who *account) []string {
	var env []string
	for _, k := range envPassthrough {
		v, ok := os.LookupEnv(k)
		if who != nil {
			switch k {
			case "HOME":
				v, ok = who.home, who.home != ""
			case "USER", "LOGNAME":
				v, ok = who.name, true
			}
		}
		if ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// confine makes cmd start in p's sandbox, its workspace made for the user
// it runs as (who; nil: crewlet's own).
func confine(cmd *exec.Cmd, p sandbox.Policy, who *account) error {
	if err := sandbox.Check(p); err != nil {
		return err
	}
	uid, gid := -1, -1
	if who != nil {
		uid, gid = who.ids()
	}
	if err := p.Prepare(uid, gid); err != nil {
		return err
	}
	cmd.Env = p.Env(cmd.Env)
	return p.Wrap(cmd)
}

// warnRootChildren logs, for each unconfined stdio server that would run as
// root like crewlet, that it can read crewlet's secrets: root bypasses the
// non-dumpable guard (ProtectProcess), so only the sandbox (which drops
// every capability) or run_as keeps them apart.
func warnRootChildren(servers []ServerConfig, log *slog.Logger) {
	if os.Geteuid() != 0 {
		return
	}
	for _, sc := range servers {
		if len(sc.Command) > 0 && sc.RunAs == "" && sc.Sandbox == nil {
			log.Warn("mcp_child_runs_as_root", "server", sc.Name,
				"risk", "it can read crewlet's environment and memory (API tokens, provider keys, the database URL)",
				"fix", "set run_as on the server (roles.ROLE.mcp[].run_as) to an unprivileged user")
		}
	}
}

func toolOf(server string, t *mcp.Tool) (Tool, error) {
	name := server + NameSeparator + t.Name
	if !toolNameRE.MatchString(name) {
		return Tool{}, fmt.Errorf("name %q is not 1-64 of [A-Za-z0-9_-]", name)
	}
	schema := []byte(`{"type":"object"}`)
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return Tool{}, fmt.Errorf("input schema: %w", err)
		}
		schema = b
	}
	return Tool{
		Spec: crewlet.ToolSpec{
			Name: name, Description: t.Description, Schema: schema,
			ReadOnly: t.Annotations != nil && t.Annotations.ReadOnlyHint,
		},
		Server: server,
		Name:   t.Name,
	}, nil
}

// Tools returns the session's tools sorted by Spec.Name.
func (s *Session) Tools() []Tool {
	return slices.Clone(s.tools)
}

// Lookup returns the tool a namespaced name refers to.
func (s *Session) Lookup(name string) (Tool, bool) {
	t, ok := s.byName[name]
	if !ok {
		return Tool{}, false
	}
	return *t, true
}

// Call calls the tool a namespaced name refers to, with args (a JSON object;
// empty means {}) and idempotencyKey in the request's _meta. A tool's own
// failure is a Result with IsError; an error means the call was refused
// here, or the server or the connection failed, in which case whether a
// write happened is unknown.
func (s *Session) Call(ctx context.Context, name string, args json.RawMessage, idempotencyKey string) (Result, error) {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return Result{}, crewlet.Errorf(crewlet.EUNAVAILABLE, "tool %q: the session's MCP servers are stopped", name)
	}
	t, ok := s.byName[name]
	if !ok {
		return Result{}, crewlet.Errorf(crewlet.ENOTFOUND, "no tool named %q", name)
	}
	var arguments any
	if len(args) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
			return Result{}, crewlet.Errorf(crewlet.EINVALID, "tool %q: arguments are not a JSON object", name)
		}
		arguments = args
	}
	params := &mcp.CallToolParams{Name: t.Name, Arguments: arguments}
	if idempotencyKey != "" {
		params.Meta = mcp.Meta{IdempotencyKeyMeta: idempotencyKey}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.stopping, func() { cancel(errStopping) })()
	res, err := s.serverOf(t.Server).cs.CallTool(ctx, params)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = errors.Join(err, cause)
		}
		return Result{}, fmt.Errorf("call %s: %w", name, err)
	}
	return Result{Text: textOf(res), IsError: res.IsError}, nil
}

func (s *Session) serverOf(name string) *server {
	for _, sv := range s.servers {
		if sv.cfg.Name == name {
			return sv
		}
	}
	panic("tools: no server " + name)
}

func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else {
				parts = append(parts, "[binary resource omitted]")
			}
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[%s image omitted]", c.MIMEType))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[%s audio omitted]", c.MIMEType))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s]", c.URI))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

// PIDs returns the process ids of the session's stdio children, stopped ones
// included.
func (s *Session) PIDs() []int {
	var pids []int
	for _, sv := range s.servers {
		if sv.started() {
			pids = append(pids, sv.cmd.Process.Pid)
		}
	}
	return pids
}

// Close stops every server. For a stdio child it returns only once the child
// and its process group are gone; an error names each child that would not
// stop, an unproven teardown
// (docs/architecture.md, "Tenure: which node runs a seat"), and calling Close
// again retries just those. A failure to end an HTTP session is logged, not
// returned: nothing of it runs here.
func (s *Session) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	errs := make([]error, len(s.servers))
	var wg sync.WaitGroup
	for i, sv := range s.servers {
		wg.Go(func() { errs[i] = sv.stop(s.log) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (sv *server) started() bool {
	return sv.cmd != nil && sv.cmd.Process != nil
}

func (sv *server) stop(log *slog.Logger) error {
	if !sv.sdkClosed {
		sv.sdkClosed = true
		if sv.cs != nil {
			done := make(chan error, 1)
			go func() { done <- sv.cs.Close() }()
			// The SDK's own steps take at most 3*stopGrace; past that it is
			// stuck and the sweep below takes over.
			select {
			case err := <-done:
				if err != nil && sv.cmd == nil {
					log.Warn("mcp_session_close_failed", "server", sv.cfg.Name, "err", err.Error())
				}
			case <-time.After(3*stopGrace + time.Second):
				log.Warn("mcp_session_close_stuck", "server", sv.cfg.Name)
			}
		}
	}
	if !sv.started() || sv.proven {
		return nil
	}
	pid := sv.cmd.Process.Pid
	// Grandchildren (npx → node, sh → tool) share the group and go too.
	killGroup(pid)
	deadline := time.Now().Add(sweepWait)
	for groupAlive(pid) {
		if time.Now().After(deadline) {
			log.Error("mcp_server_stop_unproven", "server", sv.cfg.Name, "pid", pid)
			return fmt.Errorf("mcp server %s (pid %d): would not stop", sv.cfg.Name, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if testhook.Current().UnstoppableMCP == sv.cfg.Name {
		log.Error("mcp_server_stop_unproven", "server", sv.cfg.Name, "pid", pid, "hook", "unstoppable_mcp")
		return fmt.Errorf("mcp server %s (pid %d): would not stop (test hook unstoppable_mcp)", sv.cfg.Name, pid)
	}
	sv.proven = true
	log.Info("mcp_server_stopped", "server", sv.cfg.Name, "pid", pid)
	return nil
}
