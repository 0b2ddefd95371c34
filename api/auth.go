package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/time/rate"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/wire"
)

// rightsOf is what each company-wide role may do; a member's rights are
// scoped to its seat (rights.go).
var rightsOf = map[string]authority.Right{
	config.RoleViewer:   authority.Read,
	config.RoleOperator: authority.Operate,
	config.RoleAdmin:    authority.Administer,
}

// Principal is who calls the API: a token's name and role, or, when the
// org opted out of tokens (auth.anonymous, a loopback listen), the
// anonymous operator with every right. A member's Seat is what it may act on.
type Principal struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Seat is the human seat the principal is bound to: mail it sends is
	// from that seat.
	Seat      string `json:"seat,omitempty"`
	Anonymous bool   `json:"anonymous,omitempty"`
}

type principalKey struct{}

// principalOf is the request's principal.
func principalOf(r *http.Request) Principal {
	p, _ := r.Context().Value(principalKey{}).(Principal)
	return p
}

// credential is a configured token.
type credential struct {
	secret    []byte
	principal Principal
}

// readCredentials reads the org's tokens from the environment.
func readCredentials(org *config.Config) []credential {
	var out []credential
	for _, t := range org.Auth.Tokens {
		out = append(out, credential{secret: []byte(t.Secret()), principal: Principal{Name: t.Name, Role: t.Role, Seat: t.Seat}})
	}
	return out
}

// tokensOf is the tokens of one config revision, read from the
// environment once per revision.
type tokensOf struct {
	org   *config.Config
	creds []credential
}

// credentials returns the tokens of the revision the process runs now: a
// token an apply removed stops working as soon as this process follows it.
func (s *Server) credentials() []credential {
	org := s.Org.Now()
	if cur := s.tokens.Load(); cur != nil && cur.org == org {
		return cur.creds
	}
	next := &tokensOf{org: org, creds: append(readCredentials(org), s.localCredentials()...)}
	s.tokens.Store(next)
	return next.creds
}

// authenticate returns the principal of a request's bearer token. Every
// configured token is compared, in constant time, so the time taken says
// nothing of which one came close. Only an org that opted out of tokens
// altogether (auth.anonymous) takes a caller without one; with no token to
// compare, anyone else is refused.
func (s *Server) authenticate(r *http.Request) (Principal, bool) {
	creds := s.credentials()
	if len(creds) == 0 && s.Org.Now().Auth.Anonymous {
		return Principal{Name: crewlet.ExternalSender, Role: config.RoleAdmin, Anonymous: true}, true
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return Principal{}, false
	}
	found := -1
	for i, c := range creds {
		if subtle.ConstantTimeCompare([]byte(token), c.secret) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return creds[found].principal, true
}

// guard wraps a route's handler with what every route needs: the caller's
// principal (401 without one), the route's right (403 when the
// role lacks it), JSON bodies only on mutations (415), and an audit row for
// every mutation and every refusal; a session route's calls spend the
// budget and write the rows of the routes they call.
func (s *Server) guard(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if rt.rule().Right == authority.Public {
			rt.handler(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		p, ok := s.authenticate(r)
		var refused error
		switch {
		case !ok:
			refused = s.unauthenticated(r)
		case !rt.allows(p, r):
			refused = rt.forbidden(p)
		case r.Header.Get("Origin") != "" && !sameOrigin(r) && !slices.Contains(s.Org.Now().API.AllowedOrigins, r.Header.Get("Origin")):
			// A page elsewhere must not drive the API with a visitor's
			// network position or token. The console (GET /ui/) is served
			// from the API's own origin.
			refused = crewlet.Errorf(crewlet.EFORBIDDEN, "requests from origin %q are not allowed; list it in api.allowed_origins", crewlet.Clean(r.Header.Get("Origin")))
		case r.Method != http.MethodGet && r.ContentLength != 0 && !jsonContent(r):
			refused = crewlet.Errorf(crewlet.EUNSUPPORTED, "send the body as Content-Type: application/json")
		case r.Method != http.MethodGet && !rt.session && !rt.rpc && !s.allowMutation(p.Name):
			refused = s.pastMutations(p.Name)
		}
		setPrincipal(r, p)
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		if refused != nil {
			writeError(rec, refused)
		} else {
			rt.handler(rec, r)
		}
		if r.Method != http.MethodGet && !rt.session || refused != nil {
			s.audit(r, rt, p, rec, refused)
		}
	}
}

// audit records one action: who, what, on which ids, and how it ended.
// Never a body: no message text, no secret. It only records, so a failure
// is logged and the response stands.
func (s *Server) audit(r *http.Request, rt route, p Principal, rec *statusRecorder, refused error) {
	e := wire.AuditEntry{
		Principal: p.Name, Role: p.Role, Action: rt.method + " " + clipField(rt.pattern), Target: clipField(targetOf(r)),
		Outcome: wire.AuditAllowed, Status: rec.status, RequestID: requestID(r),
	}
	switch {
	case refused != nil:
		e.Outcome, e.Reason = wire.AuditDenied, crewlet.ErrorMessage(refused)
	case rec.outcome != "":
		e.Outcome, e.Reason = rec.outcome, rec.note
	case rec.status == http.StatusUnauthorized || rec.status == http.StatusForbidden:
		// Refused by the handler: acting as someone else.
		e.Outcome, e.Reason = wire.AuditDenied, rec.detail()
	case rec.status >= 400:
		e.Outcome, e.Reason = wire.AuditFailed, rec.detail()
	default:
		e.Reason = rec.note
	}
	e.Reason = clipField(e.Reason)
	switch {
	case e.Principal == "" && !s.sampleDenial(r, &e):
		return
	case e.Principal != "" && e.Outcome == wire.AuditDenied && !s.sampleRefusal(p):
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := s.Store.RecordAudit(ctx, e); err != nil {
		s.Log.ErrorContext(ctx, "audit_unrecorded", "action", e.Action, "error", err)
	}
}

// targetOf lists the route's path ids, "handle=cto".
func targetOf(r *http.Request) string {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return ""
	}
	var parts []string
	for i, k := range rc.URLParams.Keys {
		parts = append(parts, k+"="+crewlet.Clean(rc.URLParams.Values[i]))
	}
	return strings.Join(parts, " ")
}

func jsonContent(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// statusRecorder keeps the status a handler wrote and, of an error, the
// start of its body, for the audit row.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	errBody []byte
	// note is what the handler says of an allowed action for its audit
	// row (noteAudit), or, with outcome, of one that failed or was refused
	// inside an answer whose status does not say so (noteOutcome).
	note, outcome string
}

func (w *statusRecorder) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the connection (a live
// stream flushes and lifts the write deadline through it).
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status >= 400 && len(w.errBody) < 1024 {
		w.errBody = append(w.errBody, b[:min(len(b), 1024-len(w.errBody))]...)
	}
	return w.ResponseWriter.Write(b)
}

// detail is the error's detail the handler answered with; internal errors
// answer no internal text, so none reaches the audit log either.
func (w *statusRecorder) detail() string {
	var e errorBody
	_ = json.Unmarshal(w.errBody, &e)
	return e.Detail
}

// atTheMachine reports whether p is the person at the API's machine
// rather than a named principal: the anonymous caller of an org that opted
// out of tokens, or the holder of the local token the API minted (no
// configured token takes its name). Either names who acts ("by") and who
// mail is from, as the operator of a tokenless org always could; the audit
// log still records the principal.
func (p Principal) atTheMachine() bool {
	return p.Anonymous || p.Name == config.LocalPrincipal && p.Role == config.RoleAdmin && p.Seat == ""
}

// actingAs is who a request acts as when it names someone ("by", "from"):
// the person at the machine (atTheMachine) is whoever it says, defaulting
// to fallback; a principal is itself, and naming someone else is refused.
func actingAs(r *http.Request, named, fallback string) (string, error) {
	p := principalOf(r)
	switch {
	case p.atTheMachine() && named != "":
		return named, nil
	case p.atTheMachine():
		return fallback, nil
	case named == "" || named == p.Name:
		return p.Name, nil
	}
	return "", crewlet.Errorf(crewlet.EFORBIDDEN, "%s may not act as %q: who acts is the token's principal", p.Name, named)
}

// sender is who mail a request sends is from: a principal bound to a human
// seat sends as that seat; an admin may send as another human seat
// explicitly (audited as any send); anyone else sends as the operator.
func (s *Server) sender(r *http.Request, from string) (string, error) {
	p := principalOf(r)
	switch {
	case p.atTheMachine() || from == "" && p.Seat == "":
		return from, nil
	case from == "" || from == p.Seat:
		return p.Seat, nil
	case p.Role == config.RoleAdmin:
		if seat, ok := s.Org.Now().Seat(from); ok && seat.Kind == string(crewlet.SeatHuman) {
			return from, nil
		}
		return "", crewlet.Errorf(crewlet.EFORBIDDEN, "an admin may send as a human seat only; %q is not one", from)
	}
	return "", crewlet.Errorf(crewlet.EFORBIDDEN, "%s may not send as %q: mail is from the token's seat", p.Name, from)
}

// allowMutation spends one of the principal's mutations; false when its
// budget for the minute is spent. The limit is per API process.
func (s *Server) allowMutation(principal string) bool {
	n := s.Org.Now().API.MutationsPerMinute
	return n <= 0 || s.mutations.allow(principal, n)
}

// pastMutations is the refusal of a principal whose mutations of the
// minute are spent.
func (s *Server) pastMutations(principal string) error {
	return crewlet.Errorf(crewlet.ERATELIMITED, "%s sent more than %d mutations in a minute (api.mutations_per_minute); slow down", principal, s.Org.Now().API.MutationsPerMinute)
}

// sampleRefusal counts a refusal of an authenticated principal and reports
// whether its sample in the audit log has room (api.denied_audits_per_minute
// a minute per principal), as sampleDenial does for a source before
// authentication: a viewer that keeps asking for what it may not costs a
// counter, not a row each.
func (s *Server) sampleRefusal(p Principal) bool {
	s.Metrics.Refused(p.Role)
	n := s.Org.Now().API.DeniedAuditsPerMinute
	return n > 0 && s.refusals.allow(p.Name, n)
}

// perPrincipal is a per-minute budget for each principal; the principals
// are the org's tokens, so it holds a bounded few.
type perPrincipal struct {
	mu     sync.Mutex
	byName map[string]*rate.Limiter
}

// allow spends one of name's perMinute (more than 0), refilled at as many
// a minute, and reports whether there was one.
func (b *perPrincipal) allow(name string, perMinute int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byName == nil {
		b.byName = map[string]*rate.Limiter{}
	}
	l := b.byName[name]
	perMinuteLimiter(&l, perMinute)
	b.byName[name] = l
	return l.Allow()
}

// Me is GET /me: who the caller's token is, and what it may read and do,
// so a client (the console) offers only that and asks for nothing more.
type Me struct {
	Principal
	// Right is what the principal holds: read, operate or admin, over the
	// whole company, or over its own seat for a member.
	Right string `json:"right"`
	// Fleet says it may read the whole company: nodes, profiles, usage,
	// dead letters, schedules, every seat.
	Fleet bool `json:"fleet"`
	// Steer says it may pause, resume and drain any seat, requeue dead
	// letters and run schedules.
	Steer bool `json:"steer"`
	// Admin says it may read the audit log and apply config.
	Admin bool `json:"admin"`
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	may := func(a authority.Action) bool { return route{action: a}.allows(p, r) }
	right := rightsOf[p.Role]
	if p.Role == config.RoleMember {
		right = authority.Operate
	}
	writeJSON(w, http.StatusOK, Me{Principal: p, Right: right.String(),
		Fleet: may(authority.ReadFleet), Steer: may(authority.SteerFleet), Admin: may(authority.AdministerFleet)})
}
