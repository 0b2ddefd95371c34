package api_test

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/ui"
)

// The console is served at /ui/ by the API, with a policy that runs only
// its own files, and none of its directories is listed.
func TestConsoleIsServedWithAStrictPolicy(t *testing.T) {
	base, _ := authServer(t)
	for _, c := range []struct {
		path, contentType string
		status            int
	}{
		{"/ui/", "text/html", http.StatusOK},
		{"/ui/app.js", "javascript", http.StatusOK},
		{"/ui/style.css", "text/css", http.StatusOK},
		{"/ui/lib/", "", http.StatusNotFound},
		{"/ui/no-such-file.js", "", http.StatusNotFound},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(resp.Header.Get("Content-Type"), c.contentType) {
			t.Errorf("GET %s: %d %s; want %d %s", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.status, c.contentType)
		}
		if c.status == http.StatusOK {
			if got := resp.Header.Get("Content-Security-Policy"); got != ui.ContentSecurityPolicy {
				t.Errorf("GET %s: Content-Security-Policy %q; want %q", c.path, got, ui.ContentSecurityPolicy)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("GET %s: no X-Content-Type-Options: nosniff", c.path)
			}
		}
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(base + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q; want 301 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// The console's files put untrusted text in the page only as text: no
// markup sinks in any script, no inline script, style or handler in any
// page. The CSP would stop an inline script; this keeps one from being
// written.
func TestConsoleFilesUseNoMarkupSinks(t *testing.T) {
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(|setAttribute\(\s*['"]on`)
	script := regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`)
	inline := regexp.MustCompile(`(?i)\son[a-z]+\s*=|\sstyle\s*=|<style`)
	n := 0
	err := filepath.WalkDir("../ui/assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		switch filepath.Ext(path) {
		case ".js":
			if m := sinks.Find(data); m != nil {
				t.Errorf("%s uses %q: put text in the page with lib/dom.js's h() or show(), never as markup", path, m)
			}
		case ".html":
			if m := inline.Find(data); m != nil {
				t.Errorf("%s has %q: no inline style or handler (the CSP refuses them)", path, m)
			}
			for _, m := range script.FindAllSubmatch(data, -1) {
				if !strings.Contains(string(m[1]), "src=") || strings.TrimSpace(string(m[2])) != "" {
					t.Errorf("%s has an inline script %q: load scripts from files (the CSP refuses inline ones)", path, m[0])
				}
			}
		}
		return nil
	})
	if err != nil || n < 4 {
		t.Fatalf("read %d console files (%v)", n, err)
	}
}

// GET /me says who the token is and what the console may offer it.
func TestMeSaysWhatTheTokenMay(t *testing.T) {
	base, _ := authServer(t)
	for _, c := range []struct {
		token                    string
		name, right, seat        string
		fleet, steer, administer bool
	}{
		{"viewer", "vic", "read", "", true, false, false},
		{"operator", "otto", "operate", "", true, true, false},
		{"admin", "ann", "admin", "", true, true, true},
		{"member", "bea", "operate", "bob", false, false, false},
	} {
		status, body := call(t, http.MethodGet, base+"/me", tokens[c.token], "")
		var me api.Me
		if err := json.Unmarshal([]byte(body), &me); status != http.StatusOK || err != nil {
			t.Fatalf("GET /me as %s: %d %s (%v)", c.token, status, body, err)
		}
		if me.Name != c.name || me.Right != c.right || me.Seat != c.seat || me.Fleet != c.fleet || me.Steer != c.steer || me.Admin != c.administer {
			t.Errorf("GET /me as %s: %+v; want %+v", c.token, me, c)
		}
	}
	if status, _ := call(t, http.MethodGet, base+"/me", "", ""); status != http.StatusUnauthorized {
		t.Errorf("GET /me without a token: %d; want 401", status)
	}
}

// A mutation from the API's own origin (the console) passes the origin
// check; one from any other origin is still refused.
func TestConsoleOriginIsTheAPIs(t *testing.T) {
	base, _ := authServer(t)
	status, body := call(t, http.MethodPost, base+"/tickets/x1/cancel", tokens["operator"], `{}`, "Origin", base)
	if status == http.StatusForbidden {
		t.Errorf("POST from the API's own origin %s: %d %s; want it past the origin check", base, status, body)
	}
	status, body = call(t, http.MethodPost, base+"/tickets/x1/cancel", tokens["operator"], `{}`, "Origin", "http://evil.example")
	if status != http.StatusForbidden || !strings.Contains(body, "origin") {
		t.Errorf("POST from another origin: %d %s; want 403 naming the origin", status, body)
	}
}
