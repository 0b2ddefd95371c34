package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testenv/testcert"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
)

// A seat's stdio MCP server runs in the default sandbox, with no sandbox
// key in its role. Told by the model to read what a prompt-injected tool
// would go for (the API's local token, its TLS key, the org file, the
// worker's environment), it reads none of them; a file it writes in its
// workspace reads back, and lies in the seat's workspace on disk.
func TestMCPChildInTheDefaultSandboxReadsNoneOfCrewletsSecrets(t *testing.T) {
	cert := testcert.New(t)
	certFile, keyFile := cert.Files(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cert.PEM)
	orgFile := writeFile(t, "org.yaml", fmt.Sprintf(`company: { name: boxco }
api: { tls: { cert_file: %q, key_file: %q } }
profiles:
  probing:
    provider: scripted
    rules:
      - match: '^read (\S+)'
        tools: [ { name: ts__read_files, args: { paths: [ '{{index .Groups 1}}' ] } } ]
        reply: '{{index .Results 0}}'
      - match: '^write (\S+) (.*)'
        tools: [ { name: ts__write_file, args: { path: '{{index .Groups 1}}', text: '{{index .Groups 2}}' } } ]
        reply: '{{index .Results 0}}'
roles:
  clerk:
    charter: keeps files
    profile: probing
    mcp:
      - { name: ts, command: [ %q ] }
seats:
  - { handle: s01, role: clerk }
`, certFile, keyFile, toolstest.BuildT(t)))
	c := newCompany(t, orgFile)
	c.api = strings.Replace(c.api, "http://", "https://", 1)
	c.httpClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c.apiServer()
	worker := c.worker("n1")
	c.waitAttached(30 * time.Second)
	if !strings.Contains(worker.out.String(), "mcp_children_confinement") || !strings.Contains(worker.out.String(), "confinement=sandbox mechanism=landlock") {
		t.Errorf("the worker did not log how the role's children are confined:\n%s", worker.out.String())
	}

	u, err := url.Parse(c.api)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "crewlet", "local-token-"+u.Port())
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatalf("the API minted no local token where the CLI reads it: %v", err)
	}
	secrets := map[string]string{
		"the local token":      tokenFile,
		"the API's TLS key":    keyFile,
		"the org file":         orgFile,
		"the worker's environ": fmt.Sprintf("/proc/%d/environ", worker.cmd.Process.Pid),
	}
	for what, path := range secrets {
		got := readThroughTheSeat(t, c, path)
		if !strings.HasPrefix(got, "error: ") || strings.Contains(got, strings.TrimSpace(string(token))) {
			t.Errorf("%s (%s): the MCP child read it: %.120q", what, path, got)
		}
	}
	if env := readThroughTheSeat(t, c, "/proc/self/environ"); strings.Contains(env, "CREWLET_PG_URL") || !strings.HasPrefix(env, "ok: ") {
		t.Errorf("the child's own environment holds crewlet's or cannot be read: %.200q", env)
	}

	if reply := c.waitReply(c.send("s01", "write notes.txt kept in the workspace"), 30*time.Second); reply != "ok" {
		t.Fatalf("write in the workspace: %q", reply)
	}
	if got := readThroughTheSeat(t, c, "notes.txt"); got != "ok: kept in the workspace" {
		t.Errorf("the workspace file read back %q", got)
	}
	onDisk := filepath.Join(os.Getenv("XDG_STATE_HOME"), "crewlet", "workspaces", "s01", "notes.txt")
	testenv.Eventually(t, 5*time.Second, "the file in the seat's workspace on disk", func() error {
		_, err := os.Stat(onDisk)
		return err
	})
}

// readThroughTheSeat has seat s01's MCP server read path and returns what
// it answered for it: "ok: CONTENT" or "error: WHY".
func readThroughTheSeat(t *testing.T, c *company, path string) string {
	t.Helper()
	reply := c.waitReply(c.send("s01", "read "+path), 30*time.Second)
	var got map[string]string
	if err := json.Unmarshal([]byte(reply), &got); err != nil {
		t.Fatalf("read %s: the seat answered %q: %v", path, reply, err)
	}
	return got[path]
}
