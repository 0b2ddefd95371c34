package migrations_test

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/migrations"
)

// twoStepMarker, in a comment of a statement, says the statement is the
// second step of a two-step change: the release before it no longer reads or
// writes what the statement removes or tightens
// (docs/operations.md, "Upgrades and downgrades").
const twoStepMarker = "two-step:"

var (
	dollarTag = regexp.MustCompile(`^\$[A-Za-z_]*\$`)
	space     = regexp.MustCompile(`\s+`)
	// Each of these breaks a build of the previous release that still runs
	// on the new schema: it reads or writes what is gone or renamed, or
	// writes a row a new constraint refuses.
	notAdditive = []*regexp.Regexp{
		regexp.MustCompile(`\bDROP\b`),
		regexp.MustCompile(`\bRENAME\b`),
		regexp.MustCompile(`\bALTER COLUMN\b`),
		regexp.MustCompile(`\bTRUNCATE\b`),
		regexp.MustCompile(`\bADD (CONSTRAINT|PRIMARY KEY|UNIQUE|CHECK|FOREIGN KEY|EXCLUDE)\b`),
	}
	addColumn = regexp.MustCompile(`^(ALTER TABLE (IF EXISTS )?(ONLY )?\S+ )?ADD (COLUMN )?`)
)

// statement is one SQL statement's code, with comments, string literals and
// dollar-quoted bodies taken out, and the comments that went with it.
type statement struct{ code, comments string }

// split cuts a migration into statements. Comments, literals and function
// bodies are skipped as units, so a semicolon, quote or keyword inside one
// neither ends a statement nor counts as code.
func split(sql string) []statement {
	var out []statement
	var code, comments strings.Builder
	emit := func() {
		if c := strings.TrimSpace(space.ReplaceAllString(code.String(), " ")); c != "" {
			out = append(out, statement{code: c, comments: comments.String()})
		}
		code.Reset()
		comments.Reset()
	}
	for i := 0; i < len(sql); {
		rest := sql[i:]
		end := 1
		switch {
		case strings.HasPrefix(rest, "--"):
			if end = strings.IndexByte(rest, '\n'); end < 0 {
				end = len(rest)
			}
			comments.WriteString(rest[:end])
			code.WriteByte(' ')
		case rest[0] == '\'':
			for end < len(rest) && (rest[end] != '\'' || strings.HasPrefix(rest[end:], "''")) {
				if rest[end] == '\'' {
					end++
				}
				end++
			}
			end = min(end+1, len(rest))
			code.WriteString("''")
		case dollarTag.MatchString(rest):
			tag := dollarTag.FindString(rest)
			if close := strings.Index(rest[len(tag):], tag); close >= 0 {
				end = len(tag) + close + len(tag)
			} else {
				end = len(rest)
			}
			code.WriteString("$$")
		case rest[0] == ';':
			emit()
		default:
			code.WriteByte(rest[0])
		}
		i += end
	}
	emit()
	return out
}

// unmarkedChanges returns the statements of a migration that are not
// additive and carry no two-step marker.
func unmarkedChanges(sql string) []string {
	var found []string
	for _, st := range split(sql) {
		if strings.Contains(st.comments, twoStepMarker) {
			continue
		}
		upper := strings.ToUpper(st.code)
		if slices.ContainsFunc(notAdditive, func(re *regexp.Regexp) bool { return re.MatchString(upper) }) ||
			addsRequiredColumn(upper) {
			found = append(found, st.code)
		}
	}
	return found
}

// addsRequiredColumn reports whether an ALTER TABLE adds a NOT NULL column
// without a default, which the previous build's inserts leave out.
func addsRequiredColumn(stmt string) bool {
	if !strings.HasPrefix(stmt, "ALTER TABLE ") {
		return false
	}
	depth, start := 0, 0
	var clauses []string
	for i, r := range stmt {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				clauses = append(clauses, stmt[start:i])
				start = i + 1
			}
		}
	}
	clauses = append(clauses, stmt[start:])
	return slices.ContainsFunc(clauses, func(c string) bool {
		c = strings.TrimSpace(c)
		return addColumn.MatchString(c) && strings.Contains(c, "NOT NULL") && !strings.Contains(c, "DEFAULT")
	})
}

// Every migration is additive, or marks the statement that is the second
// step of a two-step change: two builds run on one schema during a rolling
// upgrade, and the older must keep working on it.
func TestMigrationsAreAdditive(t *testing.T) {
	for _, name := range migrations.Names() {
		body, err := fs.ReadFile(migrations.Files, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range unmarkedChanges(string(body)) {
			t.Errorf("%s: %q is not additive: the previous release's build, still running during a rolling upgrade, breaks on it. "+
				"Split it over two releases and mark the second step with a %q comment "+`(docs/operations.md, "Upgrades and downgrades")`,
				name, stmt, "-- "+twoStepMarker)
		}
	}
}

func TestUnmarkedChangesFindsWhatIsNotAdditive(t *testing.T) {
	for _, tc := range []struct {
		sql   string
		found bool
	}{
		{"CREATE TABLE t (a text NOT NULL, CHECK (a <> ''));", false},
		{"ALTER TABLE t ADD COLUMN b text NOT NULL DEFAULT '', ADD COLUMN c int;", false},
		{"ALTER TABLE t ADD COLUMN c timestamptz;\nCREATE INDEX t_c ON t (c);", false},
		{"-- we no longer drop or rename anything\nCREATE INDEX t_c ON t (c);", false},
		{"CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN DROP TABLE x; END $$;", false},
		{"INSERT INTO t (a) VALUES ('drop table t');", false},
		{"INSERT INTO t (a) VALUES ('it''s; drop table t');", false},
		{"-- the seat's row; we drop nothing\nCREATE INDEX t_c ON t (c);", false},
		{"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ DROP TABLE x; $body$;", false},
		{"ALTER TABLE t DROP COLUMN b;", true},
		{"DROP TABLE t;", true},
		{"DROP INDEX t_c;", true},
		{"ALTER TABLE t RENAME COLUMN b TO c;", true},
		{"ALTER TABLE t ALTER COLUMN b SET NOT NULL;", true},
		{"ALTER TABLE t ALTER COLUMN b TYPE bigint;", true},
		{"ALTER TABLE t ADD CONSTRAINT t_b CHECK (b > 0);", true},
		{"ALTER TABLE t ADD UNIQUE (b);", true},
		{"ALTER TABLE t ADD COLUMN c int, ADD COLUMN d text NOT NULL;", true},
		{"ALTER TABLE t ADD d numeric(10, 2) NOT NULL;", true},
		{"TRUNCATE t;", true},
		{"-- two-step: 0031 stopped reading b\nALTER TABLE t DROP COLUMN b;", false},
		{"-- two-step: 0031 stopped reading b\nALTER TABLE t DROP COLUMN b;\nDROP TABLE u;", true},
	} {
		if got := unmarkedChanges(tc.sql); (len(got) > 0) != tc.found {
			t.Errorf("unmarkedChanges(%q) = %q; want found %v", tc.sql, got, tc.found)
		}
	}
}

// Each release mark names a migration, in order; a migration belongs to the
// first release whose mark is at or after it, and one after the last mark to
// the next release.
func TestReleaseMarks(t *testing.T) {
	names := migrations.Names()
	for i, mark := range migrations.Releases {
		if !slices.Contains(names, mark) {
			t.Errorf("release mark %s names no migration", mark)
		}
		if i > 0 && mark <= migrations.Releases[i-1] {
			t.Errorf("release mark %s is not after %s", mark, migrations.Releases[i-1])
		}
	}
	first, last := migrations.Releases[0], migrations.Releases[len(migrations.Releases)-1]
	for name, want := range map[string]int{names[0]: 1, first: 1, last: len(migrations.Releases), "9999_next.sql": len(migrations.Releases) + 1} {
		if got := migrations.Release(name); got != want {
			t.Errorf("Release(%s) = %d; want %d", name, got, want)
		}
	}
}
