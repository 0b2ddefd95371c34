// Package testhook owns crewlet's test hooks: the few places where a test
// makes a crewlet process misbehave on purpose (crash at a point of a turn,
// wedge its presence loop, lose Postgres) or report what it did (count its
// Temporal calls, record its scripted model calls). They are all set through
// one environment variable, CREWLET_TEST_HOOKS, a comma-separated list of
// name=value:
//
//	CREWLET_TEST_HOOKS=crash_at=after_model,crash_seat=s01,wedge_after=2s
//
// A process parses it once as it starts (Load) and refuses to start on an
// unknown hook or a bad value, so a test never runs against a hook that was
// silently ignored. Unset, no hook does anything.
package testhook

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/crewlet/crewlet"
)

// Env is the environment variable that sets the hooks.
const Env = "CREWLET_TEST_HOOKS"

// CrashPoint is a point of a turn's steps where crash_at kills the process.
type CrashPoint string

// The crash points, each just after a step's effect and before the next
// step records it (the crash matrix of internal/e2e).
const (
	AfterModel           CrashPoint = "after_model"
	AfterToolCall        CrashPoint = "after_tool_call"
	AfterPublish         CrashPoint = "after_publish"
	AfterLedger          CrashPoint = "after_ledger"
	AfterAck             CrashPoint = "after_ack"
	AfterCompaction      CrashPoint = "after_compaction"
	AfterReflectionModel CrashPoint = "after_reflection_model"
)

var crashPoints = []CrashPoint{AfterModel, AfterToolCall, AfterPublish, AfterLedger, AfterAck, AfterCompaction, AfterReflectionModel}

// Hooks are the test hooks of one process; the zero value sets none.
type Hooks struct {
	// CrashAt (crash_at) kills the process with SIGKILL, as a crash
	// would, when a turn step reaches that point.
	CrashAt CrashPoint
	// CrashSeat (crash_seat) limits CrashAt to that seat's turns.
	CrashSeat string
	// WedgeAfter (wedge_after) blocks the node's presence loop once the
	// node has run that long, so its watchdog must end it.
	WedgeAfter time.Duration
	// CutStoreAfter (cut_store_after) fails every presence write once the
	// node has run that long, as if Postgres were unreachable from it.
	CutStoreAfter time.Duration
	// SlowStart (slow_start) holds a starting node that long after it
	// registered, before it checks its worker build, as a Temporal slow
	// to make a build current would.
	SlowStart time.Duration
	// BeatOffset (beat_offset) starts the node's presence loop that long
	// after its first beat, so nodes started together beat out of phase,
	// as nodes started apart do.
	BeatOffset time.Duration
	// TemporalCalls (temporal_calls) names a file where the process writes
	// how many calls it made to Temporal, every second ("calls N").
	TemporalCalls string
	// ScriptedProbe (scripted_probe) names a file where the scripted model
	// appends a line when each call starts and ends (model.Probe).
	ScriptedProbe string
	// UnstoppableMCP (unstoppable_mcp) names an MCP server whose stop
	// cannot be proven: its process is killed, and its teardown still
	// fails, as one whose process would not die.
	UnstoppableMCP string
}

// hook is one name=value a Hooks field is set from.
type hook struct {
	name  string
	set   func(h *Hooks, v string) error
	value func(h Hooks) string
}

var hooks = []hook{
	{"crash_at", func(h *Hooks, v string) error {
		if !slices.Contains(crashPoints, CrashPoint(v)) {
			return fmt.Errorf("not a crash point; use one of %s", joinPoints())
		}
		h.CrashAt = CrashPoint(v)
		return nil
	}, func(h Hooks) string { return string(h.CrashAt) }},
	{"crash_seat", func(h *Hooks, v string) error {
		if !crewlet.ValidName(v) {
			return fmt.Errorf("not a seat handle: %s", crewlet.NamePattern)
		}
		h.CrashSeat = v
		return nil
	}, func(h Hooks) string { return h.CrashSeat }},
	{"wedge_after", duration(func(h *Hooks) *time.Duration { return &h.WedgeAfter }),
		func(h Hooks) string { return durationString(h.WedgeAfter) }},
	{"cut_store_after", duration(func(h *Hooks) *time.Duration { return &h.CutStoreAfter }),
		func(h Hooks) string { return durationString(h.CutStoreAfter) }},
	{"slow_start", duration(func(h *Hooks) *time.Duration { return &h.SlowStart }),
		func(h Hooks) string { return durationString(h.SlowStart) }},
	{"beat_offset", duration(func(h *Hooks) *time.Duration { return &h.BeatOffset }),
		func(h Hooks) string { return durationString(h.BeatOffset) }},
	{"temporal_calls", path(func(h *Hooks) *string { return &h.TemporalCalls }),
		func(h Hooks) string { return h.TemporalCalls }},
	{"scripted_probe", path(func(h *Hooks) *string { return &h.ScriptedProbe }),
		func(h Hooks) string { return h.ScriptedProbe }},
	{"unstoppable_mcp", func(h *Hooks, v string) error {
		if !crewlet.ValidName(v) {
			return fmt.Errorf("not an MCP server name: %s", crewlet.NamePattern)
		}
		h.UnstoppableMCP = v
		return nil
	}, func(h Hooks) string { return h.UnstoppableMCP }},
}

func duration(field func(*Hooks) *time.Duration) func(*Hooks, string) error {
	return func(h *Hooks, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("not a positive duration such as 2s")
		}
		*field(h) = d
		return nil
	}
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func path(field func(*Hooks) *string) func(*Hooks, string) error {
	return func(h *Hooks, v string) error {
		*field(h) = v
		return nil
	}
}

func joinPoints() string {
	names := make([]string, len(crashPoints))
	for i, p := range crashPoints {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

func hookNames() string {
	names := make([]string, len(hooks))
	for i, h := range hooks {
		names[i] = h.name
	}
	return strings.Join(names, ", ")
}

// Parse reads a CREWLET_TEST_HOOKS value. Each hook may be named once; an
// unknown name, an empty or bad value is an error naming it. A file path
// cannot hold a comma.
func Parse(s string) (Hooks, error) {
	var h Hooks
	seen := map[string]bool{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, value, ok := strings.Cut(entry, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || value == "" {
			return Hooks{}, fmt.Errorf("%s: %q is not name=value", Env, entry)
		}
		i := slices.IndexFunc(hooks, func(k hook) bool { return k.name == name })
		if i < 0 {
			return Hooks{}, fmt.Errorf("%s: unknown hook %q; the hooks are %s", Env, name, hookNames())
		}
		if seen[name] {
			return Hooks{}, fmt.Errorf("%s: hook %s is set twice", Env, name)
		}
		seen[name] = true
		if err := hooks[i].set(&h, value); err != nil {
			return Hooks{}, fmt.Errorf("%s: %s=%q: %w", Env, name, value, err)
		}
	}
	if h.CrashSeat != "" && h.CrashAt == "" {
		return Hooks{}, fmt.Errorf("%s: crash_seat=%q needs crash_at", Env, h.CrashSeat)
	}
	return h, nil
}

// String is the CREWLET_TEST_HOOKS value that sets h: Parse(h.String())
// is h.
func (h Hooks) String() string {
	var parts []string
	for _, k := range hooks {
		if v := k.value(h); v != "" {
			parts = append(parts, k.name+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

// Env is the environment entry that sets h in a process a test starts.
func (h Hooks) Env() string { return Env + "=" + h.String() }

// CrashesAt reports whether a turn step of seat at point is to crash.
func (h Hooks) CrashesAt(point CrashPoint, seat string) bool {
	return h.CrashAt == point && (h.CrashSeat == "" || h.CrashSeat == seat)
}

var current atomic.Pointer[Hooks]

// Load parses CREWLET_TEST_HOOKS and makes it the process's hooks, which
// Current returns from then on. A process calls it as it starts and refuses
// to start on its error.
func Load() (Hooks, error) {
	h, err := Parse(os.Getenv(Env))
	if err != nil {
		return Hooks{}, err
	}
	current.Store(&h)
	return h, nil
}

// Current returns the hooks Load read; none before Load ran (a package's
// own tests).
func Current() Hooks {
	if h := current.Load(); h != nil {
		return *h
	}
	return Hooks{}
}
