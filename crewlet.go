// Package crewlet holds the domain vocabulary shared by every part of crewlet:
// seats, mail, turns, their ids and error codes. It imports only the standard
// library; the packages under internal/, workflows/, activities/ and api/
// depend on it, never the other way around.
package crewlet

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sort"
	"strings"
)

// TaskQueue is the shared task queue every worker node polls.
const TaskQueue = "crewlet"

// MetricEstablish is the timer the seat workflow records, through the
// Temporal SDK's metrics handler, when it has established a tenure: how long
// it was without one. Prometheus names it crewlet_seat_establish_seconds.
const MetricEstablish = "crewlet_seat_establish"

// handlePattern is what a seat handle, role or profile name may look like: it
// has to be usable in workflow ids, Redis keys and URLs without escaping.
var handlePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidName reports whether s may be used as a seat handle, role or profile name.
func ValidName(s string) bool { return handlePattern.MatchString(s) }

// NamePattern describes ValidName for error messages.
const NamePattern = "lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters"

// SeatWorkflowID is the Temporal workflow id of a seat: one open execution per
// id is the seat's mutual exclusion.
func SeatWorkflowID(handle string) string { return "seat/" + handle }

// HandleFromWorkflowID is the inverse of SeatWorkflowID.
func HandleFromWorkflowID(id string) (string, bool) {
	return strings.CutPrefix(id, "seat/")
}

// WorkKey is the digest of a turn's sorted constituent event ids. It is stable
// across re-runs of the same batch, so writes keyed on it collapse duplicates.
func WorkKey(eventIDs []string) string {
	ids := append([]string(nil), eventIDs...)
	sort.Strings(ids)
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}
