package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

// Every crewlet series says, in its help, what it reveals, is named crewlet_
// and passes the client library's linter (a labelled series shows once it
// has a sample, so each is touched here); a nil Metrics records nothing and
// serves an empty registry.
func TestEverySeriesIsNamedAndExplained(t *testing.T) {
	t.Parallel()
	m := New()
	m.HTTPRequest("GET /seats", 200, time.Millisecond)
	m.ModelCall("local", time.Second, errors.New("refused"), 10, 0)
	m.Fenced("ReadMail")
	m.InternalError("ModelRound")
	m.HostLostSignal(true)
	m.TurnStarted()
	m.TurnFinished("done")
	m.MailRead(3)
	m.MailAcked(2)
	m.ToolCall("ledger", "unknown")
	m.BudgetHeld()
	m.Quarantined("paid")
	m.CooledOff("paid")
	m.TicketEnded("expired")
	m.EventDropped("full")
	m.Unauthenticated("bad_token")
	m.Spend("cto", "executive", "claude-3-5-sonnet", 2_500_000_000, true, 1000)
	m.Spend("cto", "executive", "claude-3-5-sonnet", 1_000_000_000, true, 500)
	m.Spend("", "engineer", "homebrew", 0, false, 700)
	m.GaugeFunc("crewlet_test_reading", "a gauge read at each scrape", func() float64 { return 7 })
	text := scrape(t, m)
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("not Prometheus text: %v", err)
	}
	for _, p := range problems {
		t.Errorf("the client library's linter: %s: %s", p.Metric, p.Text)
	}
	names := 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "# HELP crewlet_") {
			continue
		}
		names++
		if fields := strings.SplitN(line, " ", 4); len(fields) < 4 || len(fields[3]) < 20 {
			t.Errorf("%q: want a help line saying what the series reveals", line)
		}
	}
	if names < 25 {
		t.Errorf("%d crewlet series registered; want every one of them (25 or more)", names)
	}
	for _, want := range []string{
		`crewlet_http_requests_total{route="GET /seats",status="200"} 1`,
		`crewlet_model_call_seconds_count{outcome="error",profile="local"} 1`,
		`crewlet_model_tokens_total{direction="input",profile="local"} 10`,
		`crewlet_fenced_activities_total{activity="ReadMail"} 1`,
		`crewlet_activity_internal_errors_total{activity="ModelRound"} 1`,
		`crewlet_host_lost_signals_total{result="sent"} 1`,
		`crewlet_turns_started_total 1`,
		`crewlet_turns_finished_total{outcome="done"} 1`,
		`crewlet_mail_read_total 3`,
		`crewlet_mail_acked_total 2`,
		`crewlet_tool_calls_total{outcome="unknown",server="ledger"} 1`,
		`crewlet_budget_holds_total 1`,
		`crewlet_spend_usd_total{model="claude-3-5-sonnet",role="executive",seat="cto"} 3.5`,
		`crewlet_unpriced_tokens_total{model="homebrew",role="engineer",seat=""} 700`,
		`crewlet_credential_quarantines_total{profile="paid"} 1`,
		`crewlet_tickets_ended_total{phase="expired"} 1`,
		`crewlet_stream_events_dropped_total{reason="full"} 1`,
		`crewlet_test_reading 7`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}

	var none *Metrics
	none.Fenced("ReadMail")
	none.GaugeFunc("x", "y", func() float64 { return 1 })
	if got := scrape(t, none); got != "" {
		t.Errorf("a nil Metrics served %q; want nothing", got)
	}
}

// The Temporal SDK's counters, gauges and timers land in the same registry;
// a series keeps the tag keys of its first use, so a later use with other
// keys fills or drops them instead of failing.
func TestTemporalSDKMetricsShareTheRegistry(t *testing.T) {
	t.Parallel()
	m := New()
	h := m.Temporal().WithTags(map[string]string{"namespace": "default", "operation": "PollWorkflowTaskQueue"})
	h.Counter("temporal_request").Inc(2)
	h.WithTags(map[string]string{"task-queue": "crewlet"}).Counter("temporal_request").Inc(1)
	h.Gauge("temporal_sticky_cache_size").Update(5)
	h.Timer("temporal_request_latency").Record(30 * time.Millisecond)
	text := scrape(t, m)
	for _, want := range []string{
		`temporal_request_total{namespace="default",operation="PollWorkflowTaskQueue"} 3`,
		`temporal_sticky_cache_size{namespace="default",operation="PollWorkflowTaskQueue"} 5`,
		`temporal_request_latency_seconds_count{namespace="default",operation="PollWorkflowTaskQueue"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q:\n%s", want, text)
		}
	}
	var none *Metrics
	none.Temporal().Counter("temporal_request").Inc(1)
}
