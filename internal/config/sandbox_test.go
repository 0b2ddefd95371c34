package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const sandboxOrg = `company: { name: acme }
profiles: { p: { provider: scripted } }
seats: [ { handle: cto, role: r } ]
roles:
  r:
    charter: one
    profile: p
    mcp: [ { name: tracker, command: [ /usr/bin/mcp-tracker ] } ]
`

func TestRoleSandboxDefaultsToLandlockWithOpenNetwork(t *testing.T) {
	c, err := Parse([]byte(sandboxOrg))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Roles["r"].Sandbox; got.Mode != SandboxLandlock || got.Network != NetworkOpen || !got.Confined() {
		t.Errorf("sandbox = %+v; want landlock, open network, confined", got)
	}
}

// Attack: a role granting its children a directory that holds crewlet's
// token, TLS key or org file would hand those to any prompt-injected tool.
func TestSandboxPathShowingCrewletsFilesIsRefused(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "keys", "api.key")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	doc := sandboxOrg + "    sandbox: { read: [ " + dir + " ], write: [ relative/path ], mode: jail, network: lan }\n" +
		"api: { tls: { cert_file: " + key + ", key_file: " + key + " } }\n"
	_, err := Parse([]byte(doc))
	for _, want := range []string{
		"roles.r.sandbox.read[0]: " + dir + " would show the role's MCP children " + key,
		"roles.r.sandbox.write[0]: \"relative/path\" is not an absolute path",
		"roles.r.sandbox.mode: unknown mode \"jail\"",
		"roles.r.sandbox.network: unknown network \"lan\"",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestMCPAllowIsTheFilesOwnServersUnlessWritten(t *testing.T) {
	c, err := Parse([]byte(sandboxOrg))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.MCPAllowed(), []MCPAllow{{Command: []string{"/usr/bin/mcp-tracker"}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("derived allow-list = %+v; want %+v", got, want)
	}
	c, err = Parse([]byte(sandboxOrg + "nodes: { mcp_allow: [ { command: [ /usr/bin/mcp-tracker ] }, { command: [ node, /srv/a.js ] } ] }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.MCPAllowed()); n != 2 {
		t.Errorf("written allow-list has %d entries; want the 2 written", n)
	}
	_, err = Parse([]byte(sandboxOrg + "nodes: { mcp_allow: [] }\n"))
	if err == nil || !strings.Contains(err.Error(), `roles.r.mcp[0].command: ["/usr/bin/mcp-tracker"] is not on this node's nodes.mcp_allow`) {
		t.Errorf("a file naming a server its own allow-list lacks: %v", err)
	}
}

// An apply cannot loosen a role's sandbox: a running process keeps each
// role's sandbox from its own file, and a role it did not start with is
// confined by default.
func TestKeepColdKeepsEachRolesSandboxFromTheProcesssFile(t *testing.T) {
	boot, err := Parse([]byte(sandboxOrg))
	if err != nil {
		t.Fatal(err)
	}
	next, err := Parse([]byte(strings.Replace(sandboxOrg, "    profile: p\n", "    profile: p\n    sandbox: { mode: none }\n", 1) +
		"  added: { charter: two, profile: p, sandbox: { mode: none } }\n"))
	if err != nil {
		t.Fatal(err)
	}
	kept, needs, err := KeepCold(boot, next)
	if err != nil {
		t.Fatal(err)
	}
	if !kept.Roles["r"].Sandbox.Confined() || !kept.Roles["added"].Sandbox.Confined() {
		t.Errorf("kept sandboxes: r %+v, added %+v; want both confined", kept.Roles["r"].Sandbox, kept.Roles["added"].Sandbox)
	}
	if !strings.Contains(strings.Join(needs, ","), "roles.r.sandbox") {
		t.Errorf("needs restart = %v; want roles.r.sandbox named", needs)
	}
}
