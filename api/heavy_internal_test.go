package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// The heavy routes are the large reads, and the table says so: /openapi.json
// and the router both take it from there.
func TestHeavyRoutesAreTheLargeReads(t *testing.T) {
	var got []string
	for _, rt := range (&Server{}).routes() {
		if rt.heavy {
			got = append(got, rt.method+" "+rt.pattern)
		}
	}
	want := "GET /seats/{handle}/inbox GET /seats/{handle}/turns GET /turns/{handle}/{work_key} GET /conversations/{id} GET /deadletters"
	if strings.Join(got, " ") != want {
		t.Fatalf("heavy routes %q; want %q", got, want)
	}
}

func TestHeavyReadsPastTheCapAreRefused(t *testing.T) {
	s := &Server{Log: slog.New(slog.DiscardHandler)}
	s.heavyReads = make(chan struct{}, maxHeavyReads)
	release := make(chan struct{})
	h := s.heavy(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusOK)
	})
	var wg sync.WaitGroup
	codes := make([]int, maxHeavyReads)
	for i := range maxHeavyReads {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h(rec, httptest.NewRequest(http.MethodGet, "/turns/a/b", nil))
			codes[i] = rec.Code
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.heavyReads) < maxHeavyReads {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads in flight after 10 s", len(s.heavyReads), maxHeavyReads)
		}
		time.Sleep(time.Millisecond)
	}
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/turns/a/b", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" ||
		!strings.Contains(rec.Body.String(), crewlet.ERATELIMITED) || !strings.Contains(rec.Body.String(), "large reads") {
		t.Fatalf("read %d: %d %q Retry-After %q; want 429 saying why, with Retry-After", maxHeavyReads+1, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	close(release)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("read %d within the cap: %d", i, c)
		}
	}
	rec = httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/turns/a/b", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("a read once the others ended: %d; want 200", rec.Code)
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		most int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789abc", 10, "0123456789\n…[clipped by crewlet: 3 of 13 bytes left out"},
		// Never half a rune: "é" is two bytes.
		{"aaaaaaaaaé", 10, "aaaaaaaaa\n…[clipped by crewlet: 2 of 11"},
	} {
		if got := clip(tc.in, tc.most); !strings.HasPrefix(got, tc.want) {
			t.Errorf("clip(%q, %d) = %q; want it to begin %q", tc.in, tc.most, got, tc.want)
		}
	}
}
