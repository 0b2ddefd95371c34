package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/crewlet/crewlet/internal/testenv"
)

// browserTimeout bounds each browser action: a page of the console that is
// not there by then is not coming.
const browserTimeout = 30 * time.Second

// browser is one test's headless Chromium, one tab, on a base URL. Every
// action fails the test on a JavaScript error or a CSP violation the page
// reported since the last action: that is how the console tests prove the
// pages run no inline script and throw nothing.
type browser struct {
	t    testing.TB
	base string
	ctx  context.Context
	out  *testenv.Log

	mu         sync.Mutex
	pageErrors []string
}

// browser starts a headless Chromium whose paths are on the company's API.
// With no token set by the test (the org names none), it signs in through
// the sign-in link of the API's local token, as `crewlet console` prints
// it; a test that set c.token signs in itself (signIn).
func (c *company) browser() *browser {
	c.t.Helper()
	b := newBrowser(c.t, c.api)
	if c.token == "" {
		if token := c.bearer(); token != "" {
			b.signInByLink(token)
		}
	}
	return b
}

// chromiumPath is the browser the tests drive: $CREWLET_CHROMIUM, else
// Debian's chromium (or chromium-browser, its name elsewhere) on the PATH.
func chromiumPath() (string, error) {
	if p := os.Getenv("CREWLET_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("CREWLET_CHROMIUM=%s: %w; point it at a Chromium binary or unset it", p, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium or chromium-browser on the PATH: the console tests drive a real browser; " +
		"install it with `apt-get install -y chromium` (.ci/run does), or set CREWLET_CHROMIUM to a Chromium binary")
}

// newBrowser starts a headless Chromium with a profile of its own, opens a
// tab, and stops the browser when the test ends. Paths given to open are
// relative to base.
func newBrowser(t testing.TB, base string) *browser {
	t.Helper()
	path, err := chromiumPath()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, base: strings.TrimSuffix(base, "/"), out: &testenv.Log{}}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(b.out),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to start as root with its sandbox on (CI
		// containers run as root).
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b.ctx = ctx
	// Registered before the start so that a failed start still stops the
	// process; t.TempDir's removal of the profile runs after this.
	t.Cleanup(func() {
		if !t.Failed() {
			// A round trip to the page delivers every event it sent before.
			b.location()
			if errs := b.takeErrors(); len(errs) > 0 {
				t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
			}
		}
		if t.Failed() {
			b.screenshotNow("failed")
		}
		cancelTab()
		cancelAlloc()
	})
	// The first action starts the browser; it has no timeout of its own,
	// since a cancelled first context stops the whole browser.
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("start chromium %s: %v\n%s", path, err, b.out.String())
	}
	return b
}

// record keeps what the page reports as an error. It runs on the tab's
// reading goroutine, before the reply to any later command, so an action
// sees every error its page raised before it returned. Network failures (a
// 403 the test provokes, a refused connection while the API restarts) are
// left to the page's own handling, which the test checks in the DOM.
func (b *browser) record(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg = "exception: " + d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		msg += fmt.Sprintf(" (%s:%d)", d.URL, d.LineNumber+1)
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError && e.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var args []string
		for _, a := range e.Args {
			var str string
			switch {
			case a.Description != "":
				args = append(args, a.Description)
			case json.Unmarshal(a.Value, &str) == nil:
				args = append(args, str)
			default:
				args = append(args, string(a.Value))
			}
		}
		msg = fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " "))
	case *log.EventEntryAdded:
		if e.Entry.Level != log.EntryLevelError || e.Entry.Source == log.EntrySourceNetwork {
			return
		}
		msg = fmt.Sprintf("%s error: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL)
	default:
		return
	}
	b.mu.Lock()
	b.pageErrors = append(b.pageErrors, msg)
	b.mu.Unlock()
}

// takeErrors returns the errors the page reported since the last call, and
// forgets them: a test that provokes an error on purpose takes it here, and
// checks it, before its next action.
func (b *browser) takeErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := b.pageErrors
	b.pageErrors = nil
	return errs
}

// inPage runs one action within browserTimeout, and fails the test if it
// fails or if the page reported an error.
func inPage[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	// The console re-renders parts of a page as live events come: an
	// element found, then replaced before the action reached it, is found
	// again, as a person would click the button now on the screen.
	for range 4 {
		if err == nil || !strings.Contains(err.Error(), "Could not find node with given id") {
			break
		}
		v, err = chromedp.Run(ctx, a)
	}
	if errs := b.takeErrors(); len(errs) > 0 {
		b.t.Fatalf("%s: the page reported errors:\n%s", what, strings.Join(errs, "\n"))
	}
	if err != nil {
		b.t.Fatalf("%s (page %s): %v", what, b.location(), err)
	}
	return v
}

// run is inPage for an action with no value.
func (b *browser) run(what string, a chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	inPage(b, what, a)
}

// location is the tab's URL, for failure messages; it never fails the test.
func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	u, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "unknown: " + err.Error()
	}
	return u
}

// open loads base+path (e.g. "/ui/#/seats/cto") and waits for its load
// event. To move between hash routes of a page already open, use
// eval(`location.hash = "#/..."`): a same-document navigation has no load
// event to wait for.
func (b *browser) open(path string) {
	b.t.Helper()
	b.run("open "+path, chromedp.Navigate(b.base+path))
}

// waitVisible waits until an element matching the CSS selector is visible.
func (b *browser) waitVisible(sel string) {
	b.t.Helper()
	b.run("wait for "+sel+" visible", chromedp.WaitVisible(chromedp.CSS(sel)))
}

// waitText waits until the first element matching the CSS selector shows
// text containing want. It watches the DOM for changes, so it returns as
// soon as the page renders the text.
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	inPage(b, fmt.Sprintf("wait for %q in %s", want, sel), chromedp.PollFunction[bool](
		`(sel, want) => { const e = document.querySelector(sel); return !!e && e.innerText.includes(want); }`,
		chromedp.WithPollingMutation(),
		chromedp.WithPollingTimeout(browserTimeout),
		chromedp.WithPollingArgs(sel, want),
	))
}

// text is the visible text of the first element matching the CSS selector.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return inPage(b, "read the text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// click clicks the first visible element matching the CSS selector.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.run("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// typeText types text into the first visible element matching the CSS
// selector, key by key, as a person would.
func (b *browser) typeText(sel, text string) {
	b.t.Helper()
	b.run("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text, chromedp.NodeVisible))
}

// eval evaluates a JavaScript expression in the page, awaits it if it is a
// promise, and returns its value decoded into T. It runs with the page's
// origin, so a fetch from it is a request from the page's context.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	return inPage(b, "evaluate "+expr, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// signIn opens the console at /ui/ and signs in with token through its
// form, as a person would; it returns once the console shows its pages.
func (b *browser) signIn(token string) {
	b.t.Helper()
	b.open("/ui/")
	b.typeText("form.signin #token", token)
	b.click(`form.signin button[type="submit"]`)
	b.waitVisible("#nav a")
}

// signInByLink opens the console's sign-in link for token (the token in
// the URL fragment) and waits until the console shows its pages, the
// token gone from the address bar.
func (b *browser) signInByLink(token string) {
	b.t.Helper()
	b.open("/ui/#token=" + url.QueryEscape(token))
	b.waitVisible("#nav a")
	if loc := b.location(); strings.Contains(loc, token) {
		b.t.Fatalf("after signing in by link the address is %s; want the token gone", loc)
	}
}

// artifactsDir is where screenshots go: $CREWLET_E2E_ARTIFACTS, else
// internal/e2e/artifacts (go test runs in the package's directory).
func artifactsDir() (string, error) {
	dir := os.Getenv("CREWLET_E2E_ARTIFACTS")
	if dir == "" {
		dir = "artifacts"
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// screenshot writes a full-page PNG of the tab to the artifacts directory as
// <TestName>-<name>.png, logs its path and returns it.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	png := inPage(b, "screenshot "+name, chromedp.FullScreenshot(100))
	path, err := b.writeScreenshot(name, png)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s: %s", name, path)
	return path
}

// screenshotNow is screenshot for a test that has already failed: it logs
// what went wrong instead of failing again.
func (b *browser) screenshotNow(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		var path string
		if path, err = b.writeScreenshot(name, png); err == nil {
			b.t.Logf("screenshot %s: %s", name, path)
			return
		}
	}
	b.t.Logf("screenshot %s: %v", name, err)
}

func (b *browser) writeScreenshot(name string, png []byte) (string, error) {
	dir, err := artifactsDir()
	if err != nil {
		return "", fmt.Errorf("screenshot %s: artifacts directory: %w", name, err)
	}
	file := strings.NewReplacer("/", "_", " ", "_").Replace(b.t.Name() + "-" + name + ".png")
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "", fmt.Errorf("screenshot %s: %w", name, err)
	}
	return path, nil
}

// The harness drives a real Chromium through the console the API serves:
// it signs in with a token, sees the company page list the seats, and keeps
// a full-page screenshot; the console's own files break no CSP and throw
// nothing on the way.
func TestBrowserHarnessLoadsTheConsole(t *testing.T) {
	org := `company: { name: browserco }
auth:
  tokens:
    - { name: vic, role: viewer, token_env: CREWLET_E2E_TOKEN_VIEWER }
profiles: { local: { provider: scripted } }
roles: { lead: { charter: answers, profile: local } }
seats:
  - { handle: cto, role: lead }
  - { handle: alice, kind: human }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	viewer := "e2e-viewer-token-0123456789"
	c.setenv("CREWLET_E2E_TOKEN_VIEWER=" + viewer)
	c.token = viewer
	c.apiServer()
	b := c.browser()

	b.signIn(viewer)
	b.waitVisible(`main[data-ready="company"]`)
	b.waitText("#seats", "cto")
	if who := b.text("#who"); !strings.Contains(who, "vic (viewer)") {
		t.Fatalf("signed in as the viewer, the header says %q; want vic (viewer)", who)
	}
	if n := eval[int](b, `document.querySelectorAll("#seats .seat").length`); n != 2 {
		t.Fatalf("company page lists %d seats; want 2 (cto, alice)", n)
	}
	path := b.screenshot("company")
	png, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") {
		t.Fatalf("screenshot %s: %d bytes, %v; want a PNG", path, len(png), err)
	}
}

// A page that follows its CSP takes typing and clicks without an error; one
// that runs an inline script under that CSP, throws, or writes console.error
// is an error the harness reports, each of the three.
func TestBrowserHarnessReportsPageErrors(t *testing.T) {
	mux := http.NewServeMux()
	page := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Security-Policy", "default-src 'self'")
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, "<!doctype html><title>t</title><p id=done>done</p>%s", body)
		}
	}
	script := func(js string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/javascript")
			fmt.Fprint(w, js)
		}
	}
	mux.HandleFunc("/clean", page(`<input id=name><button id=go>go</button><script type=module src=/clean.js></script>`))
	mux.HandleFunc("/clean.js", script(`document.getElementById("go").addEventListener("click", () => {
  document.getElementById("done").textContent = "hello " + document.getElementById("name").value;
});`))
	mux.HandleFunc("/inline", page(`<script>document.title = "ran"</script>`))
	mux.HandleFunc("/throws", page(`<script type=module src=/throws.js></script>`))
	mux.HandleFunc("/throws.js", script(`throw new Error("boom from the page");`))
	mux.HandleFunc("/console", page(`<script type=module src=/console.js></script>`))
	mux.HandleFunc("/console.js", script(`console.error("bad state", 42);`))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	b := newBrowser(t, srv.URL)
	b.open("/clean")
	b.waitVisible("#go")
	b.typeText("#name", "ada")
	b.click("#go")
	b.waitText("#done", "hello ada")
	for _, tc := range []struct{ path, want string }{
		{"/inline", "Content Security Policy"},
		{"/throws", "boom from the page"},
		{"/console", "console.error: bad state 42"},
	} {
		// Navigate outside b.open, which would fail the test on the error
		// this case wants to see.
		ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
		err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+tc.path))
		cancel()
		if err != nil {
			t.Fatalf("open %s: %v", tc.path, err)
		}
		var got []string
		testenv.Eventually(t, 10*time.Second, "an error reported by "+tc.path, func() error {
			got = append(got, b.takeErrors()...)
			for _, e := range got {
				if strings.Contains(e, tc.want) {
					return nil
				}
			}
			return fmt.Errorf("errors so far: %q; want one containing %q", got, tc.want)
		})
		t.Logf("%s: %q", tc.path, got)
	}
}
