// Package testenv gives tests their own slice of the real dev stack: a fresh
// Postgres database, a Redis key prefix, the Temporal address. The stack comes
// from `deploy/dev/stack.sh up`; its env (.dev/env) must be loaded, as the
// test task does.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet/internal/store"
)

// Env names the stack's services.
type Env struct {
	PostgresURL string
	RedisURL    string
	Temporal    string
}

// Stack returns the dev stack's addresses, failing the test with what to do
// when they are not set: a test that silently skipped could never fail.
func Stack(t testing.TB) Env {
	t.Helper()
	e := Env{
		PostgresURL: os.Getenv("CREWLET_PG_URL"),
		RedisURL:    os.Getenv("CREWLET_REDIS_URL"),
		Temporal:    os.Getenv("CREWLET_TEMPORAL_ADDRESS"),
	}
	if e.PostgresURL == "" || e.RedisURL == "" || e.Temporal == "" {
		t.Fatal("CREWLET_PG_URL, CREWLET_REDIS_URL and CREWLET_TEMPORAL_ADDRESS must be set: run the tests with `task test`, or `deploy/dev/stack.sh up` then `set -a; . .dev/env; set +a`")
	}
	return e
}

// Suffix returns a short random suffix for names a test owns.
func Suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Database creates an empty database for the test, drops it when the test
// ends, and returns its URL.
func Database(t testing.TB) string {
	t.Helper()
	admin := Stack(t).PostgresURL
	name := "crewlet_test_" + Suffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse CREWLET_PG_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Eventually polls cond every 50 ms until it returns nil or timeout passes,
// then fails the test with cond's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Store opens the database at url, applies the migrations, and closes it
// when the test ends.
func Store(t testing.TB, url string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}

// Log is a log the code under test writes from its goroutines while the
// test reads it.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
