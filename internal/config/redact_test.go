package config

import (
	"strings"
	"testing"
)

// An operator reading GET /config is not shown an MCP server's inline env
// values: they come back as KEY=<redacted>, comments and everything else
// kept, and the paths say which; the document read back that way cannot be
// applied. A document without inline values comes back byte for byte.
func TestGetConfigDocumentNeverShowsAnInlineEnvSecret(t *testing.T) {
	doc := minimal + `# the ops tools
roles:
  dev:
    charter: builds
    profile: local
    mcp:
      - { name: tracker, command: [tracker-mcp], env: ["TRACKER_TOKEN=hunter2-secret", "LOG=debug"] }  # inline, alas
      - name: notes
        url: https://notes.internal/mcp
profiles: { local: { provider: scripted } }
`
	out, paths, err := RedactDocument([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	if strings.Contains(text, "hunter2") || strings.Contains(text, "LOG=debug") {
		t.Fatalf("the redacted document shows an inline value:\n%s", text)
	}
	for _, want := range []string{`TRACKER_TOKEN=<redacted>`, `LOG=<redacted>`, "# the ops tools", "# inline, alas", "https://notes.internal/mcp"} {
		if !strings.Contains(text, want) {
			t.Errorf("the redacted document lacks %q:\n%s", want, text)
		}
	}
	if got := strings.Join(paths, " "); got != "roles.dev.mcp[0].env[0] roles.dev.mcp[0].env[1]" {
		t.Errorf("redacted paths %q", got)
	}
	_, err = Parse(out)
	if err == nil || !strings.Contains(err.Error(), "roles.dev.mcp[0].env[0]: TRACKER_TOKEN is <redacted>, as GET /config shows an inline value") {
		t.Errorf("applying the redacted document: %v; want it refused, naming the entry", err)
	}

	plain := minimal + "# nothing inline\nprofiles: { local: { provider: scripted } }\n"
	same, paths, err := RedactDocument([]byte(plain))
	if err != nil || string(same) != plain || paths != nil {
		t.Fatalf("a document with nothing to redact: %q, %v, %v; want it unchanged", same, paths, err)
	}
}
