package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/store"
)

func TestSeatsMemory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, err := b.crewlet(t, "seats", "memory", "cto")
	if err != nil {
		t.Fatal(err)
	}
	if want := "DIARY\n  (none)\n\nEPISODES\n  (none)\n\nCOUNTERPARTIES\n  (none)\n"; out != want {
		t.Fatalf("memory of a seat that remembers nothing:\n%s\nwant:\n%s", out, want)
	}

	for i := range 3 {
		if err := b.st.WriteDiary(b.ctx, "cto", fmt.Sprintf("launch moved to day %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.st.RecordEpisode(b.ctx, store.Episode{Seat: "cto", WorkKey: "wk1", TurnID: "turn/cto/wk1", Summary: "answered alice\nabout the launch"}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.CountInteraction(b.ctx, "cto", "alice", "wk1"); err != nil {
		t.Fatal(err)
	}

	out, err = b.crewlet(t, "seats", "memory", "cto")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "DIARY\n  ID", "launch moved to day 2", "launch moved to day 0",
		"EPISODES\n  ID", "turn/cto/wk1", "answered alice about the launch",
		"COUNTERPARTIES\n  COUNTERPARTY  INTERACTIONS", "  alice         1")
	if strings.Contains(out, "more:") {
		t.Fatalf("a single page prints no hint:\n%s", out)
	}
	if strings.Index(out, "day 2") > strings.Index(out, "day 0") {
		t.Fatalf("diary is not newest first:\n%s", out)
	}

	// A page of one diary entry says how to read the next; following the
	// hint walks the diary to its end.
	hint := regexp.MustCompile(`more: crewlet seats memory cto --kind diary --limit 1 --before (\S+)\n`)
	var seen []string
	args := []string{"seats", "memory", "cto", "--kind", "diary", "--limit", "1"}
	for range 4 {
		out, err := b.crewlet(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "EPISODES") || strings.Contains(out, "COUNTERPARTIES") {
			t.Fatalf("--kind diary printed other lists:\n%s", out)
		}
		seen = append(seen, regexp.MustCompile(`day \d`).FindString(out))
		m := hint.FindStringSubmatch(out)
		if m == nil {
			break
		}
		args = []string{"seats", "memory", "cto", "--kind", "diary", "--limit", "1", "--before", m[1]}
	}
	if got := strings.Join(seen, ","); got != "day 2,day 1,day 0" {
		t.Fatalf("pages followed by the hint: %s; want day 2,day 1,day 0", got)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown seat", []string{"seats", "memory", "nobody"}, `no seat "nobody"`},
		{"bad kind", []string{"seats", "memory", "cto", "--kind", "notes"}, "kind must be diary, episodes or counterparties"},
		{"before without kind", []string{"seats", "memory", "cto", "--before", "3"}, "name it with kind="},
		{"bad cursor", []string{"seats", "memory", "cto", "--kind", "counterparties", "--before", "3"}, "previous counterparties page"},
		{"bad limit", []string{"seats", "memory", "cto", "--limit", "0"}, "limit must be a number from 1 to 200"},
		{"no handle", []string{"seats", "memory"}, "usage: crewlet seats memory HANDLE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.crewlet(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("crewlet %v: error %v; want one containing %q", tt.args, err, tt.want)
			}
		})
	}
}
