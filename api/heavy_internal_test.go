package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// The heavy routes are the large reads (the policy what-if reads too, for
// all it is a POST), and the table says so: /openapi.json
// and the router both take it from there.
func TestHeavyRoutesAreTheLargeReads(t *testing.T) {
	var got []string
	for _, rt := range (&Server{}).routes() {
		if rt.heavy {
			got = append(got, rt.method+" "+rt.pattern)
		}
	}
	want := "GET /seats/{handle}/inbox GET /seats/{handle}/turns GET /turns/{handle}/{work_key} POST /evals/policy GET /evals/runs/{run} GET /conversations/{id} GET /deadletters"
	if strings.Join(got, " ") != want {
		t.Fatalf("heavy routes %q; want %q", got, want)
	}
}

func TestHeavyReadsPastTheCapAreRefused(t *testing.T) {
	s, h, release := heldHeavyReads()
	var wg sync.WaitGroup
	codes := make([]int, maxHeavyReads)
	for i := range maxHeavyReads {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h(rec, heavyRequestOf(fmt.Sprintf("reader-%d", i)))
			codes[i] = rec.Code
		})
	}
	waitInFlight(t, s, maxHeavyReads)
	rec := httptest.NewRecorder()
	h(rec, heavyRequestOf("another"))
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
	h(rec, heavyRequestOf("another"))
	if rec.Code != http.StatusOK {
		t.Fatalf("a read once the others ended: %d; want 200", rec.Code)
	}
}

// heldHeavyReads is a server whose heavy reads, h, each hold their slot
// until release is closed, then answer 200.
func heldHeavyReads() (s *Server, h http.HandlerFunc, release chan struct{}) {
	s = &Server{Log: slog.New(slog.DiscardHandler)}
	s.heavyReads = make(chan struct{}, maxHeavyReads)
	release = make(chan struct{})
	h = s.heavy(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusOK)
	})
	return s, h, release
}

// waitInFlight waits, at most 10 s, until n heavy reads hold their slots.
func waitInFlight(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.heavyReads) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads in flight after 10 s", len(s.heavyReads), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// heavyRequestOf is a heavy read's request made by principal name.
func heavyRequestOf(name string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/turns/a/b", nil)
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, Principal{Name: name, Role: "viewer"}))
}

// One principal holds at most maxHeavyReadsPerPrincipal of the process's
// heavy-read slots: its next large read is refused while another
// principal's is still served, so one caller's burst cannot take every
// slot.
func TestOnePrincipalCannotTakeEveryHeavyReadSlot(t *testing.T) {
	s, h, release := heldHeavyReads()
	var wg sync.WaitGroup
	for range maxHeavyReadsPerPrincipal {
		wg.Go(func() { h(httptest.NewRecorder(), heavyRequestOf("greedy")) })
	}
	waitInFlight(t, s, maxHeavyReadsPerPrincipal)
	rec := httptest.NewRecorder()
	h(rec, heavyRequestOf("greedy"))
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "the most one principal may") {
		t.Fatalf("the greedy principal's read %d: %d %q; want 429 naming the per-principal bound", maxHeavyReadsPerPrincipal+1, rec.Code, rec.Body)
	}
	other := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h(rec, heavyRequestOf("patient"))
		other <- rec.Code
	}()
	waitInFlight(t, s, maxHeavyReadsPerPrincipal+1) // another principal's read took a slot
	close(release)
	wg.Wait()
	if code := <-other; code != http.StatusOK {
		t.Fatalf("another principal's read: %d; want 200", code)
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
		if got := crewlet.Clip(tc.in, tc.most); !strings.HasPrefix(got, tc.want) {
			t.Errorf("crewlet.Clip(%q, %d) = %q; want it to begin %q", tc.in, tc.most, got, tc.want)
		}
	}
}
