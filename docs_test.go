package crewlet

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A comment that explains itself by a design section must name one the repo
// ships: `(docs/FILE.md, "Heading")`, where Heading is a heading of that
// file. The design file the code was first written from is not in the repo,
// so a citation of it is refused too.
var (
	citation = regexp.MustCompile(`\(docs/([A-Za-z0-9_.-]+\.md), "([^"]*)"\)`)
	// citationStart finds a citation cut off or malformed: broken over a
	// line, or its heading not quoted.
	citationStart = regexp.MustCompile(`\(docs/[A-Za-z0-9_.-]+\.md,`)
	// unshipped is a citation of the design file the repo does not ship,
	// spelt so that this file does not match it.
	unshipped = regexp.MustCompile(`DESIGN(\.md)? ` + "\u00a7" + `|DESIGN\.md`)
	// citingFiles are the files whose text may cite a section.
	citingFiles = map[string]bool{".go": true, ".md": true, ".conf": true, ".yaml": true, ".yml": true, ".sh": true, ".sql": true, ".txt": true}
)

// citationProblems reads every file under root that may cite a section and
// returns each citation that names a missing doc or heading, each one it
// cannot read, and each citation of the unshipped design, as file:line.
func citationProblems(root string) ([]string, error) {
	headings := map[string]map[string]bool{}
	headingsOf := func(doc string) (map[string]bool, error) {
		if h, ok := headings[doc]; ok {
			return h, nil
		}
		h, err := markdownHeadings(filepath.Join(root, "docs", doc))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		headings[doc] = h
		return h, nil
	}
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !citingFiles[filepath.Ext(path)] || path == filepath.Join(root, "docs_test.go") {
			// This file's examples of citations are not citations.
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(data), "\n") {
			at := fmt.Sprintf("%s:%d", filepath.ToSlash(rel), i+1)
			if unshipped.MatchString(line) {
				problems = append(problems, at+": cites the design file the repo does not ship; cite a section of docs/")
			}
			if n, m := len(citationStart.FindAllString(line, -1)), len(citation.FindAllString(line, -1)); n > m {
				problems = append(problems, at+`: a citation not in the form (docs/FILE.md, "Heading") on one line`)
			}
			for _, c := range citation.FindAllStringSubmatch(line, -1) {
				doc, heading := c[1], c[2]
				h, err := headingsOf(doc)
				if err != nil {
					return err
				}
				switch {
				case h == nil:
					problems = append(problems, fmt.Sprintf("%s: cites docs/%s, which does not exist", at, doc))
				case !h[heading]:
					problems = append(problems, fmt.Sprintf("%s: cites %q, which is no heading of docs/%s", at, heading, doc))
				}
			}
		}
		return nil
	})
	return problems, err
}

// markdownHeadings returns the text of every heading of a Markdown file,
// outside fenced code blocks.
func markdownHeadings(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	headings := map[string]bool{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			headings[strings.TrimSpace(text)] = true
		}
	}
	return headings, sc.Err()
}

func TestCitationsNameShippedSections(t *testing.T) {
	problems, err := citationProblems(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func TestCitationCheckerRefusesBadCitations(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/guide.md", "# Guide\n\n## Seats\n\n```\n## Not a heading\n```\n")
	for _, tt := range []struct {
		name, text, want string
	}{
		{"good", `// Seats (docs/guide.md, "Seats").`, ""},
		{"missing heading", `// Seats (docs/guide.md, "Mailboxes").`, `a.go:1: cites "Mailboxes", which is no heading of docs/guide.md`},
		{"heading in a code block", `// (docs/guide.md, "Not a heading")`, `a.go:1: cites "Not a heading", which is no heading of docs/guide.md`},
		{"missing doc", `// Seats (docs/gone.md, "Seats").`, "a.go:1: cites docs/gone.md, which does not exist"},
		{"broken over a line", "// Seats (docs/guide.md,\n// \"Seats\").", "a.go:1: a citation not in the form"},
		{"unshipped design", "// Seats (DESIGN \u00a73).", "a.go:1: cites the design file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			write("a.go", tt.text+"\n")
			problems, err := citationProblems(root)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(problems, "\n")
			if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) || len(problems) > 1 {
				t.Fatalf("problems:\n%s\nwant one starting %q", got, tt.want)
			}
		})
	}
}
