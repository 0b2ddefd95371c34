package reconcile

import (
	"fmt"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
)

// BenchmarkPrepare10kSeats is a pass's first step over an org of 10,000
// seats that all have their rows and mailboxes: two Postgres reads and one
// Redis call per seat, 16 at a time. It reports the Redis calls per pass.
func BenchmarkPrepare10kSeats(b *testing.B) {
	const n = 10000
	var org strings.Builder
	org.WriteString("company: { name: acme }\nprofiles: { local: { provider: scripted } }\nroles: { clerk: { charter: works as clerk, profile: local } }\nseats:\n")
	for i := range n {
		fmt.Fprintf(&org, "  - { handle: s%05d, role: clerk }\n", i)
	}
	bb := setup(b, org.String())
	if err := bb.r.PrepareSeats(bb.ctx, bb.org); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		var report crewlet.ReconcileReport
		if _, err := bb.r.prepare(bb.ctx, bb.org, &report); err != nil {
			b.Fatal(err)
		}
		if len(report.RowsCreated)+len(report.MailboxesCreated) != 0 {
			b.Fatalf("a pass over a prepared org created %v", report)
		}
	}
	b.ReportMetric(n, "redis_calls/op")
}
