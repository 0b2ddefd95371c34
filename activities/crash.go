package activities

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// crashPoint kills this process, as a crash would, when the crash-matrix test
// hook names this point: CREWLET_TEST_CRASH_AT=<point> and, optionally,
// CREWLET_TEST_CRASH_SEAT=<handle>. It exists for that test only and does
// nothing when the variables are unset.
func crashPoint(point, seat string) {
	at := os.Getenv("CREWLET_TEST_CRASH_AT")
	if at == "" || !strings.EqualFold(at, point) {
		return
	}
	if want := os.Getenv("CREWLET_TEST_CRASH_SEAT"); want != "" && want != seat {
		return
	}
	fmt.Fprintf(os.Stderr, "crewlet: test hook: crashing at %s for seat %s\n", point, seat)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
