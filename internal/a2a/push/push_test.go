package push_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/a2a/push"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// A webhook URL is refused unless it is http(s), without credentials,
// and its host is public, or a2a.push.allow lists a prefix of it; each
// refusal says what to do.
func TestCheckURLRefusesWhatIsNotAPublicWebhook(t *testing.T) {
	t.Parallel()
	allow := []string{"http://127.0.0.1:9000/hooks/", "https://10.1.2.3"}
	for _, c := range []struct {
		url, want string
	}{
		{"https://203.0.113.7/hook", ""},
		{"http://[2001:db8::1]:8080/hook", ""},
		{"http://127.0.0.1:9000/hooks/a2a", ""},
		{"http://127.0.0.1:9000/hooks/", ""},
		{"https://10.1.2.3/anything", ""},
		{"", "has no url"},
		{"ftp://203.0.113.7/hook", "not an http or https URL"},
		{"/relative", "not an http or https URL"},
		{"https://user:pw@203.0.113.7/hook", "must not hold credentials"},
		{"https://203.0.113.7/" + strings.Repeat("a", push.MaxURLBytes), "bytes; at most"},
		{"http://127.0.0.1:9000/hooksmith", "a loopback address"},
		{"http://127.0.0.1:9001/hooks/", "a loopback address"},
		{"http://10.1.2.3/x", "a private address"},
		{"http://localhost:8080/x", "a loopback address"},
		{"http://169.254.169.254/latest/meta-data", "a link-local address"},
		{"http://[::ffff:192.168.1.1]/x", "a private address"},
		{"http://0.0.0.0/x", "an unspecified address"},
		{"http://100.64.0.1/x", "carrier-grade NAT address"},
		{"https://no-such-host.invalid/x", "does not resolve"},
	} {
		err := push.CheckURL(t.Context(), c.url, allow)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v; want it taken", c.url, err)
		case c.want != "" && (err == nil || crewlet.ErrorCode(err) != crewlet.EINVALID || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v; want EINVALID saying %q", c.url, err, c.want)
		}
	}
	err := push.CheckURL(t.Context(), "http://10.0.0.5/x", nil)
	if msg := crewlet.ErrorMessage(err); !strings.Contains(msg, "a2a.push.allow") {
		t.Errorf("a private host's refusal %q does not name a2a.push.allow, where an operator lets it", msg)
	}
}

// The signature is HMAC-SHA256 of "timestamp.body" keyed by the token, as
// a receiver computes it with nothing but the standard library.
func TestSignIsHMACOfTimestampAndBody(t *testing.T) {
	t.Parallel()
	body := []byte(`{"task":{"id":"t-1"}}`)
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte("1700000000." + string(body)))
	if got, want := push.Sign("s3cret", "1700000000", body), "sha256="+hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("Sign = %s; want %s", got, want)
	}
	if push.Sign("s3cret", "1700000001", body) == push.Sign("s3cret", "1700000000", body) {
		t.Fatal("the signature does not cover the timestamp: a captured notification could be replayed later")
	}
}

// The delay after a failed attempt doubles from 2s up to 10m, and jitter
// takes at most half of it away.
func TestBackoffDoublesToItsCapWithJitter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n      int
		jitter float64
		want   time.Duration
	}{
		{1, 0, 2 * time.Second}, {2, 0, 4 * time.Second}, {1, 1, time.Second}, {5, 0.5, 24 * time.Second},
		{9, 0, 512 * time.Second}, {10, 0, 10 * time.Minute}, {64, 0, 10 * time.Minute}, {64, 1, 5 * time.Minute},
	} {
		if got := push.Backoff(c.n, c.jitter); got != c.want {
			t.Errorf("Backoff(%d, %v) = %s; want %s", c.n, c.jitter, got, c.want)
		}
	}
}

// received is what a webhook was posted.
type received struct {
	path   string
	header http.Header
	body   []byte
}

// A due notification is posted to its webhook with the token, the
// config's authentication, a stable event id and a signature of its
// body, which is the task as it stood; a webhook whose address is
// internal and not in a2a.push.allow is not dialed, even when it was
// taken when set (its name may resolve elsewhere since).
func TestDispatcherPostsSignedNotificationsToAllowedWebhooksOnly(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []received
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{r.URL.Path, r.Header.Clone(), body})
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	st := testenv.Store(t, testenv.MigratedDatabase(t))
	ctx := t.Context()
	tk, _, err := st.CreateTicket(ctx, "k-dispatch", crewlet.Ticket{From: "ext", To: "eng-1", Task: "fix it", Conversation: "c-dispatch"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []store.PushConfig{
		{Ticket: tk.ID, ID: "allowed", URL: hook.URL + "/hooks/a2a", Token: "tok-1", AuthScheme: "Bearer", AuthCredentials: "cred-1", CreatedBy: "otto"},
		{Ticket: tk.ID, ID: "internal", URL: hook.URL + "/elsewhere", Token: "tok-2", CreatedBy: "otto"},
	} {
		if _, err := st.PutPushConfig(ctx, c, push.MaxConfigsPerTask, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.SettleTicket(ctx, tk.ID, "fixed it"); err != nil {
		t.Fatal(err)
	}
	d := push.NewDispatcher(st, func() []string { return []string{hook.URL + "/hooks/"} }, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second)
	if n := d.Pass(ctx); n != 2 {
		t.Fatalf("the pass claimed %d notifications; want 2, one per config", n)
	}
	mu.Lock()
	defer mu.Unlock()
	var paths []string
	for _, r := range got {
		paths = append(paths, r.path)
	}
	if len(got) != 1 || got[0].path != "/hooks/a2a" {
		t.Fatalf("the webhooks were posted at %v; want one post, to /hooks/a2a only", paths)
	}
	h, body := got[0].header, got[0].body
	if h.Get(push.TokenHeader) != "tok-1" || h.Get("Authorization") != "Bearer cred-1" || h.Get("Content-Type") != push.ContentType || h.Get(push.EventIDHeader) == "" {
		t.Fatalf("headers %v; want the token, the authentication, A2A's content type and an event id", h)
	}
	if sig := push.Sign("tok-1", h.Get(push.TimestampHeader), body); h.Get(push.SignatureHeader) != sig {
		t.Fatalf("signature %q; want %q", h.Get(push.SignatureHeader), sig)
	}
	var ev a2a.StreamResponse
	if err := json.Unmarshal(body, &ev); err != nil || ev.Task == nil || ev.Task.ID != tk.ID || ev.Task.Status.State != a2a.StateCompleted || len(ev.Task.Artifacts) != 1 {
		t.Fatalf("body %s, %v; want the completed task with its reply", body, err)
	}
	if n := d.Pass(ctx); n != 0 {
		t.Fatalf("a pass after: claimed %d; want none (one delivered, the other waiting to retry)", n)
	}
}
