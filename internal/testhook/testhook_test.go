package testhook

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     Hooks
		wantErr  string
	}{
		{"unset", "", Hooks{}, ""},
		{"every hook", "crash_at=after_model, crash_seat=s01,wedge_after=2s,cut_store_after=1500ms,temporal_calls=/tmp/calls,scripted_probe=/tmp/probe.jsonl",
			Hooks{CrashAt: AfterModel, CrashSeat: "s01", WedgeAfter: 2 * time.Second, CutStoreAfter: 1500 * time.Millisecond,
				TemporalCalls: "/tmp/calls", ScriptedProbe: "/tmp/probe.jsonl"}, ""},
		{"a trailing comma", "crash_at=after_ack,", Hooks{CrashAt: AfterAck}, ""},
		{"unknown hook", "crash_after=after_model", Hooks{}, `CREWLET_TEST_HOOKS: unknown hook "crash_after"; the hooks are crash_at, crash_seat, wedge_after, cut_store_after, slow_start, beat_offset, temporal_calls, scripted_probe`},
		{"unknown crash point", "crash_at=after_lunch", Hooks{}, `CREWLET_TEST_HOOKS: crash_at="after_lunch": not a crash point; use one of after_model,`},
		{"bad duration", "wedge_after=soon", Hooks{}, `CREWLET_TEST_HOOKS: wedge_after="soon": not a positive duration`},
		{"zero duration", "cut_store_after=0s", Hooks{}, `CREWLET_TEST_HOOKS: cut_store_after="0s": not a positive duration`},
		{"bad seat", "crash_at=after_model,crash_seat=S 01", Hooks{}, `CREWLET_TEST_HOOKS: crash_seat="S 01": not a seat handle`},
		{"seat without a point", "crash_seat=s01", Hooks{}, `CREWLET_TEST_HOOKS: crash_seat="s01" needs crash_at`},
		{"no value", "wedge_after=", Hooks{}, `CREWLET_TEST_HOOKS: "wedge_after=" is not name=value`},
		{"no equals", "wedge_after", Hooks{}, `CREWLET_TEST_HOOKS: "wedge_after" is not name=value`},
		{"a path with a comma", "scripted_probe=/tmp/a,b", Hooks{}, `CREWLET_TEST_HOOKS: "b" is not name=value`},
		{"twice", "wedge_after=1s,wedge_after=2s", Hooks{}, "CREWLET_TEST_HOOKS: hook wedge_after is set twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Parse(%q): %v", tt.in, err)
			case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
				t.Fatalf("Parse(%q) error = %v; want one starting %q", tt.in, err, tt.wantErr)
			case got != tt.want:
				t.Fatalf("Parse(%q) = %+v; want %+v", tt.in, got, tt.want)
			}
			if err == nil {
				again, err := Parse(got.String())
				if err != nil || again != got {
					t.Fatalf("Parse(%q) = %+v, %v; want %+v back", got.String(), again, err, got)
				}
			}
		})
	}
}

func TestCrashesAt(t *testing.T) {
	anySeat := Hooks{CrashAt: AfterLedger}
	oneSeat := Hooks{CrashAt: AfterLedger, CrashSeat: "s01"}
	for _, tt := range []struct {
		name  string
		h     Hooks
		point CrashPoint
		seat  string
		want  bool
	}{
		{"no hook", Hooks{}, AfterLedger, "s01", false},
		{"its point, any seat", anySeat, AfterLedger, "s02", true},
		{"another point", anySeat, AfterAck, "s01", false},
		{"its point and seat", oneSeat, AfterLedger, "s01", true},
		{"another seat", oneSeat, AfterLedger, "s02", false},
	} {
		if got := tt.h.CrashesAt(tt.point, tt.seat); got != tt.want {
			t.Errorf("%s: CrashesAt(%s, %s) = %v; want %v", tt.name, tt.point, tt.seat, got, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Setenv(Env, "wedge_after=3s")
	if h, err := Load(); err != nil || h.WedgeAfter != 3*time.Second || Current() != h {
		t.Fatalf("Load() = %+v, %v; Current() = %+v", h, err, Current())
	}
	t.Setenv(Env, "wedge_after=3")
	if _, err := Load(); err == nil || !strings.Contains(err.Error(), "wedge_after") {
		t.Fatalf("Load() with a bad value = %v; want an error naming wedge_after", err)
	}
}
