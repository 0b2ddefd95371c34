package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet/internal/store"
)

// Postgres is a Postgres server of one test's own, for a test that stops
// and starts it: the shared stack's server is never stopped, as every
// package's tests run on it side by side.
type Postgres struct {
	t    testing.TB
	data string
	log  string
	port int
	// frozen is set between Freeze and Thaw.
	frozen bool
	// URL is a migrated database on this server.
	URL string
}

// OwnPostgres initializes and starts a Postgres server on a free loopback
// port, with a migrated database, and stops it (and removes its files) when
// the test ends. Run as root, the server runs as the postgres OS user, as
// the dev stack's does.
func OwnPostgres(t testing.TB) *Postgres {
	t.Helper()
	dir, err := os.MkdirTemp("", "crewlet-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The postgres OS user must reach its data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := &Postgres{t: t, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "postgres.log"), port: port}
	if err := os.Mkdir(p.data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := chownToPostgres(dir, p.data); err != nil {
		t.Fatal(err)
	}
	p.run("initdb", "-D", p.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C")
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nmax_connections = 200\n", port, dir)
	f, err := os.OpenFile(filepath.Join(p.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	t.Cleanup(func() {
		if p.frozen {
			p.Thaw()
		}
		// Already down when the test failed while it was stopped: nothing to do.
		_ = p.command("pg_ctl", "-D", p.data, "-w", "-m", "immediate", "stop").Run()
	})
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/crewlet?sslmode=disable", port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
	if err != nil {
		t.Fatalf("connect to the test's own postgres: %v", err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE crewlet")
	admin.Close(ctx)
	if err != nil {
		t.Fatalf("create database on the test's own postgres: %v", err)
	}
	st, err := store.Open(ctx, p.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate the test's own postgres: %v", err)
	}
	return p
}

// Stop stops the server (fast shutdown: sessions are cut, as in an
// outage), and returns once it is down.
func (p *Postgres) Stop() { p.pgCtl("-m", "fast", "stop") }

// Start starts the server and returns once it accepts connections.
func (p *Postgres) Start() { p.pgCtl("-l", p.log, "-t", "60", "start") }

// Freeze stops every process of the server with SIGSTOP, as a server that
// hangs rather than refuses (a network that drops packets, a failover in
// progress): connections stay open and every query waits. Thaw resumes it.
func (p *Postgres) Freeze() {
	p.signalAll(syscall.SIGSTOP)
	p.frozen = true
}

// Thaw resumes a frozen server.
func (p *Postgres) Thaw() {
	p.signalAll(syscall.SIGCONT)
	p.frozen = false
}

// signalAll signals the postmaster (its pid is the first line of
// postmaster.pid) and every process it started.
func (p *Postgres) signalAll(sig syscall.Signal) {
	p.t.Helper()
	data, err := os.ReadFile(filepath.Join(p.data, "postmaster.pid"))
	if err != nil {
		p.t.Fatalf("read postmaster.pid: %v", err)
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		p.t.Fatalf("postmaster.pid: %v", err)
	}
	pids := []int{postmaster}
	for _, c := range Children(postmaster) {
		pids = append(pids, c.PID)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			p.t.Fatalf("signal postgres process %d: %v", pid, err)
		}
	}
}

func (p *Postgres) pgCtl(args ...string) {
	p.t.Helper()
	p.run("pg_ctl", append([]string{"-D", p.data, "-w"}, args...)...)
}

// run runs a Postgres program and fails the test if it fails.
func (p *Postgres) run(program string, args ...string) {
	p.t.Helper()
	if out, err := p.command(program, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(p.log)
		p.t.Fatalf("%s %v: %v\n%s\n%s", program, args, err, out, log)
	}
}

// command is a Postgres program's command, as the postgres OS user when
// this is root (Postgres refuses to run as root).
func (p *Postgres) command(program string, args ...string) *exec.Cmd {
	bin, err := postgresBin(program)
	if err != nil {
		p.t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

// postgresBin finds a Postgres program on PATH or in Debian's versioned
// directories, the newest first.
func postgresBin(program string) (string, error) {
	if bin, err := exec.LookPath(program); err == nil {
		return bin, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + program)
	if len(found) == 0 {
		return "", fmt.Errorf("%s not found: install postgresql (apt-get install -y postgresql)", program)
	}
	sort.Slice(found, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi > vj
	})
	return found[0], nil
}

// chownToPostgres hands the paths to the postgres OS user when this is
// root; otherwise the server runs as this user and they are its already.
func chownToPostgres(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs a 'postgres' OS user to own a test's Postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, path := range paths {
		if err := os.Chown(path, uid, gid); err != nil {
			return err
		}
	}
	return nil
}
