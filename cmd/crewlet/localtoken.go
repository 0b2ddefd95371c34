package main

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/crewlet/crewlet/internal/config"
)

// The local token (auth.local_token) is a per-boot admin token in a file
// only crewlet's user can read: the API refuses a caller that cannot read
// it, and the CLI on this machine reads it by itself
// (docs/operations.md, "Authentication and authority").

// listenAPI opens the API's listener, then mints the local token when
// auth.local_token is on, returning it and its file (minted after the
// listen, so a second process that cannot listen leaves the first one's
// token alone); with no token configured at all it warns that any local
// process can act as admin.
func listenAPI(org *config.Config, log *slog.Logger) (ln net.Listener, token, tokenFile string, err error) {
	if ln, err = net.Listen("tcp", org.API.Listen); err != nil {
		return nil, "", "", fmt.Errorf("api: listen on %s: %w", org.API.Listen, err)
	}
	switch {
	case org.Auth.LocalToken:
		tokenFile, err = localTokenFile(org)
		if err == nil {
			token, err = mintLocalToken(tokenFile)
		}
		if err != nil {
			ln.Close()
			return nil, "", "", err
		}
		log.Info("api_local_token", "file", tokenFile, "hint", "the CLI on this machine reads it by itself; other clients send it as a bearer token")
	case len(org.Auth.Tokens) == 0:
		log.Warn("api_anonymous", "warning", "auth.tokens is empty and auth.local_token is off: any process on this machine, a seat's own tools included, can call the API as admin",
			"hint", "set auth.local_token: true (or auth.tokens) on a machine you share")
	}
	return ln, token, tokenFile, nil
}

// localTokenFile is where the org's API keeps its local token.
func localTokenFile(org *config.Config) (string, error) {
	if f := org.Auth.LocalTokenFile; f != "" {
		return f, nil
	}
	_, port, err := net.SplitHostPort(org.API.Listen)
	if err != nil {
		return "", fmt.Errorf("auth.local_token: api.listen %q has no port to name the token file by; set auth.local_token_file", org.API.Listen)
	}
	return config.LocalTokenPath(port)
}

// mintLocalToken writes a new random token to path, readable by this user
// only, in a folder no one else may write to (or the file could be swapped
// for another's), and returns it.
func mintLocalToken(path string) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("auth.local_token: create %s: %w", dir, err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("auth.local_token: %w", err)
	}
	if info.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("auth.local_token: %s is writable by other users (mode %o); chmod go-w it or set auth.local_token_file elsewhere", dir, info.Mode().Perm())
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b[:])
	// Written whole under another name first, so a reader never sees half
	// a token; CreateTemp makes the file 0600.
	tmp, err := os.CreateTemp(dir, ".local-token-*")
	if err != nil {
		return "", fmt.Errorf("auth.local_token: %w", err)
	}
	_, werr := tmp.WriteString(token + "\n")
	if err := errors.Join(werr, tmp.Close(), os.Rename(tmp.Name(), path)); err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("auth.local_token: write %s: %w", path, err)
	}
	return token, nil
}

// readLocalToken is the local token of the API at base when it runs on
// this machine and minted one: "" when base is not a loopback address or
// no token file is there.
func readLocalToken(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || !loopbackHost(u.Hostname()) {
		return "", nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	path, err := config.LocalTokenPath(port)
	if err != nil {
		return "", nil
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read the API's local token: %w; pass --token or CREWLET_TOKEN instead", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// loopbackHost reports whether host is this machine by name or address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// apiHTTPClient is the CLI's HTTP client: for an https --api, trusting the
// CA in caFile when set (a private CA), else the system's roots.
func apiHTTPClient(caFile string) (*http.Client, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	if caFile == "" {
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca: %s holds no PEM certificate", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	c.Transport = t
	return c, nil
}
