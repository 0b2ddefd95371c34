package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/evals"
)

// A checks file and --check flags give the same checks, a json_schema's
// schema written as YAML sent as JSON.
func TestChecksFromFlagsAndYAML(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schemaFile, []byte(`{"required":["paid"],"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	yamlFile := filepath.Join(dir, "checks.yaml")
	doc := `- { kind: contains, text: "invoice 7" }
- { kind: regex, pattern: '^recorded: ' }
- kind: json_schema
  schema: { type: object, required: [paid] }
- { kind: same_tools }
- { kind: judge, name: paid, profile: judge, rubric: "says whether it was paid: yes or no" }
`
	if err := os.WriteFile(yamlFile, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := readChecks(yamlFile)
	if err != nil {
		t.Fatal(err)
	}
	var fromFlags []evals.Check
	for _, f := range []string{"contains:invoice 7", "regex:^recorded: ", "json_schema:" + schemaFile, "same_tools", "judge:judge:says whether it was paid: yes or no"} {
		c, err := parseCheck(f)
		if err != nil {
			t.Fatalf("--check %s: %v", f, err)
		}
		fromFlags = append(fromFlags, c)
	}
	fromFlags[4].Name = "paid"
	a, _ := json.Marshal(fromFile)
	b, _ := json.Marshal(fromFlags)
	if string(a) != string(b) {
		t.Fatalf("from YAML:  %s\nfrom flags: %s\nwant the same", a, b)
	}
	if _, err := parseCheck("vibes:x"); err == nil || !strings.Contains(err.Error(), "not one of contains, regex, json_schema, same_tools, judge") {
		t.Errorf("--check vibes:x: %v; want the kinds named", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("- { kind: contains, txt: x }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readChecks(bad); err == nil || !strings.Contains(err.Error(), "a check's keys are") {
		t.Errorf("a check with an unknown key: %v; want the keys named", err)
	}
}
