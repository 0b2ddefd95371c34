package health

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
)

func transition(seat string, from, to crewlet.SeatHealth) crewlet.HealthTransition {
	return crewlet.HealthTransition{Seat: seat, From: from, To: to, Cause: "because", At: time.Now()}
}

// A webhook that fails twice gets the transition on the third try, with
// the header from the environment; one that refuses it (4xx) is not
// retried; a transition of no state a webhook asked for is not posted.
func TestNotifierRetriesThenDelivers(t *testing.T) {
	t.Setenv("CREWLET_TEST_HOOK", "Bearer s3cret")
	var mu sync.Mutex
	var flakyTries, refusingTries int
	var got []Notification
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		flakyTries++
		if flakyTries <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("header %q; want the variable's value", r.Header.Get("Authorization"))
		}
		var n Notification
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			t.Errorf("body: %v", err)
		}
		got = append(got, n)
	}))
	defer flaky.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refusingTries++
		mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer refusing.Close()
	log := &testenv.Log{}
	org := &config.Config{Company: config.Company{Name: "acme"}, Health: config.Health{Notify: []config.HealthNotify{
		{URL: flaky.URL, States: []string{"gone"}, HeadersFrom: map[string]string{"authorization": "CREWLET_TEST_HOOK"}},
		{URL: refusing.URL},
	}}}
	n := NewNotifier(org, slog.New(slog.NewTextHandler(log, nil)))
	n.Backoff = 10 * time.Millisecond
	n.Start()
	defer n.Stop()
	n.Post(transition("eng", crewlet.HealthOK, crewlet.HealthPaused))
	n.Post(transition("eng", crewlet.HealthPaused, crewlet.HealthGone))
	testenv.Eventually(t, 10*time.Second, "delivered after two failures", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 || refusingTries != 2 || !strings.Contains(log.String(), "seat_health_notify_failed") {
			return fmt.Errorf("flaky got %+v after %d tries; refusing tried %d times", got, flakyTries, refusingTries)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if n := got[0]; n.Company != "acme" || n.Seat != "eng" || n.From != crewlet.HealthPaused || n.To != crewlet.HealthGone || n.Cause != "because" {
		t.Errorf("notification %+v", n)
	}
	if strings.Contains(log.String(), "s3cret") {
		t.Errorf("the header's value reached the log:\n%s", log)
	}
}

// Post never waits for a webhook: past the queue's bound it drops and logs.
func TestNotifierPostNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer hook.Close()
	defer close(release)
	log := &testenv.Log{}
	org := &config.Config{Health: config.Health{Notify: []config.HealthNotify{{URL: hook.URL}}}}
	n := NewNotifier(org, slog.New(slog.NewTextHandler(log, nil)))
	n.Start()
	defer n.Stop()
	done := make(chan struct{})
	go func() {
		for range NotifyQueue + 10 {
			n.Post(transition("eng", crewlet.HealthOK, crewlet.HealthBacklog))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Post blocked behind a webhook that does not answer")
	}
	if !strings.Contains(log.String(), "seat_health_notify_dropped") {
		t.Errorf("no drop logged past the queue's bound:\n%s", log)
	}
}

// A webhook that answers with a redirect does not get its secret header
// sent on: the redirect's target sees no request at all, and the failure
// says where the redirect pointed, never the header's value.
func TestWebhookRedirectNeverCarriesTheSecretHeaderElsewhere(t *testing.T) {
	t.Setenv("CREWLET_TEST_HOOK", "Bearer s3cret")
	var mu sync.Mutex
	var elsewhere, asked int
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		elsewhere++
	}))
	defer target.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked++
		mu.Unlock()
		http.Redirect(w, r, target.URL+"/collect", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	log := &testenv.Log{}
	org := &config.Config{Company: config.Company{Name: "acme"}, Health: config.Health{Notify: []config.HealthNotify{
		{URL: redirecting.URL, HeadersFrom: map[string]string{"authorization": "CREWLET_TEST_HOOK"}},
	}}}
	n := NewNotifier(org, slog.New(slog.NewTextHandler(log, nil)))
	n.Backoff = 10 * time.Millisecond
	n.Start()
	defer n.Stop()
	n.Post(transition("eng", crewlet.HealthOK, crewlet.HealthGone))
	testenv.Eventually(t, 10*time.Second, "the redirect logged as a failure", func() error {
		if !strings.Contains(log.String(), "seat_health_notify_failed") {
			return fmt.Errorf("no failure logged yet:\n%s", log)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if asked != 1 || elsewhere != 0 {
		t.Fatalf("the hook was asked %d times and the redirect's target %d; want once and never", asked, elsewhere)
	}
	if !strings.Contains(log.String(), "a redirect to "+target.URL+"/collect, which is not followed") || strings.Contains(log.String(), "s3cret") {
		t.Fatalf("log:\n%s\nwant the redirect's target named and no header value", log)
	}
}
