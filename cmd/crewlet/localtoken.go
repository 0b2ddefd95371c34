package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet/internal/config"
)

// The local token is a per-boot admin token in a file only crewlet's user
// can read, minted by default when no token is configured
// (config.Auth.MintsLocalToken): the API refuses a caller that cannot read
// it, and the CLI on this machine reads it by itself
// (docs/operations.md, "Authentication and authority").

// listenAPI opens the API's listener, then mints the local token unless
// the org configures tokens or opted out (auth.anonymous), returning it and
// its file (minted after the listen, so a second process that cannot
// listen leaves the first one's token alone). On a terminal it prints the
// console's sign-in link once, to the person who started it; never to the
// log. An org that opted out is warned at every start that any local
// process can act as admin.
func listenAPI(org *config.Config, log *slog.Logger, terminal io.Writer) (ln net.Listener, token, tokenFile string, err error) {
	if ln, err = net.Listen("tcp", org.API.Listen); err != nil {
		return nil, "", "", fmt.Errorf("api: listen on %s: %w", org.API.Listen, err)
	}
	switch {
	case org.Auth.MintsLocalToken():
		tokenFile, err = localTokenFile(org)
		if err == nil {
			token, err = mintLocalToken(tokenFile)
		}
		if err != nil {
			ln.Close()
			return nil, "", "", err
		}
		log.Info("api_local_token", "file", tokenFile, "hint", "the CLI on this machine reads it by itself; `crewlet console` prints the console's sign-in link; other clients send it as a bearer token")
		if terminal != nil {
			fmt.Fprintf(terminal, "\nconsole sign-in link (this boot's local token; keep it to yourself):\n  %s\n\n", signInLink(apiBase(org.API), token))
		}
	case org.Auth.Anonymous:
		log.Warn("api_anonymous", "warning", "auth.anonymous is true: any process on this machine, a seat's own tools included, can call the API as admin",
			"hint", "remove auth.anonymous (the API then mints a local token the CLI here reads by itself), or configure auth.tokens")
	}
	return ln, token, tokenFile, nil
}

// terminalOf is w when it is a terminal, else nil: a secret meant for the
// person who started the process goes to their terminal, never into a log
// file or journal that stderr may be.
func terminalOf(w *os.File) io.Writer {
	if info, err := w.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
		return w
	}
	return nil
}

// apiBase is the URL a client on this machine reaches the API at.
func apiBase(a config.API) string {
	scheme := "http"
	if a.TLS.CertFile != "" {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(a.Listen)
	if err != nil {
		return scheme + "://" + a.Listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// signInLink is the console's address at base with token in the URL
// fragment, which a browser never sends to the server (so it stays out of
// request logs and proxies); the console moves it into the tab's storage
// and drops it from the address bar.
func signInLink(base, token string) string {
	return strings.TrimRight(base, "/") + "/ui/#token=" + url.QueryEscape(token)
}

// runConsole prints the console's sign-in link for the token the CLI would
// send: --token, $CREWLET_TOKEN, or the local token of an API on this
// machine, once the API took it (GET /me), so a link never carries a token
// that would only show the sign-in form.
func (c *cli) consoleCmd() *cobra.Command {
	return &cobra.Command{
		Use: "console",
		Short: "print the console's sign-in link for the token, once the API takes it (GET /me); " +
			"the token rides in the URL fragment, which the browser never sends",
		Example: "  crewlet console\n  crewlet console --api https://crewlet.example.com --token \"$CREWLET_TOKEN\"",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.console(cmd.Context())
		},
	}
}

func (c *cli) console(ctx context.Context) error {
	client := c.client()
	if client.err != nil {
		return client.err
	}
	if client.token == "" {
		return fmt.Errorf("no token to sign in with: the API at %s has minted no local token on this machine (is it running here, with no auth.tokens?); pass --token or set CREWLET_TOKEN", client.base)
	}
	if err := client.call(ctx, http.MethodGet, "/me", nil, nil); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, signInLink(client.base, client.token))
	return nil
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
	if err != nil || !config.LoopbackHost(u.Hostname()) {
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
