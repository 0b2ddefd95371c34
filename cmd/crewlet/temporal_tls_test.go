package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/testenv/testcert"
)

// tlsFront is a TLS server in front of the dev Temporal server: it ends TLS
// (offering h2, as a gRPC server does) and passes the bytes on, so a client
// that reaches the dev server through it spoke TLS. It returns its address
// and the PEM of the CA that signed its certificate.
func tlsFront(t *testing.T, backend string) (string, []byte) {
	t.Helper()
	cert := testcert.New(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { _, _ = io.Copy(b, c) }()
				_, _ = io.Copy(c, b)
			}()
		}
	}()
	return ln.Addr().String(), cert.PEM
}

// crewlet reaches a Temporal server that takes TLS only with temporal.tls:
// with the CA that signed the server's certificate it connects; without
// TLS, or trusting another CA, it does not.
func TestTemporalOverTLS(t *testing.T) {
	t.Parallel()
	addr, caPEM := tlsFront(t, testenv.Stack(t).Temporal)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, otherPEM := tlsFront(t, testenv.Stack(t).Temporal)
	otherFile := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherFile, otherPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		tls  config.TemporalTLS
		ok   bool
	}{
		{"trusting its CA", config.TemporalTLS{Enabled: true, CAFile: caFile}, true},
		{"plaintext", config.TemporalTLS{}, false},
		{"trusting another CA", config.TemporalTLS{Enabled: true, CAFile: otherFile}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			org := &config.Config{Temporal: config.Temporal{Address: addr, Namespace: "default", TLS: tt.tls}}
			opts, err := temporalOptions(org)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := client.DialContext(ctx, opts)
			if err == nil {
				_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
				c.Close()
			}
			if (err == nil) != tt.ok {
				t.Fatalf("connect %s: %v; want ok=%v", tt.name, err, tt.ok)
			}
		})
	}
}

// A key file that is not there, a cert without its key, and an unset API
// key variable are refused naming the key; a key's value is never shown.
func TestTemporalSecurityConfigErrors(t *testing.T) {
	t.Setenv("CREWLET_TEST_TEMPORAL_KEY", "")
	for _, tt := range []struct {
		t    config.Temporal
		want string
	}{
		{config.Temporal{TLS: config.TemporalTLS{Enabled: true, CAFile: "/nonexistent/ca.pem"}}, "temporal.tls.ca_file: cannot read /nonexistent/ca.pem"},
		{config.Temporal{TLS: config.TemporalTLS{Enabled: true, CertFile: "c.pem"}}, "temporal.tls: cert_file and key_file go together"},
		{config.Temporal{TLS: config.TemporalTLS{CAFile: "ca.pem"}}, "temporal.tls.enabled is false"},
		{config.Temporal{APIKeyEnv: "CREWLET_TEST_TEMPORAL_KEY"}, "temporal.api_key_env: environment variable CREWLET_TEST_TEMPORAL_KEY is not set"},
	} {
		_, err := temporalOptions(&config.Config{Temporal: tt.t})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("temporalOptions(%+v) = %v; want %q", tt.t, err, tt.want)
		}
	}
	t.Setenv("CREWLET_TEST_TEMPORAL_KEY", "sk-temporal-secret")
	opts, err := temporalOptions(&config.Config{Temporal: config.Temporal{APIKeyEnv: "CREWLET_TEST_TEMPORAL_KEY"}})
	if err != nil || opts.Credentials == nil {
		t.Fatalf("with the key set: %+v, %v; want credentials", opts.Credentials, err)
	}
}
