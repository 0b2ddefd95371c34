package testenv

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// Temporal is a Temporal dev server of one test's own, for a test that
// kills and restarts it: the shared stack's server is never stopped, as
// every package's tests run on it side by side. It is in-memory, as the
// dev stack's is, so a restart brings it back empty: the same as a
// namespace recreated or a cluster restored from an empty backup.
type Temporal struct {
	t    testing.TB
	bin  string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	// db is the state's file, "" in memory; dir holds it and its backups.
	db, dir string
	// Addr is the server's frontend, host:port; its namespace is "default".
	Addr string
}

// OwnTemporal starts a Temporal dev server on a free loopback port, with
// the dev stack's dynamic config and search attributes
// (temporal-config/, as deploy/dev/stack.sh passes them), and kills it when
// the test ends. It holds its state in memory: Start after Kill brings it
// back empty.
func OwnTemporal(t testing.TB) *Temporal {
	t.Helper()
	return ownTemporal(t, false)
}

// OwnTemporalOnDisk is OwnTemporal with its state in a SQLite file, so
// that it survives Kill and can be backed up and restored (Backup,
// Restore).
func OwnTemporalOnDisk(t testing.TB) *Temporal {
	t.Helper()
	return ownTemporal(t, true)
}

func ownTemporal(t testing.TB, onDisk bool) *Temporal {
	t.Helper()
	bin, err := temporalBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{"--ip", "127.0.0.1", "--port", strconv.Itoa(port), "--headless", "--log-level", "warn"}
	db := ""
	if onDisk {
		db = filepath.Join(dir, "temporal.db")
		args = append(args, "--db-filename", db)
	}
	_, file, _, _ := runtime.Caller(0)
	cfg := filepath.Join(filepath.Dir(file), "..", "..", "temporal-config")
	for flag, name := range map[string]string{"--dynamic-config-value": "dynamic-config.txt", "--search-attribute": "search-attributes.txt"} {
		lines, err := configLines(filepath.Join(cfg, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			args = append(args, flag, l)
		}
	}
	p := &Temporal{t: t, bin: bin, args: args, log: filepath.Join(dir, "temporal.log"), db: db, dir: dir, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	p.Start()
	t.Cleanup(func() {
		if p.cmd != nil {
			p.Kill()
		}
	})
	return p
}

// Start starts the server on its port, empty, and waits until it serves
// the default namespace.
func (p *Temporal) Start() {
	p.t.Helper()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start temporal dev server: %v", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() { _ = cmd.Wait(); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	quiet := tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	for {
		c, err := client.DialContext(ctx, client.Options{HostPort: p.Addr, Logger: quiet})
		if err == nil {
			_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
			c.Close()
			if err == nil {
				return
			}
		}
		select {
		case <-done:
			p.t.Fatalf("temporal dev server exited during startup: %s", p.tail())
		case <-ctx.Done():
			p.t.Fatalf("temporal dev server not serving after 90 s: %v\n%s", err, p.tail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Kill ends the server at once (SIGKILL), as a crash would: everything it
// held is gone.
func (p *Temporal) Kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("temporal dev server did not exit after SIGKILL")
	}
	p.cmd = nil
}

// Backup copies the server's state (OwnTemporalOnDisk) as it stands and
// returns the copy's path: it stops the server (SIGKILL; SQLite's journal
// makes what is on disk whole again at the next open), copies the file,
// and starts it again on its state.
func (p *Temporal) Backup() string {
	p.t.Helper()
	if p.db == "" {
		p.t.Fatal("Backup needs OwnTemporalOnDisk")
	}
	p.Kill()
	to := filepath.Join(p.dir, fmt.Sprintf("backup-%d.db", time.Now().UnixNano()))
	p.copyState(p.db, to)
	p.Start()
	return to
}

// Restore kills the server, puts the state of backup (Backup's path) in
// place of its own, and starts it: Temporal goes back to the backup's
// time.
func (p *Temporal) Restore(backup string) {
	p.t.Helper()
	p.Kill()
	for _, suffix := range []string{"-journal", "-wal", "-shm"} {
		_ = os.Remove(p.db + suffix)
	}
	p.copyState(backup, p.db)
	p.Start()
}

// copyState copies a SQLite database with its journal files, if any.
func (p *Temporal) copyState(from, to string) {
	p.t.Helper()
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		b, err := os.ReadFile(from + suffix)
		if os.IsNotExist(err) && suffix != "" {
			continue
		}
		if err != nil {
			p.t.Fatalf("copy temporal state: %v", err)
		}
		if err := os.WriteFile(to+suffix, b, 0o600); err != nil {
			p.t.Fatalf("copy temporal state: %v", err)
		}
	}
}

// tail is the end of the server's log.
func (p *Temporal) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// temporalBin is the dev stack's Temporal server binary (deploy/temporal),
// which deploy/dev/stack.sh builds and names in .dev/env.
func temporalBin() (string, error) {
	b := os.Getenv("CREWLET_TEMPORAL_DEV")
	if b == "" {
		return "", fmt.Errorf("CREWLET_TEMPORAL_DEV is not set: run deploy/dev/stack.sh up, which builds the dev server, and load .dev/env")
	}
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Errorf("the dev stack's Temporal server %s (CREWLET_TEMPORAL_DEV): %v; run deploy/dev/stack.sh up, which builds it", b, err)
	}
	return b, nil
}

// configLines are a KEY=VALUE file's lines without comments and blanks.
func configLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}
