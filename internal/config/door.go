package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// APITLS are the certificate and key the API serves HTTPS with
// (docs/operations.md, "Authentication and authority"). Both or neither.
type APITLS struct {
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
}

// Enabled reports whether the API serves HTTPS.
func (t APITLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Defaults of the door's limits.
const (
	DefaultAuthFailuresPerMinute = 30
	DefaultDeniedAuditsPerMinute = 5
)

// LocalPrincipal is the principal of the local token (auth.local_token):
// an admin, so no configured token may take its name.
const LocalPrincipal = "local"

// LocalTokenPath is where a server whose API listens on port mints its
// local token when auth.local_token_file is unset, and where the CLI looks
// for it when it calls an API on this machine at that port:
// $XDG_CONFIG_HOME/crewlet/local-token-PORT (os.UserConfigDir).
func LocalTokenPath(port string) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("auth.local_token: no user config directory to keep the token in (%v); set auth.local_token_file", err)
	}
	return filepath.Join(dir, "crewlet", "local-token-"+port), nil
}

// hostName is a DNS name as api.hosts takes it: no scheme, port or path.
var hostName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

// maxHosts bounds api.hosts.
const maxHosts = 64

// checkDoor checks the door's keys: the Host names, TLS (a loadable pair;
// required beyond loopback unless api.insecure_http), the per-source
// limits and the local token.
func checkDoor(add addFunc, c *Config) {
	a := c.API
	if len(a.Hosts) > maxHosts {
		add("api.hosts", "%d names; at most %d", len(a.Hosts), maxHosts)
	}
	for i, h := range a.Hosts {
		if _, err := netip.ParseAddr(h); err != nil && !hostName.MatchString(h) {
			add(fmt.Sprintf("api.hosts[%d]", i), "%q is not a lowercase host name or IP address; write the name alone, without scheme, port or path (e.g. crewlet.example.com)", h)
		}
	}
	switch t := a.TLS; {
	case (t.CertFile == "") != (t.KeyFile == ""):
		add("api.tls", "cert_file and key_file go together; set both or neither")
	case t.Enabled():
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			// The key file's content never reaches the message.
			add("api.tls", "cannot load the pair cert_file %s, key_file %s: %s", t.CertFile, t.KeyFile, strings.SplitN(err.Error(), ":", 2)[0])
		}
		if a.InsecureHTTP {
			add("api.insecure_http", "true, but api.tls is set, so the API serves HTTPS; remove one of them")
		}
	case !a.InsecureHTTP && !LoopbackListen(a.Listen):
		add("api.tls", "unset, but api.listen %s is reachable beyond this machine: bearer tokens would cross the network in clear text; set api.tls.cert_file and api.tls.key_file, or api.insecure_http: true when a proxy in front terminates TLS", a.Listen)
	}
	if n := a.AuthFailuresPerMinute; n < 0 || n > 100000 {
		add("api.auth_failures_per_minute", "%d is out of range; must be between 0 (no limit) and 100000", n)
	}
	if n := a.DeniedAuditsPerMinute; n < 0 || n > 1000 {
		add("api.denied_audits_per_minute", "%d is out of range; must be between 0 (none audited, all counted) and 1000", n)
	}
	switch {
	case c.Auth.Anonymous && len(c.Auth.Tokens) > 0:
		add("auth.anonymous", "true, but auth.tokens names %d tokens, which the API then requires; remove auth.anonymous", len(c.Auth.Tokens))
	case c.Auth.Anonymous && c.Auth.LocalToken:
		add("auth.anonymous", "true, but auth.local_token asks for a token; keep one of the two")
	}
	if f := c.Auth.LocalTokenFile; f != "" {
		switch {
		case !c.Auth.MintsLocalToken():
			add("auth.local_token_file", "%q is set but no local token is minted (auth.tokens is set without auth.local_token: true, or auth.anonymous is true); remove it", f)
		case !filepath.IsAbs(f):
			add("auth.local_token_file", "%q is not an absolute path; name the file from /", f)
		}
	}
	if c.Auth.MintsLocalToken() {
		for i, t := range c.Auth.Tokens {
			if t.Name == LocalPrincipal {
				add(fmt.Sprintf("auth.tokens[%d].name", i), "%q is the local token's principal (auth.local_token); name this token otherwise", t.Name)
			}
		}
	}
}

// ListenHost is the host of api.listen, as a Host header names it; empty
// for an unspecified address (":8080", "0.0.0.0:8080").
func (a API) ListenHost() string {
	host, _, err := net.SplitHostPort(a.Listen)
	if err != nil {
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return ""
	}
	return strings.ToLower(host)
}
