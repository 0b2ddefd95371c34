// Package toolstest builds the MCP test server (internal/tools/testserver)
// and reads what it counted, for the tests of every package that runs it.
package toolstest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the test server into dir and returns its path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "testserver")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/crewlet/crewlet/internal/tools/testserver").CombinedOutput()
	if err != nil {
		return "", &buildError{err: err, out: string(out)}
	}
	return bin, nil
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "build testserver: " + e.err.Error() + "\n" + e.out }

// BuildT is Build into the test's temporary directory, failing the test on
// error.
func BuildT(t testing.TB) string {
	t.Helper()
	bin, err := Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Write is one write the server counted: the idempotency key of its request
// and its text.
type Write struct {
	Key  string `json:"key"`
	Text string `json:"text"`
}

// Writes returns the writes counted in the server's count file, oldest
// first; none when the file does not exist yet.
func Writes(t testing.TB, countFile string) []Write {
	t.Helper()
	return readLines[Write](t, countFile)
}

// readLines decodes a file of JSON lines; none when it does not exist yet.
func readLines[T any](t testing.TB, file string) []T {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s line %q: %v", file, sc.Text(), err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Call is one tool call the server got (TESTSERVER_CALLS_FILE): the tool,
// its arguments and its request's idempotency key.
type Call struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	Key  string          `json:"key"`
}

// Calls returns the calls logged in the server's calls file, oldest first;
// none when the file does not exist yet.
func Calls(t testing.TB, callsFile string) []Call {
	t.Helper()
	return readLines[Call](t, callsFile)
}
