// Package testenv gives tests their own slice of the real dev stack: a fresh
// Postgres database, a Redis key prefix, the Temporal address. The stack comes
// from `deploy/dev/stack.sh up`; its env (.dev/env) must be loaded, as the
// test task does.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/migrations"
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
	return database(t, Stack(t).PostgresURL, "")
}

// database creates a database with the given CREATE DATABASE options and
// drops it when the test ends.
func database(t testing.TB, admin, options string) string {
	t.Helper()
	name := "crewlet_test_" + Suffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+options); err != nil {
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

// MigratedDatabase is Database with crewlet's migrations already applied:
// a copy of a template database that holds them, which is much quicker than
// migrating each test's database. The template is named after the
// migrations' content, so every test binary (and every run) with the same
// migrations shares it, and a changed migration gets a new one.
func MigratedDatabase(t testing.TB) string {
	t.Helper()
	admin := Stack(t).PostgresURL
	templateOnce.Do(func() { templateName, templateErr = migratedTemplate(admin) })
	if templateErr != nil {
		t.Fatalf("migrated template database: %v", templateErr)
	}
	return database(t, admin, " TEMPLATE "+templateName)
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// migratedTemplate returns the template database for the current
// migrations, creating it when no test binary has yet. It is built under a
// name of its own and renamed when complete, so a binary racing another
// never copies a half-migrated one, nor holds a connection to the template
// while another copies it.
func migratedTemplate(admin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := sha256.New()
	err := fs.WalkDir(migrations.Files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := migrations.Files.ReadFile(path)
		h.Write([]byte(path))
		h.Write(data)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read migrations: %w", err)
	}
	name := "crewlet_template_" + hex.EncodeToString(h.Sum(nil))[:16]
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look for %s: %w", name, err)
	}
	if exists {
		return name, nil
	}
	building := name + "_" + Suffix()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", fmt.Errorf("create %s: %w", building, err)
	}
	drop := func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
	}
	u, err := url.Parse(admin)
	if err != nil {
		drop()
		return "", fmt.Errorf("parse CREWLET_PG_URL: %w", err)
	}
	u.Path = "/" + building
	st, err := store.Open(ctx, u.String())
	if err != nil {
		drop()
		return "", err
	}
	_, err = st.Migrate(ctx)
	st.Close()
	if err != nil {
		drop()
		return "", fmt.Errorf("migrate %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		drop()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: another binary finished first
			return name, nil
		}
		return "", fmt.Errorf("rename %s: %w", building, err)
	}
	return name, nil
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

// SeatAtEpoch gives handle an agent seat row at epoch, as that many
// tenures' Attach would: a turn opens only at its seat's current epoch.
func SeatAtEpoch(t testing.TB, ctx context.Context, st *store.Store, handle string, epoch int64) {
	t.Helper()
	if err := st.EnsureSeat(ctx, handle, "worker", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	for {
		row, err := st.Seat(ctx, handle)
		switch {
		case err != nil:
			t.Fatal(err)
		case row.Epoch > epoch:
			t.Fatalf("seat %s is at epoch %d already; want %d", handle, row.Epoch, epoch)
		case row.Epoch == epoch:
			return
		}
		if _, err := st.Attach(ctx, handle, "n1:aa", "n1"); err != nil {
			t.Fatal(err)
		}
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

// WantErrorType fails unless err is a non-retryable Temporal application
// error of the given type: how an activity refuses (fenced, refused,
// panicked) for good.
func WantErrorType(t testing.TB, what string, err error, errType string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("%s: got error %v (%T); want a non-retryable ApplicationError of type %q", what, err, err, errType)
	}
	if appErr.Type() != errType || !appErr.NonRetryable() {
		t.Fatalf("%s: got ApplicationError type %q non-retryable=%v (%v); want type %q non-retryable=true",
			what, appErr.Type(), appErr.NonRetryable(), err, errType)
	}
}
