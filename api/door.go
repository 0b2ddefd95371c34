package api

import (
	"container/list"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/wire"
)

// The door is what a request meets before anyone knows who sent it
// (docs/operations.md, "Authentication and authority"): a Host header that
// is not one of the API's names is refused, which stops DNS rebinding; a
// source beyond this machine that failed to authenticate too often is
// refused without its token being looked at; and a refusal before
// authentication costs a counter, not an audit row: only a sample of them
// per source is written.

// Reasons a request is refused before authentication, the label of
// crewlet_api_unauthenticated_total.
const (
	refusedNoToken     = "no_token"
	refusedBadToken    = "bad_token"
	refusedHost        = "host"
	refusedRateLimited = "rate_limited"
)

const (
	// maxAuditField bounds each audit field a request's own bytes reach
	// (its path, ids, headers quoted in a reason).
	maxAuditField = 256
	// maxSources bounds the sources the door remembers; the one seen
	// longest ago is forgotten first.
	maxSources = 10000
	// allSourcesAudits is how many times one source's sample all sources
	// together may write a minute, so many addresses do not multiply it
	// without bound.
	allSourcesAudits = 10
)

// door refuses, before routing, a request with a foreign Host header and
// one without a valid token from a source past its failed
// authentications; every route, the public ones and unknown paths
// included, is behind it.
func (s *Server) door(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := s.Org.Now().API
		switch {
		case !hostAllowed(r, a):
			s.refuseAtDoor(w, r, refusedHost, crewlet.Errorf(crewlet.EFORBIDDEN,
				"Host %s is not a name of this API; call it by a name in api.hosts, the api.listen host, localhost or a loopback address (this check stops DNS rebinding)", quoteHost(r.Host)))
		case limited(sourceOf(r)) && s.sources.blocked(sourceOf(r), a.AuthFailuresPerMinute) && !s.tokenValid(r):
			w.Header().Set("Retry-After", "60")
			s.refuseAtDoor(w, r, refusedRateLimited, crewlet.Errorf(crewlet.ERATELIMITED,
				"more than %d failed authentications from your address in a minute (api.auth_failures_per_minute); its requests are refused until the minute passes", a.AuthFailuresPerMinute))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// tokenValid reports whether the request carries a token the API takes. A
// source past its failed authentications is still served with one: behind
// a NAT or a proxy one address is many callers, and one of them failing
// must not lock the others out. The lockout only refuses the guesses, and
// no rate of guessing finds a token of 16 random bytes or more.
func (s *Server) tokenValid(r *http.Request) bool {
	_, ok := s.authenticate(r)
	return ok
}

// refuseAtDoor answers a refusal before routing, counts it, and audits it
// if the source's sample has room.
func (s *Server) refuseAtDoor(w http.ResponseWriter, r *http.Request, reason string, err error) {
	s.Metrics.Unauthenticated(reason)
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	writeError(rec, err)
	s.audit(r, route{method: r.Method, pattern: crewlet.Clean(r.URL.Path)}, Principal{}, rec, err)
}

// unauthenticated is guard's refusal of a request without a valid token:
// counted, and spent from the source's failed authentications.
func (s *Server) unauthenticated(r *http.Request) error {
	reason := refusedBadToken
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || token == "" {
		reason = refusedNoToken
	}
	s.Metrics.Unauthenticated(reason)
	if src := sourceOf(r); limited(src) {
		s.sources.failed(src, s.Org.Now().API.AuthFailuresPerMinute)
	}
	return crewlet.Errorf(crewlet.EUNAUTHORIZED, "no valid bearer token; send Authorization: Bearer <token> (the CLI reads --token, $CREWLET_TOKEN, or the local token file the API mints on its own machine; `crewlet console` there prints a sign-in link for the console)")
}

// sampleDenial completes the audit row of a refusal before authentication
// with its source, and reports whether the source's sample has room for
// it (api.denied_audits_per_minute); one without room is only counted.
func (s *Server) sampleDenial(r *http.Request, e *wire.AuditEntry) bool {
	src := sourceOf(r)
	if !s.sources.audited(src, s.Org.Now().API.DeniedAuditsPerMinute) {
		return false
	}
	e.Principal, e.Role = "-", "-"
	e.Target = clipField(strings.TrimSpace("source=" + src.String() + " " + e.Target))
	return true
}

// localCredentials is the local token's credential, when the process
// minted one (auth.local_token).
func (s *Server) localCredentials() []credential {
	if s.LocalToken == "" {
		return nil
	}
	return []credential{{secret: []byte(s.LocalToken), principal: Principal{Name: config.LocalPrincipal, Role: config.RoleAdmin}}}
}

// hostAllowed reports whether the request's Host names this API: a name in
// api.hosts, the listen address's host, localhost, a loopback address, or
// the address the connection came in on. A rebinding page's Host is its
// own name, which is none of these.
func hostAllowed(r *http.Request, a config.API) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if host == "localhost" || host == a.ListenHost() || slices.Contains(a.Hosts, host) {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	if ip.Unmap().IsLoopback() {
		return true
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		return false
	}
	at, err := netip.ParseAddrPort(local.String())
	return err == nil && at.Addr().Unmap().WithZone("") == ip.Unmap().WithZone("")
}

// quoteHost shows a refused Host header safely: clipped and quoted.
func quoteHost(h string) string {
	return fmt.Sprintf("%q", clipField(crewlet.Clean(h)))
}

// sourceOf is who a request comes from, as far as the door can tell: the
// peer's IP address, an IPv6 one as its /64 (one machine's share). Behind
// a proxy every request is the proxy's.
func sourceOf(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// limited reports whether failed authentications from src are limited:
// from anywhere but this machine. A process here could only lock out the
// CLI beside it, and no limit is needed against guessing a token of 16
// random bytes or more; what its refusals cost is a counter and the
// sampled audit rows.
func limited(src netip.Addr) bool {
	return src.IsValid() && !src.IsLoopback()
}

// clipField cuts s to maxAuditField bytes on a rune boundary, ending in
// "…" when it cut anything.
func clipField(s string) string {
	if len(s) <= maxAuditField {
		return s
	}
	const ellipsis = "…"
	return crewlet.RunePrefix(s, maxAuditField-len(ellipsis)) + ellipsis
}

// sourceTable is what the door remembers of each source, at most
// maxSources of them, the least recently seen forgotten first. Limits come
// from the running config, so an apply changes them for every source.
type sourceTable struct {
	mu    sync.Mutex
	index map[netip.Addr]*list.Element
	order list.List // of *sourceState, most recently seen first
	// audits is every source's sample together.
	audits *rate.Limiter
}

type sourceState struct {
	addr netip.Addr
	// failures are the failed authentications the source may still make;
	// none left, it is refused at the door.
	failures *rate.Limiter
	// audits are the refusals of it the audit log may still take.
	audits *rate.Limiter
}

// blocked reports whether src has no failed authentication left. A source
// the table does not hold has never failed, or not lately; perMinute 0
// blocks none.
func (t *sourceTable) blocked(src netip.Addr, perMinute int) bool {
	if perMinute == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.index[src]
	if !ok {
		return false
	}
	l := e.Value.(*sourceState).failures
	return l != nil && l.Tokens() < 1
}

// failed spends one of src's failed authentications; perMinute 0 spends
// none.
func (t *sourceTable) failed(src netip.Addr, perMinute int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(src)
	if perMinute == 0 {
		st.failures = nil
		return
	}
	perMinuteLimiter(&st.failures, perMinute)
	st.failures.Allow()
}

// audited spends one of src's audit rows, and one of all sources', and
// reports whether there was one to spend.
func (t *sourceTable) audited(src netip.Addr, perMinute int) bool {
	if perMinute == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(src)
	perMinuteLimiter(&st.audits, perMinute)
	perMinuteLimiter(&t.audits, allSourcesAudits*perMinute)
	return st.audits.Allow() && t.audits.Allow()
}

// state is src's state, made when new and moved to the front; t.mu held.
func (t *sourceTable) state(src netip.Addr) *sourceState {
	if t.index == nil {
		t.index = map[netip.Addr]*list.Element{}
	}
	if e, ok := t.index[src]; ok {
		t.order.MoveToFront(e)
		return e.Value.(*sourceState)
	}
	if t.order.Len() >= maxSources {
		oldest := t.order.Back()
		t.order.Remove(oldest)
		delete(t.index, oldest.Value.(*sourceState).addr)
	}
	st := &sourceState{addr: src}
	t.index[src] = t.order.PushFront(st)
	return st
}

// perMinuteLimiter makes *l a bucket of n that refills n a minute, or
// sets an existing one to n.
func perMinuteLimiter(l **rate.Limiter, n int) {
	every := rate.Every(time.Minute / time.Duration(n))
	switch {
	case *l == nil:
		*l = rate.NewLimiter(every, n)
	case (*l).Burst() != n:
		(*l).SetLimit(every)
		(*l).SetBurst(n)
	}
}

// sameOrigin reports whether a request's Origin is the API's own: the host
// it was called by, which the door has checked is one of the API's names.
// The console's requests come from there.
func sameOrigin(r *http.Request) bool {
	u, err := url.Parse(r.Header.Get("Origin"))
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}
