package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/logging"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// doorServer serves authOrg plus extra with metrics over a fresh database;
// it returns the server's URL and its handler.
func doorServer(t *testing.T, extra string) (string, http.Handler, *store.Store) {
	t.Helper()
	for role, tok := range tokens {
		t.Setenv("CREWLET_TEST_TOKEN_"+strings.ToUpper(role), tok)
	}
	org, err := config.Parse([]byte(authOrg + extra))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	s := withServices(&api.Server{Org: org, Store: b.st, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New()})
	h := s.Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, h, b.st
}

// clientFrom is an HTTP client whose connections come from the loopback
// address from: another source, as far as the door can tell.
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64}}
}

func do(t *testing.T, c *http.Client, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// unauthenticated reads crewlet_api_unauthenticated_total by reason.
func unauthenticated(t *testing.T, c *http.Client, base string) map[string]int {
	t.Helper()
	status, body := do(t, c, http.MethodGet, base+"/metrics", tokens["viewer"])
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, body)
	}
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^crewlet_api_unauthenticated_total\{reason="(\w+)"\} (\d+)$`).FindAllStringSubmatch(body, -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	return out
}

// flood sends n requests without a valid token (half none, half a wrong
// one, each to a path of 1 KiB) from 127.0.0.1, 16 at a time, and returns
// the statuses they got and how long they took.
func flood(t *testing.T, base string, n int) (map[int]int, time.Duration) {
	t.Helper()
	c := clientFrom("127.0.0.1")
	path := base + "/seats/" + strings.Repeat("x", 1024)
	var mu sync.Mutex
	statuses := map[int]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				req, _ := http.NewRequest(http.MethodGet, path, nil)
				if i%2 == 0 {
					req.Header.Set("Authorization", "Bearer wrong-token-"+strconv.FormatInt(i, 10))
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return statuses, time.Since(began)
}

// auditBound is the most one source's bucket of perMinute lets through in
// took: perMinute at once, then as many a minute.
func auditBound(perMinute int, took time.Duration) int {
	return perMinute * (1 + int(took/time.Minute) + 1)
}

// 10,000 requests without a valid token cost a counter each and a handful
// of audit rows: the metric counts every one, the audit log holds at most
// api.denied_audits_per_minute of them a minute, each field clipped to 256
// bytes; meanwhile a caller with a token from the same address is served,
// and fast (failed authentications from this machine are not limited).
func TestAnonymousFloodIsCountedNotStored(t *testing.T) {
	base, _, st := doorServer(t, "")
	c := clientFrom("127.0.0.1")
	const n = 10000
	done := make(chan struct{})
	var served, slowest atomic.Int64
	go func() {
		defer close(done)
		for served.Load() < 20 {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-t.Context().Done():
				return
			}
			began := time.Now()
			status, body := do(t, c, http.MethodGet, base+"/tickets", tokens["viewer"])
			if status != http.StatusOK {
				t.Errorf("an authenticated GET /tickets during the flood: %d %s; want 200", status, body)
				return
			}
			served.Add(1)
			if took := time.Since(began); int64(took) > slowest.Load() {
				slowest.Store(int64(took))
			}
		}
	}()
	statuses, took := flood(t, base, n)
	<-done
	rows, err := st.Audit(context.Background(), store.AuditFilter{Principal: "-", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flood: %d requests in %s (%.0f/s): %v; %d audit rows added; %d authenticated calls served meanwhile, the slowest in %s",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), statuses, len(rows), served.Load(), time.Duration(slowest.Load()).Round(time.Millisecond))
	if statuses[http.StatusUnauthorized] != n {
		t.Errorf("statuses %v; want every one 401", statuses)
	}
	if served.Load() < 20 {
		t.Errorf("%d authenticated calls served during the flood; want 20", served.Load())
	}
	if counted := unauthenticated(t, c, base); counted["no_token"] != n/2 || counted["bad_token"] != n/2 {
		t.Errorf("crewlet_api_unauthenticated_total %v; want no_token and bad_token %d each", counted, n/2)
	}
	if bound := auditBound(config.DefaultDeniedAuditsPerMinute, took); len(rows) == 0 || len(rows) > bound {
		t.Fatalf("%d audit rows; want between 1 and %d", len(rows), bound)
	}
	for _, r := range rows {
		if r.Outcome != wire.AuditDenied || len(r.Action) > 256+len("GET ") || len(r.Target) > 256 || len(r.Reason) > 256 || !strings.HasPrefix(r.Target, "source=127.0.0.1 handle=xxx") {
			t.Errorf("audit row %+v; want a denial, each field at most 256 bytes, naming its source", r)
		}
	}
}

// A source beyond this machine that fails to authenticate
// api.auth_failures_per_minute times is refused 429 from then on unless it
// brings a valid token: one caller behind a shared address (NAT, a proxy)
// sending bad tokens does not lock out the others. Another source is not
// limited; every refusal is counted.
func TestLockoutOfASharedAddressNeverRefusesAValidToken(t *testing.T) {
	_, h, _ := doorServer(t, "api: { auth_failures_per_minute: 3 }\n")
	call := func(from, token string) int {
		req := httptest.NewRequest(http.MethodGet, "/tickets", nil)
		req.Host, req.RemoteAddr = "localhost", from+":40000"
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := range 5 {
		want := http.StatusUnauthorized
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if got := call("203.0.113.7", "wrong-token-0123456789"); got != want {
			t.Fatalf("wrong token %d from 203.0.113.7: %d; want %d", i+1, got, want)
		}
	}
	for _, token := range []string{tokens["viewer"], tokens["admin"]} {
		if got := call("203.0.113.7", token); got != http.StatusOK {
			t.Fatalf("a valid token from the blocked source: %d; want 200", got)
		}
	}
	if got := call("203.0.113.7", ""); got != http.StatusTooManyRequests {
		t.Fatalf("no token from the blocked source: %d; want 429", got)
	}
	if got := call("2001:db8::1", "wrong-token-0123456789"); got != http.StatusUnauthorized {
		t.Fatalf("a wrong token from another source: %d; want 401", got)
	}
	if got := call("198.51.100.1", tokens["viewer"]); got != http.StatusOK {
		t.Fatalf("a valid token from another source: %d; want 200", got)
	}
	for range 10 {
		if got := call("127.0.0.1", "wrong-token-0123456789"); got != http.StatusUnauthorized {
			t.Fatalf("a wrong token from this machine: %d; want 401, never limited", got)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Host = "localhost"
	req.Header.Set("Authorization", "Bearer "+tokens["viewer"])
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	for _, want := range []string{`crewlet_api_unauthenticated_total{reason="bad_token"} 14`, `crewlet_api_unauthenticated_total{reason="rate_limited"} 3`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A Host header that is not a name of the API is refused on every route,
// the public ones and unknown paths included, before the token is looked
// at; the loopback names, the listen host, the address the connection came
// in on and api.hosts are taken.
func TestForeignHostIsRefused(t *testing.T) {
	base, _, st := doorServer(t, "api: { hosts: [ crewlet.example.com ] }\n")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	c := clientFrom("127.0.0.1")
	for _, c2 := range []struct {
		host, path string
		want       int
	}{
		{"rebind.attacker.example", "/tickets", http.StatusForbidden},
		{"rebind.attacker.example:" + port, "/healthz", http.StatusForbidden},
		{"rebind.attacker.example", "/no/such/route", http.StatusForbidden},
		{"localhost.attacker.example", "/tickets", http.StatusForbidden},
		{"localhost:" + port, "/tickets", http.StatusOK},
		{"LOCALHOST.", "/tickets", http.StatusOK},
		{"127.0.0.1:" + port, "/tickets", http.StatusOK},
		{"[::1]:" + port, "/tickets", http.StatusOK},
		{"crewlet.example.com", "/tickets", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+c2.path, nil)
		req.Host = c2.host
		req.Header.Set("Authorization", "Bearer "+tokens["admin"])
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c2.want || c2.want == http.StatusForbidden && !strings.Contains(string(body), "is not a name of this API") {
			t.Errorf("Host %s, GET %s: %d %s; want %d", c2.host, c2.path, resp.StatusCode, body, c2.want)
		}
	}
	rows, err := st.Audit(context.Background(), store.AuditFilter{Principal: "-", Outcome: wire.AuditDenied, Limit: 10})
	if err != nil || len(rows) != 4 {
		t.Fatalf("audit of the refused hosts: %+v, %v; want their 4 rows", rows, err)
	}
	for _, r := range rows {
		if r.Status != http.StatusForbidden || !strings.Contains(r.Reason, "attacker.example") {
			t.Errorf("audit row %+v; want a 403 naming the Host", r)
		}
	}
	if counted := unauthenticated(t, c, base); counted["host"] != 4 {
		t.Fatalf("crewlet_api_unauthenticated_total %v; want host 4", counted)
	}
}

// /readyz is public, so it says only ok or unreachable per backend; the
// driver's error, which names hosts and ports, goes to the log under the
// request's id.
func TestReadyzSaysNoMoreThanUnreachable(t *testing.T) {
	env := testenv.Stack(t)
	for role, tok := range tokens {
		t.Setenv("CREWLET_TEST_TOKEN_"+strings.ToUpper(role), tok)
	}
	org, err := config.Parse([]byte(authOrg))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	mb, err := mailbox.Open(b.ctx, env.RedisURL, "readyz-"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	var log testenv.Log
	logger, err := logging.New(&log, config.Log{Format: config.LogText, Level: "info"})
	if err != nil {
		t.Fatal(err)
	}
	s := withServices(&api.Server{Org: org, Store: b.st, Mailbox: mb, Temporal: tc, Log: logger})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `{"ready":false,"temporal":"unreachable","postgres":"ok","redis":"ok"}`
	if resp.StatusCode != http.StatusServiceUnavailable || strings.TrimSpace(string(body)) != want {
		t.Fatalf("GET /readyz: %d %s; want 503 %s", resp.StatusCode, body, want)
	}
	id := resp.Header.Get("X-Request-Id")
	if line := fmt.Sprintf("request_id=%s", id); !strings.Contains(log.String(), "readyz_unreachable") || !strings.Contains(log.String(), line) || !strings.Contains(log.String(), "127.0.0.1:1") {
		t.Fatalf("log %q; want readyz_unreachable with the error and %s", log.String(), line)
	}
}

// A viewer that keeps asking for what it may not is counted each time and
// audited by sample: api.denied_audits_per_minute rows for it, not a row
// per refusal, and every refusal in crewlet_api_refused_total. Another
// principal's refusal still has its row.
func TestARefusedViewerFloodIsSampledNotARowEach(t *testing.T) {
	base, _, st := doorServer(t, "api: { denied_audits_per_minute: 3, mutations_per_minute: 0 }\n")
	c := clientFrom("127.0.0.1")
	const n = 40
	for range n {
		if status, body := do(t, c, http.MethodPost, base+"/seats/cto/pause", tokens["viewer"]); status != http.StatusForbidden {
			t.Fatalf("a viewer pausing: %d %s; want 403", status, body)
		}
	}
	if status, body := do(t, c, http.MethodPost, base+"/seats/cto/pause", tokens["member"]); status != http.StatusForbidden {
		t.Fatalf("a member pausing another's seat: %d %s; want 403", status, body)
	}
	ctx := context.Background()
	vic, err := st.Audit(ctx, store.AuditFilter{Principal: "vic", Outcome: wire.AuditDenied, Limit: 100})
	if err != nil || len(vic) < 1 || len(vic) > 4 {
		t.Fatalf("the viewer's denied rows: %d, %v; want the sample, 3 (4 if a minute's refill came)", len(vic), err)
	}
	bea, err := st.Audit(ctx, store.AuditFilter{Principal: "bea", Outcome: wire.AuditDenied, Limit: 10})
	if err != nil || len(bea) != 1 {
		t.Fatalf("the member's denied rows: %d, %v; want 1", len(bea), err)
	}
	_, metrics := do(t, c, http.MethodGet, base+"/metrics", tokens["viewer"])
	for _, want := range []string{fmt.Sprintf(`crewlet_api_refused_total{role="viewer"} %d`, n), `crewlet_api_refused_total{role="member"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
