package testenv

import (
	"os"
	"strconv"
	"strings"
)

// Child is a process /proc shows as started by a given parent.
type Child struct {
	PID int
	// Comm is its command name, State its one-letter state ("Z": a zombie).
	Comm, State string
}

// Children lists the processes whose parent is pid, as /proc shows them
// now: a test's way to see what a process it started has started in turn.
func Children(pid int) []Child {
	parent := strconv.Itoa(pid)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []Child
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens, so
		// the fields are read after the last ')'.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) > 1 && fields[1] == parent {
			out = append(out, Child{PID: child, Comm: s[open+1 : end], State: fields[0]})
		}
	}
	return out
}
