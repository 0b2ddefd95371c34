package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// serveStore runs the API over st, logging to log.
func serveStore(t *testing.T, st *store.Store, log io.Writer) string {
	t.Helper()
	org := testOrg(config.Budget{}, config.Budget{})
	l := slog.New(slog.NewTextHandler(log, nil))
	srv := httptest.NewServer(withServices(&api.Server{Org: org, Store: st, Log: l}).Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// getRaw calls GET base+path and returns the status and body.
func getRaw(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestSeatMemory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.serve(t, testOrg(config.Budget{}, config.Budget{}))
	for i := range 5 {
		if err := b.st.WriteDiary(b.ctx, "cto", fmt.Sprintf("note %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		wk := fmt.Sprintf("wk%d", i)
		if err := b.st.RecordEpisode(b.ctx, store.Episode{Seat: "cto", WorkKey: wk, TurnID: crewlet.TurnWorkflowID("cto", wk), Summary: "did " + wk}); err != nil {
			t.Fatal(err)
		}
	}
	for _, who := range []string{"alice", "bob", "cfo"} {
		if err := b.st.CountInteraction(b.ctx, "cto", who, "wk-"+who); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("first pages of every list", func(t *testing.T) {
		var v api.MemoryView
		if code, eb := get(t, base, "/seats/cto/memory", &v); code != http.StatusOK {
			t.Fatalf("status %d %+v; want 200", code, eb)
		}
		if v.Seat != "cto" || v.Diary == nil || v.Episodes == nil || v.Counterparties == nil {
			t.Fatalf("view %+v; want cto with all three lists", v)
		}
		if len(v.Diary.Items) != 5 || v.Diary.Items[0].Content != "note 4" || v.Diary.Next != "" {
			t.Fatalf("diary %+v; want 5 notes, newest (note 4) first, no next", v.Diary)
		}
		if len(v.Episodes.Items) != 3 || v.Episodes.Items[0].WorkKey != "wk2" || v.Episodes.Items[0].TurnID != "turn/cto/wk2" || v.Episodes.Items[0].Summary != "did wk2" {
			t.Fatalf("episodes %+v; want 3, wk2 first", v.Episodes)
		}
		if len(v.Counterparties.Items) != 3 || v.Counterparties.Items[0].Counterparty != "cfo" || v.Counterparties.Items[0].InteractionCount != 1 {
			t.Fatalf("counterparties %+v; want 3, cfo (seen last) first", v.Counterparties)
		}
	})

	t.Run("a diary entry without a work key has no work_key field", func(t *testing.T) {
		code, body := getRaw(t, base, "/seats/cto/memory?kind=diary&limit=1")
		if code != http.StatusOK || strings.Contains(body, "work_key") || !strings.Contains(body, `"recorded_at"`) {
			t.Fatalf("status %d body %s; want 200 with recorded_at and no work_key", code, body)
		}
	})

	t.Run("a seat with no memory", func(t *testing.T) {
		code, body := getRaw(t, base, "/seats/alice/memory")
		if code != http.StatusOK {
			t.Fatalf("status %d %s; want 200", code, body)
		}
		var v struct {
			Seat                            string
			Diary, Episodes, Counterparties map[string]json.RawMessage
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		for name, list := range map[string]map[string]json.RawMessage{"diary": v.Diary, "episodes": v.Episodes, "counterparties": v.Counterparties} {
			if string(list["items"]) != "[]" || string(list["next"]) != `""` {
				t.Errorf("%s = items %s next %s; want [] and \"\"", name, list["items"], list["next"])
			}
		}
	})

	t.Run("paging the diary by next", func(t *testing.T) {
		var got []string
		path := "/seats/cto/memory?kind=diary&limit=2"
		for pages := 0; ; pages++ {
			if pages == 5 {
				t.Fatalf("still paging after 5 pages: %v", got)
			}
			var v api.MemoryView
			if code, eb := get(t, base, path, &v); code != http.StatusOK {
				t.Fatalf("GET %s: status %d %+v", path, code, eb)
			}
			if v.Episodes != nil || v.Counterparties != nil {
				t.Fatalf("kind=diary answered other lists too: %+v", v)
			}
			for _, d := range v.Diary.Items {
				got = append(got, d.Content)
			}
			if v.Diary.Next == "" {
				break
			}
			path = "/seats/cto/memory?kind=diary&limit=2&before=" + v.Diary.Next
		}
		if want := []string{"note 4", "note 3", "note 2", "note 1", "note 0"}; !slices.Equal(got, want) {
			t.Fatalf("paged diary %v; want %v", got, want)
		}
	})

	t.Run("paging counterparties by next", func(t *testing.T) {
		var got []string
		path := "/seats/cto/memory?kind=counterparties&limit=1"
		for range 4 {
			var v api.MemoryView
			if code, eb := get(t, base, path, &v); code != http.StatusOK {
				t.Fatalf("GET %s: status %d %+v", path, code, eb)
			}
			for _, c := range v.Counterparties.Items {
				got = append(got, c.Counterparty)
			}
			if v.Counterparties.Next == "" {
				break
			}
			path = "/seats/cto/memory?kind=counterparties&limit=1&before=" + v.Counterparties.Next
		}
		if want := []string{"cfo", "bob", "alice"}; !slices.Equal(got, want) {
			t.Fatalf("paged counterparties %v; want %v", got, want)
		}
	})

	for _, tt := range []struct {
		name, query string
		want        []string
	}{
		{"bad kind", "kind=notes", []string{"diary, episodes or counterparties", `"notes"`}},
		{"before without kind", "before=3", []string{"kind=diary, episodes or counterparties"}},
		{"malformed diary cursor", "kind=diary&before=abc", []string{"next value", "diary", `"abc"`}},
		{"malformed episodes cursor", "kind=episodes&before=0", []string{"next value", "episodes"}},
		{"malformed counterparties cursor", "kind=counterparties&before=not-ours", []string{"next value", "counterparties"}},
		{"limit out of range", "limit=201", []string{"from 1 to 200", "201"}},
		{"limit not a number", "limit=all", []string{"from 1 to 200", "all"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, eb := get(t, base, "/seats/cto/memory?"+tt.query, nil)
			if code != http.StatusBadRequest || eb.Error != crewlet.EINVALID {
				t.Fatalf("status %d %+v; want 400 invalid", code, eb)
			}
			for _, w := range tt.want {
				if !strings.Contains(eb.Detail, w) {
					t.Errorf("detail %q does not say %q", eb.Detail, w)
				}
			}
		})
	}

	t.Run("unknown seat", func(t *testing.T) {
		code, eb := get(t, base, "/seats/nobody/memory", nil)
		if code != http.StatusNotFound || eb.Error != crewlet.ENOTFOUND || !strings.Contains(eb.Detail, `no seat "nobody"`) {
			t.Fatalf("status %d %+v; want 404 naming the seat", code, eb)
		}
	})
}

func TestSeatMemoryStoreUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	bare, err := store.Open(ctx, testenv.Database(t)) // never migrated
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Close)
	closed, err := store.Open(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()

	for _, tt := range []struct {
		name      string
		st        *store.Store
		detail    string
		logged    string
		forbidden []string
	}{
		{"schema missing", bare, "crewlet migrate", "42P01", []string{"SQLSTATE", "relation", "SELECT"}},
		{"database unreachable", closed, "cannot be reached", "closed pool", []string{"closed pool", "SQLSTATE"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log testenv.Log
			base := serveStore(t, tt.st, &log)
			for _, q := range []string{"", "?kind=episodes", "?kind=counterparties"} {
				code, eb := get(t, base, "/seats/cto/memory"+q, nil)
				if code != http.StatusServiceUnavailable || eb.Error != crewlet.EUNAVAILABLE || !strings.Contains(eb.Detail, tt.detail) {
					t.Fatalf("GET memory%s: status %d %+v; want 503 unavailable saying %q", q, code, eb, tt.detail)
				}
				for _, f := range tt.forbidden {
					if strings.Contains(eb.Detail, f) {
						t.Fatalf("detail %q carries %q; the database's own text belongs in the log", eb.Detail, f)
					}
				}
			}
			if l := log.String(); !strings.Contains(l, "api_error") || !strings.Contains(l, tt.logged) {
				t.Fatalf("log %q; want an api_error with the database's own error (%s)", l, tt.logged)
			}
			// The seat check comes first: an unknown seat is still a 404.
			if code, eb := get(t, base, "/seats/nobody/memory", nil); code != http.StatusNotFound {
				t.Fatalf("unknown seat: status %d %+v; want 404", code, eb)
			}
		})
	}
}
