// Package revisions owns the company's config revisions
// (docs/architecture.md, "Config revisions"): applying an org file as the
// next numbered revision with a report of what changed and when each change
// takes effect, choosing the revision a starting process runs, and
// following the active revision in a running one.
package revisions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// Digest is the digest of an org file's bytes.
func Digest(document []byte) string {
	sum := sha256.Sum256(document)
	return hex.EncodeToString(sum[:])
}

// ApplyRequest is one apply.
type ApplyRequest struct {
	Document []byte
	// By is who applies it: a principal's name, or the process that applied
	// its file.
	By string
	// Restart says the operator will restart the processes, which an apply
	// that changes a cold key needs.
	Restart bool
	// Allowed, when not nil, is the applying process's nodes.mcp_allow
	// (config.MCPAllowed of the file it started with): a revision naming an
	// MCP command, or a variable for a server, beyond it is refused. The
	// process's own file being applied (at start, or watched) is not
	// bounded: it is the list.
	Allowed []config.MCPAllow
}

// Apply validates a document and stores it as the next revision. An
// invalid document is refused whole (EINVALID, every problem named) and the
// active revision stays. A document that changes a cold key is refused
// (ECONFLICT, the keys named) unless the request says the processes will
// restart. The same document as the active revision adds nothing.
func Apply(ctx context.Context, st *store.Store, req ApplyRequest) (wire.ConfigReport, error) {
	next, err := config.Parse(req.Document)
	if err != nil {
		return wire.ConfigReport{}, crewlet.Errorf(crewlet.EINVALID, "the org file is invalid; nothing was applied:\n%s", strings.TrimPrefix(err.Error(), "config: "))
	}
	if req.Allowed != nil {
		if refused := config.MCPNotAllowed(req.Allowed, next); len(refused) > 0 {
			return wire.ConfigReport{}, crewlet.Errorf(crewlet.EINVALID,
				"refused: the revision has MCP servers run or read what the nodes' own files do not allow; nothing was applied:\n%s\nadd them to nodes.mcp_allow in each node's file (or name the servers there) and restart the processes",
				strings.Join(refused, "\n"))
		}
	}
	digest := Digest(req.Document)
	active, ok, err := st.ActiveConfig(ctx)
	if err != nil {
		return wire.ConfigReport{}, err
	}
	if ok && active.Digest == digest {
		return wire.ConfigReport{Revision: active.Revision, AppliedBy: active.AppliedBy, AppliedAt: active.AppliedAt, Unchanged: true, Changes: []config.Change{}}, nil
	}
	var changes []config.Change
	if ok {
		// The active revision is parsed with this process's environment,
		// as the new one is: a difference the environment makes is not a
		// change of the file.
		prev, err := config.Parse([]byte(active.Document))
		if err != nil {
			return wire.ConfigReport{}, crewlet.Errorf(crewlet.EUNAVAILABLE,
				"the active revision %d is invalid where this runs (its environment differs), so the change cannot be judged; fix the environment, or apply from a process where revision %d is valid", active.Revision, active.Revision)
		}
		changes = config.Diff(prev, next)
	}
	cold := config.Cold(changes)
	if len(cold) > 0 && !req.Restart {
		return wire.ConfigReport{}, crewlet.Errorf(crewlet.ECONFLICT,
			"refused: %s only take effect when the processes restart; apply again with restart (crewlet config apply --restart) and then restart every process", strings.Join(cold, ", "))
	}
	rev, err := st.ApplyConfig(ctx, active.Revision, string(req.Document), digest, req.By, changes)
	if err != nil {
		return wire.ConfigReport{}, err
	}
	if changes == nil {
		changes = []config.Change{}
	}
	return wire.ConfigReport{Revision: rev.Revision, AppliedBy: rev.AppliedBy, AppliedAt: rev.AppliedAt, Changes: changes, NeedsRestart: cold}, nil
}

// Start chooses the revision a starting process runs, given the org file it
// was started with (already valid: it was loaded to reach the store). The
// file is applied first, by the process, when no revision exists yet, or
// when it is a document never applied before: an edited file and a restart
// still change the company, as they always did, and the restart is the one
// cold changes need. A file that was applied once and has since been
// superseded is not applied again, so a process restarted with a stale file
// does not roll the company back: it runs the active revision.
func Start(ctx context.Context, st *store.Store, file []byte, fileOrg *config.Config, by string, log *slog.Logger) (config.Revision, error) {
	// Processes started together with the same new file race to apply it;
	// the ones that lose find it applied when they look again.
	for attempt := 1; ; attempt++ {
		rev, err := start(ctx, st, file, fileOrg, by, log)
		if err == nil {
			version, verr := st.SpawnedVersion(ctx)
			if verr != nil {
				return rev, verr
			}
			return WithSpawned(ctx, st, rev, version)
		}
		if crewlet.ErrorCode(err) != crewlet.ECONFLICT || attempt == 3 {
			return rev, err
		}
	}
}

func start(ctx context.Context, st *store.Store, file []byte, fileOrg *config.Config, by string, log *slog.Logger) (config.Revision, error) {
	digest := Digest(file)
	active, ok, err := st.ActiveConfig(ctx)
	if err != nil {
		return config.Revision{}, err
	}
	if !ok || active.Digest != digest {
		applied := false
		if ok {
			if applied, err = st.ConfigDigestApplied(ctx, digest); err != nil {
				return config.Revision{}, err
			}
		}
		if !applied {
			report, err := Apply(ctx, st, ApplyRequest{Document: file, By: by, Restart: true})
			if err != nil {
				return config.Revision{}, fmt.Errorf("apply the org file as a new revision: %w", err)
			}
			log.Info("config_applied", "revision", report.Revision, "by", by, "changes", len(report.Changes), "needs_restart", report.NeedsRestart)
			return numbered(report.Revision, fileOrg, nil), nil
		}
		log.Warn("config_file_superseded", "active_revision", active.Revision,
			"hint", "this process's org file was applied before and has since been replaced; it runs the active revision (crewlet config show)")
	}
	if active.Digest == digest {
		return numbered(active.Revision, fileOrg, nil), nil
	}
	return runnable(active, fileOrg)
}

// runnable is the active revision as a process that started with boot runs
// it: parsed with the process's environment, its cold keys kept from boot.
func runnable(active store.ConfigRevision, boot *config.Config) (config.Revision, error) {
	org, err := config.Parse([]byte(active.Document))
	if err != nil {
		return config.Revision{}, fmt.Errorf("revision %d is invalid with this process's environment: %w", active.Revision, err)
	}
	kept, needs, err := config.KeepCold(boot, org)
	if err != nil {
		return config.Revision{}, fmt.Errorf("revision %d: %w", active.Revision, err)
	}
	return numbered(active.Revision, kept, needs), nil
}

// numbered returns org as revision n: a copy of it marked with its number.
func numbered(n int64, org *config.Config, needsRestart []string) config.Revision {
	c := *org
	c.Revision = n
	return config.Revision{Number: n, Org: &c, NeedsRestart: needsRestart}
}

// NewFollower returns the follower of a process that started on rev (with
// the cold keys of boot), and the Live it keeps on the active revision: a
// lookup that misses on the Live catches up through the follower.
func NewFollower(st *store.Store, rev config.Revision, boot *config.Config, process, kind string, log *slog.Logger) *Follower {
	f := &Follower{Store: st, Boot: boot, Process: process, Kind: kind, Log: log}
	f.Live = config.NewLive(rev, f.Refresh)
	return f
}

// Follower keeps a running process on the active revision.
type Follower struct {
	Store *store.Store
	Live  *config.Live
	// Boot is the config the process started with: its cold keys stay.
	Boot *config.Config
	// Process and Kind name the process in config_processes.
	Process, Kind string
	Log           *slog.Logger

	mu        sync.Mutex
	problem   string
	onChange  []func(ctx context.Context, rev config.Revision)
	refreshMu sync.Mutex
	// taken hands the newest revision taken to Run, which calls the
	// OnChange hooks: a Refresh made by a request or an activity that
	// looked for a seat does not run them in its own time.
	takenOnce sync.Once
	taken     chan config.Revision
}

// OnChange calls fn, in Run's goroutine, after the process takes a new
// revision; revisions taken in quick succession may be seen as their newest
// only.
func (f *Follower) OnChange(fn func(ctx context.Context, rev config.Revision)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onChange = append(f.onChange, fn)
}

// Run checks for a new active revision every beat until ctx ends, and
// records which revision the process runs.
func (f *Follower) Run(ctx context.Context, beat time.Duration) {
	t := time.NewTicker(beat)
	defer t.Stop()
	for {
		if err := f.Refresh(ctx); err != nil && ctx.Err() == nil {
			f.Log.Warn("config_follow_failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case rev := <-f.takenChan():
			f.runHooks(ctx, rev)
		}
	}
}

func (f *Follower) takenChan() chan config.Revision {
	f.takenOnce.Do(func() { f.taken = make(chan config.Revision, 1) })
	return f.taken
}

// handOver passes rev to Run, replacing an older revision Run has not
// picked up yet. Only Refresh calls it, under refreshMu.
func (f *Follower) handOver(rev config.Revision) {
	ch := f.takenChan()
	select {
	case <-ch:
	default:
	}
	ch <- rev
}

func (f *Follower) runHooks(ctx context.Context, rev config.Revision) {
	f.mu.Lock()
	hooks := append([]func(context.Context, config.Revision){}, f.onChange...)
	f.mu.Unlock()
	for _, fn := range hooks {
		fn(ctx, rev)
	}
}

// Refresh takes the active revision if it is newer than the one the
// process runs, and records the process's revision. A revision this
// process cannot run (invalid with its environment or its start-time keys)
// is not taken: the process keeps its revision and reports the problem.
func (f *Follower) Refresh(ctx context.Context) error {
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	cur := f.Live.Current()
	active, err := f.Store.ActiveConfigNumber(ctx)
	if err != nil {
		return err
	}
	spawned, err := f.Store.SpawnedVersion(ctx)
	if err != nil {
		return err
	}
	next, changed := cur, false
	if active > cur.Number {
		taken, err := f.take(ctx)
		switch {
		case err != nil:
			if f.setProblem(err.Error()) {
				f.Log.Error("config_revision_refused", "revision", active, "running", cur.Number, "error", err)
			}
		case taken.Number > cur.Number:
			f.setProblem("")
			f.Log.Info("config_revision_taken", "revision", taken.Number, "previous", cur.Number, "needs_restart", taken.NeedsRestart)
			next, changed = taken, true
		}
	}
	if changed || spawned != cur.Spawned {
		if next, err = WithSpawned(ctx, f.Store, next, spawned); err != nil {
			return err
		}
		f.Live.Set(next)
		f.handOver(next)
		cur = next
	}
	f.mu.Lock()
	problem := f.problem
	f.mu.Unlock()
	return f.Store.ReportConfigProcess(ctx, wire.ConfigProcess{
		Process: f.Process, Kind: f.Kind, Revision: cur.Number, NeedsRestart: cur.NeedsRestart, Problem: problem,
	})
}

// WithSpawned returns rev with the live spawned seats (read at version or
// later) in its org in place of those it had: the org a process runs is its
// revision's seats and the seats spawned from its pools.
func WithSpawned(ctx context.Context, st *store.Store, rev config.Revision, version int64) (config.Revision, error) {
	spawned, err := st.SpawnedSeats(ctx)
	if err != nil {
		return rev, err
	}
	org := *rev.Org
	org.Seats = make([]config.Seat, 0, len(rev.Org.Seats)+len(spawned))
	for _, s := range rev.Org.Seats {
		if !s.Spawned {
			org.Seats = append(org.Seats, s)
		}
	}
	for _, s := range spawned {
		if _, named := org.Seat(s.Handle); named {
			// A revision named a seat as a spawned one is called: the
			// file's seat is the one that runs.
			continue
		}
		org.Seats = append(org.Seats, config.Seat{Handle: s.Handle, Role: s.Role, Kind: string(crewlet.SeatAgent), Spawned: true})
	}
	org.SpawnedVersion = version
	rev.Org, rev.Spawned = &org, version
	return rev, nil
}

// setProblem records why the active revision was not taken, and reports
// whether that is news.
func (f *Follower) setProblem(p string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	news := f.problem != p
	f.problem = p
	return news
}

func (f *Follower) take(ctx context.Context) (config.Revision, error) {
	active, ok, err := f.Store.ActiveConfig(ctx)
	if err != nil || !ok {
		return config.Revision{}, err
	}
	return runnable(active, f.Boot)
}

// At is revision n as a process that started with boot would run it: what
// a replay against an earlier revision runs on. ENOTFOUND when no revision
// has that number.
func At(ctx context.Context, st *store.Store, n int64, boot *config.Config) (config.Revision, error) {
	rev, err := st.ConfigRevisionNumbered(ctx, n)
	if err != nil {
		return config.Revision{}, err
	}
	return runnable(rev, boot)
}
