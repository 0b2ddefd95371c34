package firstparty

import (
	"os"
	"regexp"
	"testing"
)

// Every first-party tool has its row in docs/operations.md's table of what
// a seat's tools may do, and the table names no tool that does not exist.
func TestSeatToolsAreInTheAuthorityTable(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (send|write|read|open|ask|answer|list) ").FindAllStringSubmatch(string(docs), -1) {
		documented[m[1]] = true
	}
	for _, tool := range Specs() {
		if !documented[tool.Name] {
			t.Errorf("tool %s has no row in docs/operations.md's table of what a seat's tools may do", tool.Name)
		}
		delete(documented, tool.Name)
	}
	for name := range documented {
		t.Errorf("docs/operations.md lists a seat tool %s that does not exist", name)
	}
}
