package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// authOrg has a token per role, an operator bound to alice's seat and a
// member for bob's.
const authOrg = `company: { name: authco }
auth:
  tokens:
    - { name: ann, role: admin, token_env: CREWLET_TEST_TOKEN_ADMIN }
    - { name: otto, role: operator, token_env: CREWLET_TEST_TOKEN_OPERATOR }
    - { name: vic, role: viewer, token_env: CREWLET_TEST_TOKEN_VIEWER }
    - { name: alice-bot, role: operator, token_env: CREWLET_TEST_TOKEN_ALICE, seat: alice }
    - { name: bea, role: member, token_env: CREWLET_TEST_TOKEN_MEMBER, seat: bob }
profiles: { local: { provider: scripted } }
roles: { lead: { charter: works as lead, profile: local } }
seats:
  - { handle: cto, role: lead }
  - { handle: alice, kind: human }
  - { handle: bob, kind: human }
`

var tokens = map[string]string{
	"admin":    "admin-token-0123456789",
	"operator": "operator-token-0123456789",
	"viewer":   "viewer-token-0123456789",
	"alice":    "alice-token-0123456789",
	"member":   "member-token-0123456789",
}

func authServer(t *testing.T) (string, *store.Store) {
	t.Helper()
	return authServerWith(t, "")
}

// authServerWith is authServer with more of the org file (top-level keys).
func authServerWith(t *testing.T, extra string) (string, *store.Store) {
	t.Helper()
	for role, tok := range tokens {
		t.Setenv("CREWLET_TEST_TOKEN_"+strings.ToUpper(role), tok)
	}
	org, err := config.Parse([]byte(authOrg + extra))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(withServices(&api.Server{Org: org, Store: b.st, Log: log, Metrics: metrics.New()}).Handler())
	t.Cleanup(srv.Close)
	return srv.URL, b.st
}

func call(t *testing.T, method, url, token, body string, headers ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// Every route of the router, against every caller: no token → 401 (but the
// probes); a viewer, operator or admin below the route's right → 403, at or
// above → neither; a member (bob's) → 403 on a fleet route and on another
// seat's, neither on its own seat's and on the routes scoped to what it
// owns (which records it may touch is TestMemberActsOnItsOwnOnly's). The
// routes come from the router itself, so a new route without a right and
// a scope in docs/operations.md's table of routes fails here, and its
// scope there, with what the table of scopes says a member may in it, is
// the one /openapi.json says the code gives it.
func TestEveryRouteAgainstEveryRole(t *testing.T) {
	base, _ := authServer(t)
	doc := loadOpenAPI(t, base)
	org, _ := config.Parse([]byte(authOrg))
	h := (&api.Server{Org: org, Log: slog.New(slog.DiscardHandler)}).Handler()
	docs, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	rank := map[string]int{"": 0, "viewer": 1, "operator": 2, "admin": 3}
	need := map[string]int{"public": -1, "read": 1, "operate": 2, "admin": 3}
	scopes := "fleet|roster|seat|sender|conversation|ticket|approval"
	memberMay := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| ("+scopes+") \\| (.+) \\|$").FindAllStringSubmatch(string(docs), -1) {
		memberMay[m[1]] = m[2]
	}
	ids := func(handle string) *strings.Replacer {
		return strings.NewReplacer("{handle}", handle, "{id}", "x1", "{work_key}", "abc")
	}
	n := 0
	err = chi.Walk(h.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		n++
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(method+" "+pattern) + "` \\| [^|]+ \\| (public|read|operate|admin) \\| (-|" + scopes + ") \\|$")
		m := row.FindStringSubmatch(string(docs))
		if m == nil {
			t.Errorf("%s %s has no row (route | action | right | scope) in docs/operations.md's table of routes", method, pattern)
			return nil
		}
		right, scope := m[1], m[2]
		if (right == "public") != (scope == "-") {
			t.Errorf("%s %s: right %s with scope %s; a public route has no scope, every other one has", method, pattern, right, scope)
		}
		want := "(scope " + scope + "; what a member may: " + memberMay[scope] + ")."
		if right != "public" {
			// The console's files (GET /ui/*) are public and no API
			// operation, so /openapi.json leaves them out.
			if op := doc.Paths.Find(pattern).GetOperation(method); memberMay[scope] == "" || !strings.Contains(op.Description, want) {
				t.Errorf("%s %s: the docs give it scope %s, in which a member may %q; /openapi.json says %q", method, pattern, scope, memberMay[scope], op.Description)
			}
		}
		body := ""
		if method == http.MethodPost {
			body = "{}"
		}
		for _, role := range []string{"", "viewer", "operator", "admin", "member"} {
			status, resp := call(t, method, base+ids("cto").Replace(pattern), tokens[role], body)
			refused := status == 403 && strings.Contains(resp, `"error":"forbidden"`)
			switch {
			case right == "public":
				if status == 401 || status == 403 {
					t.Errorf("%s %s as %q: %d; want it public", method, pattern, role, status)
				}
			case role == "":
				if status != 401 || !strings.Contains(resp, `"error":"unauthorized"`) {
					t.Errorf("%s %s without a token: %d %s; want 401 unauthorized", method, pattern, status, resp)
				}
			case role == "member" && (scope == "fleet" || scope == "seat" && strings.Contains(pattern, "{handle}")):
				if !refused {
					t.Errorf("%s %s (scope %s) as a member, on cto: %d %s; want 403 forbidden", method, pattern, scope, status, resp)
				}
				if scope == "seat" {
					if status, resp := call(t, method, base+ids("bob").Replace(pattern), tokens[role], body); status == 401 || status == 403 {
						t.Errorf("%s %s as a member on its own seat: %d %s; want it allowed", method, pattern, status, resp)
					}
				}
			case role == "member":
				if status == 401 || status == 403 {
					t.Errorf("%s %s (scope %s) as a member: %d %s; want it let through", method, pattern, scope, status, resp)
				}
			case rank[role] < need[right]:
				if !refused {
					t.Errorf("%s %s as %s: %d %s; want 403 forbidden (needs %s)", method, pattern, role, status, resp, right)
				}
			default:
				if status == 401 || status == 403 {
					t.Errorf("%s %s as %s: %d %s; want it allowed (needs %s)", method, pattern, role, status, resp, right)
				}
			}
		}
		return nil
	})
	if err != nil || n < 20 {
		t.Fatalf("walked %d routes (%v)", n, err)
	}
}

// Identity comes from the token: naming someone else in by or from is
// refused; a principal bound to alice's seat sends as alice; an admin may
// send as a human seat explicitly; a bad token is 401; a cross-origin POST
// and a form POST are refused; every refusal is in the audit log, and no
// row holds message text.
func TestIdentityIsThePrincipal(t *testing.T) {
	base, st := authServer(t)
	for _, c := range []struct {
		name, method, path, token, body string
		headers                         []string
		want                            int
	}{
		{"a wrong token", "GET", "/seats", "not-a-token-at-all", "", nil, 401},
		{"operator pausing as someone else", "POST", "/seats/cto/pause", tokens["operator"], `{"by":"ann"}`, nil, 403},
		{"operator sending as alice", "POST", "/seats/cto/messages", tokens["operator"], `{"text":"secret plan","from":"alice"}`, nil, 403},
		{"alice's principal sending as bob", "POST", "/seats/cto/messages", tokens["alice"], `{"text":"secret plan","from":"bob"}`, nil, 403},
		{"admin sending as an agent seat", "POST", "/seats/cto/messages", tokens["admin"], `{"text":"secret plan","from":"cto"}`, nil, 403},
		{"a cross-origin POST", "POST", "/seats/cto/messages", tokens["operator"], `{"text":"secret plan"}`, []string{"Origin", "https://evil.example"}, 403},
		{"a form POST", "POST", "/seats/cto/pause", tokens["operator"], `reason=x`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, bytes.NewBufferString(c.body))
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		for i := 0; i+1 < len(c.headers); i += 2 {
			req.Header.Set(c.headers[i], c.headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: %d %s (request id %q); want %d with a request id", c.name, resp.StatusCode, data, resp.Header.Get("X-Request-Id"), c.want)
		}
	}
	// An allowed call that fails (no such ticket) is recorded failed.
	if status, _ := call(t, "POST", base+"/tickets/t-000000000000/cancel", tokens["operator"], "{}"); status != http.StatusNotFound {
		t.Fatalf("cancel of an unknown ticket: %d; want 404", status)
	}
	failed, err := st.Audit(context.Background(), store.AuditFilter{Outcome: wire.AuditFailed, Limit: 1})
	if err != nil || len(failed) != 1 || failed[0].Principal != "otto" || failed[0].Status != http.StatusNotFound ||
		failed[0].Target != "id=t-000000000000" || !strings.Contains(failed[0].Reason, "no ticket") {
		t.Fatalf("audit of a failed action: %+v, %v; want otto's 404 with its reason", failed, err)
	}
	rows, err := st.Audit(context.Background(), store.AuditFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, r := range rows {
		if r.Outcome == wire.AuditDenied {
			denied++
		}
		if strings.Contains(fmt.Sprint(r), "secret plan") || strings.Contains(fmt.Sprint(r), "token-0123") {
			t.Fatalf("audit row %+v holds message text or a token", r)
		}
	}
	if denied < 6 {
		t.Fatalf("audit log %+v; want a denied row for each refusal", rows)
	}
	// The audit log is the admin's: a viewer may not read it.
	if status, _ := call(t, "GET", base+"/audit", tokens["viewer"], ""); status != 403 {
		t.Fatalf("viewer reading the audit log: %d; want 403", status)
	}
	status, body := call(t, "GET", base+"/audit?outcome=denied&limit=3", tokens["admin"], "")
	if status != 200 || strings.Count(body, `"outcome":"denied"`) != 3 {
		t.Fatalf("GET /audit?outcome=denied&limit=3: %d %s", status, body)
	}
}

// A principal's mutations beyond api.mutations_per_minute are refused with
// 429 and audited; another principal's budget is its own; reads are not
// counted.
func TestMutationsAreRateLimitedPerPrincipal(t *testing.T) {
	base, st := authServerWith(t, "api: { mutations_per_minute: 3 }\n")
	for i := range 5 {
		call(t, "GET", base+"/seats", tokens["operator"], "")
		status, body := call(t, "POST", base+"/tickets/t-000000000000/cancel", tokens["operator"], "{}")
		if limited := status == http.StatusTooManyRequests; limited != (i >= 3) {
			t.Fatalf("mutation %d: %d %s; want 429 from the 4th on", i+1, status, body)
		}
	}
	if status, _ := call(t, "POST", base+"/tickets/t-000000000000/cancel", tokens["admin"], "{}"); status == http.StatusTooManyRequests {
		t.Fatalf("another principal was limited by the operator's mutations")
	}
	rows, err := st.Audit(t.Context(), store.AuditFilter{Principal: "otto", Outcome: wire.AuditDenied, Limit: 10})
	if err != nil || len(rows) != 2 || rows[0].Status != http.StatusTooManyRequests {
		t.Fatalf("audit of the refusals: %+v, %v; want two 429 denials", rows, err)
	}
}

// A process with metrics.enabled false keeps no metrics, and GET /metrics
// says so instead of serving an empty page.
func TestMetricsOffAnswersNotFound(t *testing.T) {
	for role, tok := range tokens {
		t.Setenv("CREWLET_TEST_TOKEN_"+strings.ToUpper(role), tok)
	}
	org, err := config.Parse([]byte(authOrg))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(withServices(&api.Server{Org: org, Log: log}).Handler())
	defer srv.Close()
	status, body := call(t, http.MethodGet, srv.URL+"/metrics", tokens["viewer"], "")
	if status != http.StatusNotFound || !strings.Contains(body, "metrics.enabled is false") {
		t.Fatalf("GET /metrics with metrics off: %d %s; want 404 naming metrics.enabled", status, body)
	}
}

// An org with no token to compare (none configured, no local token minted)
// that did not opt out of tokens refuses every caller, so a process that
// failed to mint its local token cannot fall back to taking anyone as
// admin; with auth.anonymous the same caller is the anonymous admin.
func TestNoCredentialsWithoutTheAnonymousOptOutRefusesEveryone(t *testing.T) {
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"auth: { anonymous: true }\n", http.StatusOK}} {
		org, err := config.Parse([]byte("company: { name: shutco }\n" + c.auth + "seats: [ { handle: alice, kind: human } ]\n"))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer((&api.Server{Org: org, Log: slog.New(slog.DiscardHandler)}).Handler())
		status, body := call(t, http.MethodGet, srv.URL+"/me", "", "")
		srv.Close()
		if status != c.want {
			t.Fatalf("%q: GET /me without a token: %d %s; want %d", c.auth, status, body, c.want)
		}
	}
}

// A member may open tickets for its own seat's work, but a ticket to
// spawn:ROLE spawns a seat, which is the fleet's right (POST /seats/spawn):
// refused with 403 before anything is spawned, as that route would be.
func TestAMemberCannotSpawnThroughATicket(t *testing.T) {
	base, st := authServer(t)
	status, body := call(t, http.MethodPost, base+"/tickets", tokens["member"], `{"to":"spawn:lead","task":"grow the team","from":"bob"}`)
	if status != http.StatusForbidden || !strings.Contains(body, "spawns a seat, as POST /seats/spawn does") {
		t.Fatalf("a member's ticket to spawn:lead: %d %s; want 403 naming the spawn right", status, body)
	}
	seats, err := st.SpawnedSeats(context.Background())
	if err != nil || len(seats) != 0 {
		t.Fatalf("spawned seats after the refusal: %v, %v; want none", seats, err)
	}
	if status, body := call(t, http.MethodPost, base+"/tickets", tokens["member"], `{"to":"cto","task":"a question","from":"bob"}`); status == http.StatusForbidden {
		t.Fatalf("a member's ticket to a seat: %d %s; want it taken", status, body)
	}
}

// A member cannot start a conversation under an id of the shape crewlet
// gives the ones it starts (a schedule's fire, a seat's message), which it
// would then read when crewlet's conversation of that id began; an id of
// its own, or none, is taken.
func TestAMemberCannotPreClaimADerivedConversationID(t *testing.T) {
	base, _ := authServer(t)
	for _, id := range []string{crewlet.ScheduleFireEventID("standup", time.Date(2027, 1, 4, 9, 0, 0, 0, time.UTC)), "tool-0123456789abcdef"} {
		for _, route := range []struct{ path, body string }{
			{"/seats/bob/messages", `{"text":"hello","conversation":"` + id + `"}`},
			{"/tickets", `{"to":"cto","task":"a question","from":"bob","conversation":"` + id + `"}`},
		} {
			status, body := call(t, http.MethodPost, base+route.path, tokens["member"], route.body)
			if status != http.StatusForbidden || !strings.Contains(body, "a member cannot start one") {
				t.Fatalf("POST %s in conversation %s as a member: %d %s; want 403", route.path, id, status, body)
			}
		}
	}
	if status, body := call(t, http.MethodPost, base+"/tickets", tokens["member"], `{"to":"cto","task":"a question","from":"bob","conversation":"bobs-own-thread"}`); status == http.StatusForbidden {
		t.Fatalf("a member's own conversation id: %d %s; want it taken", status, body)
	}
}
