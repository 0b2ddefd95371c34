package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testenv/testcert"
)

// localTokenOrg has no tokens but the local one, and serves HTTPS.
const localTokenOrg = `
company: { name: %s }
api: { listen: "%s", tls: { cert_file: "%s", key_file: "%s" } }
auth: { local_token: true }
mailbox: { key_prefix: %s }
seats: [ { handle: alice, kind: human } ]
`

// `crewlet api` with auth.local_token and api.tls: it serves HTTPS, mints
// a token into a 0600 file in a 0700 folder, and refuses a request without
// it; the CLI, given only --api and the CA, reads the token by itself and
// acts as admin, unchanged; without the CA it does not trust the server;
// the file goes when the process does.
func TestLocalTokenAndTLS(t *testing.T) {
	stack := testenv.Stack(t)
	suffix := testenv.Suffix()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("CREWLET_TOKEN", "")
	t.Setenv("CREWLET_CA", "")
	t.Setenv("CREWLET_PG_URL", testenv.Database(t))
	t.Setenv("CREWLET_TEMPORAL_ADDRESS", stack.Temporal)
	cert := testcert.New(t)
	certFile, keyFile := cert.Files(t)
	addr := freeAddr(t)
	org := filepath.Join(t.TempDir(), "org.yaml")
	doc := fmt.Sprintf(localTokenOrg, "door"+suffix, addr, certFile, keyFile, "door"+suffix)
	if err := os.WriteFile(org, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	var serveErr error
	var log testenv.Log
	go func() {
		defer close(served)
		serveErr = run(ctx, []string{"api", "--config", org}, io.Discard, &log)
	}()
	t.Cleanup(func() {
		stop()
		<-served
	})
	base := "https://" + addr
	trusting, err := apiHTTPClient(certFile)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "crewlet api ready", func() error {
		select {
		case <-served:
			t.Fatalf("api ended: %v\n%s", serveErr, log.String())
		default:
		}
		resp, err := trusting.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: HTTP %d", resp.StatusCode)
		}
		return nil
	})

	_, port, _ := strings.Cut(addr, ":")
	file, err := config.LocalTokenPath(port)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{file: 0o600, filepath.Dir(file): 0o700} {
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want {
			t.Fatalf("%s: %v, %v; want mode %o", path, info, err, want)
		}
	}
	if strings.Contains(log.String(), "api_anonymous") || !strings.Contains(log.String(), "api_local_token") {
		t.Fatalf("log %s; want api_local_token and no anonymous warning", log.String())
	}

	resp, err := trusting.Get(base + "/audit")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /audit without the local token: %d; want 401", resp.StatusCode)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"audit", "--api", base, "--ca", certFile}, &out, io.Discard); err != nil {
		t.Fatalf("crewlet audit with the local token: %v", err)
	}
	if !strings.Contains(out.String(), "GET /audit") {
		t.Fatalf("crewlet audit printed %q; want the refused GET /audit", out.String())
	}
	err = run(ctx, []string{"audit", "--api", base}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("crewlet audit without --ca: %v; want the server's certificate refused", err)
	}

	stop()
	<-served
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the local token file after the process stopped: %v; want it gone", err)
	}
}

// listenOpenOrg opens the API of an org with no tokens, and auth beside,
// and returns what it minted and what it wrote to its log and terminal.
func listenOpenOrg(t *testing.T, auth string) (token, file string, log, terminal *bytes.Buffer) {
	t.Helper()
	org, err := config.Parse([]byte("company: { name: open }\napi: { listen: \"127.0.0.1:0\" }\n" + auth + "seats: [ { handle: alice, kind: human } ]\n"))
	if err != nil {
		t.Fatal(err)
	}
	log, terminal = &bytes.Buffer{}, &bytes.Buffer{}
	ln, token, file, err := listenAPI(org, slog.New(slog.NewTextHandler(log, nil)), terminal)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return token, file, log, terminal
}

// With no token configured the API mints a local token all the same: no
// caller is admin without one. On a terminal it prints the console's
// sign-in link with the token in the fragment; the log names the file,
// never the token.
func TestNoTokensConfiguredMintsALocalTokenAndPrintsTheSignInLinkOnATerminal(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	token, file, log, terminal := listenOpenOrg(t, "")
	data, err := os.ReadFile(file)
	if err != nil || token == "" || strings.TrimSpace(string(data)) != token {
		t.Fatalf("token %q, file %s holds %q (%v); want the minted token in it", token, file, data, err)
	}
	if strings.Contains(log.String(), "api_anonymous") || strings.Contains(log.String(), token) {
		t.Fatalf("log %s; want no anonymous warning and no token", log.String())
	}
	if want := "http://127.0.0.1:0/ui/#token=" + token; !strings.Contains(terminal.String(), want) {
		t.Fatalf("terminal got %q; want the sign-in link %s", terminal.String(), want)
	}
}

// Opting out of every token (auth.anonymous) mints none, and warns at
// start that any local process, a seat's own tools included, can act as
// admin.
func TestAnonymousOptOutWarnsAtStart(t *testing.T) {
	token, file, log, terminal := listenOpenOrg(t, "auth: { anonymous: true }\n")
	if token != "" || file != "" || terminal.Len() != 0 || !strings.Contains(log.String(), "level=WARN msg=api_anonymous") || !strings.Contains(log.String(), "a seat's own tools included") {
		t.Fatalf("token %q, file %q, terminal %q, log %s; want no token, no link and the warning", token, file, terminal.String(), log.String())
	}
}

// The metrics listener with metrics.token_env serves a scrape that brings
// the token and refuses one without it or with another, so metrics and
// profiles on an address beyond this machine are not anyone's.
func TestMetricsListenerRefusesAScrapeWithoutItsToken(t *testing.T) {
	const token = "9f86d081884c7d659a2feaa0c55ad015"
	srv := httptest.NewServer(bearerOnly(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "crewlet_up 1\n")
	})))
	defer srv.Close()
	for bearer, want := range map[string]int{"": http.StatusUnauthorized, "wrong-" + token: http.StatusUnauthorized, token: http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("scrape with bearer %q: %d; want %d", bearer, resp.StatusCode, want)
		}
	}
}
