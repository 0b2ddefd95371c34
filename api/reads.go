package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/crewlet/crewlet"
)

// Large reads (docs/operations.md, "Large reads"): a turn view, a seat's
// turns and a conversation page can hold megabytes of model output and tool
// results. Each answer is held to readBudget bytes, and a process serves at
// most maxHeavyReads of them at once, so a few callers cannot fill its
// memory or hold every Postgres connection.
const (
	readBudget = 4 << 20
	// maxReadText bounds one text in a turn view or a conversation page: a
	// message's content, a transcript body.
	maxReadText = 256 << 10
	// maxListText bounds a trigger's body in GET /seats/{handle}/turns; the
	// turn view has it up to maxReadText.
	maxListText = 4 << 10
	// maxHeavyReads is how many heavy routes one process serves at once,
	// and maxHeavyReadsPerPrincipal how many of them one principal holds,
	// so one caller's burst of large reads leaves the others room.
	maxHeavyReads             = 8
	maxHeavyReadsPerPrincipal = 4
	// truncatedHeader, on a list answer, says it was cut short at the
	// budget, and how to read the rest.
	truncatedHeader = "X-Crewlet-Truncated"
)

// jsonSize is v's size in JSON.
func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// fit is how many of n items, item i being size(i) bytes of JSON, fit in
// budget bytes: at least one, so that a caller paging on always moves.
func fit(n, budget int, size func(i int) int) int {
	used := 0
	for i := range n {
		used += size(i) + 1 // and a comma
		if used > budget && i > 0 {
			return i
		}
	}
	return n
}

// heavy serves h while the caller's principal runs fewer than
// maxHeavyReadsPerPrincipal heavy reads and the process fewer than
// maxHeavyReads, and refuses the one over either with 429 and Retry-After.
func (s *Server) heavy(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := principalOf(r).Name
		release, ok := s.heavyByPrincipal.take(name, maxHeavyReadsPerPrincipal)
		if !ok {
			w.Header().Set("Retry-After", "1")
			writeError(w, crewlet.Errorf(crewlet.ERATELIMITED,
				"%s is running %d large reads (turn views, turn lists, conversations) on this process at once, the most one principal may; retry after a second", name, maxHeavyReadsPerPrincipal))
			return
		}
		defer release()
		select {
		case s.heavyReads <- struct{}{}:
			defer func() { <-s.heavyReads }()
			h(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, crewlet.Errorf(crewlet.ERATELIMITED,
				"this process is serving %d large reads (turn views, turn lists, conversations) at once; retry after a second", maxHeavyReads))
		}
	}
}

// intParam is the query parameter name as a number from 0, or def when it
// is not set.
func intParam(r *http.Request, name, what string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, crewlet.Errorf(crewlet.EINVALID, "%s must be %s, got %q", name, what, v)
	}
	return n, nil
}
