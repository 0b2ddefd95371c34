package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkConsoleCompanyPage opens the console's company page of a
// company of 100 and of 1,000 idle seats in headless Chromium, as an
// operator (every part of the page: seats, budget, nodes, profiles), and
// reports over consoleLoads fresh loads the median and the slowest time
// from navigation to the page's crewlet:ready:company mark (every part
// drawn: server time and rendering), and the median server time of its
// GET /seats.
//
//	go test ./internal/e2e -run '^$' -bench ConsoleCompanyPage -benchtime 1x -timeout 30m
func BenchmarkConsoleCompanyPage(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("seats=%d", n), func(b *testing.B) {
			c := newCompany(b, fleetOrg(b, n, 0))
			defer c.stopAll()
			c.serve()
			c.waitAttached(20 * time.Minute)
			br := c.browser()
			var ready, seats []float64
			for i := range consoleLoads {
				br.open(fmt.Sprintf("/ui/?load=%d#/company", i))
				br.waitVisible(`main[data-ready="company"]`)
				ready = append(ready, eval[float64](br, `performance.getEntriesByName("crewlet:ready:company")[0].startTime`))
				seats = append(seats, eval[float64](br, `(e => e.responseEnd - e.requestStart)(performance.getEntriesByName(location.origin + "/seats")[0])`))
				if got := eval[int](br, `document.querySelectorAll("#seats .seat").length`); got != n {
					b.Fatalf("the page shows %d seats; want %d", got, n)
				}
			}
			sort.Float64s(ready)
			sort.Float64s(seats)
			b.ReportMetric(ready[len(ready)/2], "interactive-ms")
			b.ReportMetric(ready[len(ready)-1], "interactive-max-ms")
			b.ReportMetric(seats[len(seats)/2], "seats-request-ms")
			b.Logf("%d seats: interactive p50 %.0f ms, max %.0f ms; GET /seats p50 %.0f ms", n, ready[len(ready)/2], ready[len(ready)-1], seats[len(seats)/2])
		})
	}
}

// consoleLoads is how many times the benchmark loads the page.
const consoleLoads = 7
