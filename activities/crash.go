package activities

import (
	"fmt"
	"os"
	"syscall"

	"github.com/crewlet/crewlet/internal/testhook"
)

// crashPoint kills this process, as a crash would, when the crash-matrix
// test hook (testhook.Hooks.CrashAt) names this point for this seat. It does
// nothing when no hook is set.
func crashPoint(point testhook.CrashPoint, seat string) {
	if !testhook.Current().CrashesAt(point, seat) {
		return
	}
	fmt.Fprintf(os.Stderr, "crewlet: test hook: crashing at %s for seat %s\n", point, seat)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
