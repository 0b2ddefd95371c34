// Package push delivers A2A push notifications: which webhook URLs may be
// posted to, how a notification is signed, and the dispatcher that posts
// what the outbox owes
// (docs/operations.md, "Push notifications").
package push

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
)

// Bounds of a task's webhooks.
const (
	MaxConfigsPerTask = 10
	MaxURLBytes       = 2048
	// MaxSecretBytes bounds a token and authentication credentials.
	MaxSecretBytes = 4096
	// lookupTimeout bounds resolving a webhook's host when it is set.
	lookupTimeout = 5 * time.Second
)

// The headers of a notification besides Content-Type and Authorization.
const (
	// TokenHeader carries the config's token, as A2A names it.
	TokenHeader = "X-A2A-Notification-Token"
	// EventIDHeader names the notification: the same at every attempt, so
	// a receiver drops one it has had.
	EventIDHeader = "X-Crewlet-Event-Id"
	// TimestampHeader is the attempt's time, in Unix seconds.
	TimestampHeader = "X-Crewlet-Timestamp"
	// SignatureHeader is "sha256=" and the hex HMAC-SHA256, keyed by the
	// config's token, of the timestamp, ".", and the body.
	SignatureHeader = "X-Crewlet-Signature"
	// ContentType is A2A's.
	ContentType = "application/a2a+json"
)

// Sign is the signature of a notification's body sent at timestamp, keyed
// by token, as SignatureHeader carries it.
func Sign(token, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte(timestamp))
	mac.Write([]byte("."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// NewToken is a token for a config set without one: 32 random bytes.
func NewToken() string {
	return base64.RawURLEncoding.EncodeToString(randomBytes(32))
}

// NewConfigID is the id of a config set without one.
func NewConfigID() string { return "push-" + hex.EncodeToString(randomBytes(6)) }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return b
}

// internalKind is the kind of internal address ip is, with its article ("a
// private"); "" for a public one.
func internalKind(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return "a loopback"
	case ip.IsPrivate():
		return "a private"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "a link-local"
	case ip.IsUnspecified():
		return "an unspecified"
	case ip.IsMulticast():
		return "a multicast"
	case sharedSpace.Contains(ip):
		return "a carrier-grade NAT"
	}
	return ""
}

// sharedSpace is RFC 6598's, which a cloud's internal services use too.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// Allowed reports whether raw starts with an entry of allow (the org's
// a2a.push.allow): the same scheme and host, and a path at or below the
// entry's.
func Allowed(raw string, allow []string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	for _, entry := range allow {
		e, err := url.Parse(entry)
		if err != nil || !strings.EqualFold(e.Scheme, u.Scheme) || !strings.EqualFold(e.Host, u.Host) {
			continue
		}
		prefix := e.EscapedPath()
		if path := u.EscapedPath(); prefix == "" || path == prefix || strings.HasPrefix(path, strings.TrimSuffix(prefix, "/")+"/") {
			return true
		}
	}
	return false
}

// CheckURL refuses a webhook URL crewlet will not post to: not http(s),
// too long, holding credentials, or naming a host that does not resolve
// or resolves to an internal address, unless allow lets it. The error
// says what to do.
func CheckURL(ctx context.Context, raw string, allow []string) error {
	if raw == "" {
		return crewlet.Errorf(crewlet.EINVALID, "the push notification config has no url; send the http or https URL of your webhook")
	}
	if err := crewlet.CheckText("url", raw, MaxURLBytes); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return crewlet.Errorf(crewlet.EINVALID, "url %q is not an http or https URL; send the URL of your webhook", crewlet.OneLine(raw, 128))
	case u.User != nil:
		return crewlet.Errorf(crewlet.EINVALID, "url must not hold credentials; send them as the config's authentication {scheme, credentials}")
	}
	if Allowed(raw, allow) {
		return nil
	}
	host := u.Hostname()
	var ips []netip.Addr
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return crewlet.Errorf(crewlet.EINVALID, "url's host %q does not resolve; send a webhook URL whose host this server can reach", host)
	}
	for _, ip := range ips {
		if kind := internalKind(ip); kind != "" {
			return crewlet.Errorf(crewlet.EINVALID, "url's host %q is %s, %s address: crewlet posts notifications to public addresses only, so that a webhook cannot reach its own network; use a public URL, or ask the operator to list a prefix of it in a2a.push.allow", host, ip, kind)
		}
	}
	return nil
}

// errInternal is a dial refused to an internal address.
var errInternal = errors.New("refused")

// checkDial refuses to connect to an internal address: the delivery-time
// check, made on the address dialed, so a name that resolves elsewhere
// since the config was set (or between a check and the dial) gains
// nothing.
func checkDial(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w: not an address", address, errInternal)
	}
	if kind := internalKind(ap.Addr()); kind != "" {
		return fmt.Errorf("dial %s: %w: %s address, not in a2a.push.allow", address, errInternal, kind)
	}
	return nil
}

// CheckHeaderValue refuses a value a notification sends in a header (a
// token, an authentication scheme or credentials) that is too long or
// could not be one.
func CheckHeaderValue(field, s string, max int) error {
	if err := crewlet.CheckText(field, s, max); err != nil {
		return err
	}
	if strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
		return crewlet.Errorf(crewlet.EINVALID, "%s holds a control character, which no HTTP header carries; remove it", field)
	}
	return nil
}
