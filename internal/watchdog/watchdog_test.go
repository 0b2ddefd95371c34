package watchdog

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWatchdog(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		setup    func(w *Watchdog, clock *time.Time)
		wantExit bool
	}{
		{"fresh loops", func(w *Watchdog, c *time.Time) { w.Beat("presence"); *c = c.Add(2 * time.Second) }, false},
		{"stalled loop", func(w *Watchdog, c *time.Time) { w.Beat("presence"); *c = c.Add(4 * time.Second) }, true},
		{"one of two loops stalled", func(w *Watchdog, c *time.Time) {
			w.Beat("presence")
			*c = c.Add(4 * time.Second)
			w.Beat("hold/cto")
		}, true},
		{"finished loop is not wedged", func(w *Watchdog, c *time.Time) {
			w.Beat("hold/cto")
			w.Forget("hold/cto")
			*c = c.Add(time.Minute)
		}, false},
		{"disarmed during shutdown", func(w *Watchdog, c *time.Time) { w.Beat("presence"); w.Disarm(); *c = c.Add(time.Minute) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			exited := -1
			clock := time.Unix(1000, 0)
			w := New(3*time.Second, &stderr, func(code int) { exited = code })
			w.now = func() time.Time { return clock }
			tc.setup(w, &clock)
			w.Check()
			if got := exited == ExitCode; got != tc.wantExit {
				t.Fatalf("exited with %d; want exit=%v", exited, tc.wantExit)
			}
			if lines := strings.Count(stderr.String(), "\n"); tc.wantExit && lines != 1 {
				t.Fatalf("stderr = %q; want exactly one line", stderr.String())
			}
		})
	}
}
