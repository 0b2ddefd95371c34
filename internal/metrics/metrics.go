// Package metrics is a crewlet process's Prometheus registry: its own
// series, each of which reveals a failure that has happened to a company of
// seats, and the Temporal SDK's, through the SDK's metrics handler. Labels
// are bounded: activities, profiles, routes, outcomes; never a seat, a
// message or a conversation.
//
// Every recording method is safe on a nil *Metrics, which records nothing,
// so a component built without metrics (a test) needs no stand-in.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crewlet/crewlet/internal/prices"
)

// Metrics is one process's registry and crewlet's series in it.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests     *prometheus.CounterVec
	httpDuration     *prometheus.HistogramVec
	mailPublished    prometheus.Counter
	mailRefused      *prometheus.CounterVec
	mailRead         prometheus.Counter
	mailAcked        prometheus.Counter
	wakeFailures     prometheus.Counter
	deadLetters      prometheus.Counter
	fenced           *prometheus.CounterVec
	epochReads       *prometheus.CounterVec
	internalErrors   *prometheus.CounterVec
	modelCalls       *prometheus.HistogramVec
	modelTokens      *prometheus.CounterVec
	spend            *prometheus.CounterVec
	unpricedTokens   *prometheus.CounterVec
	nodesClaimed     prometheus.Counter
	hostLostSignals  *prometheus.CounterVec
	selfFences       prometheus.Counter
	outagesRidden    prometheus.Counter
	tenuresMovedOn   prometheus.Counter
	presenceFailures prometheus.Counter
	turnsStarted     prometheus.Counter
	turnsFinished    *prometheus.CounterVec
	budgetHolds      prometheus.Counter
	toolCalls        *prometheus.CounterVec
	quarantines      *prometheus.CounterVec
	coolingOffs      *prometheus.CounterVec
	ticketsOpened    prometheus.Counter
	ticketsEnded     *prometheus.CounterVec
	eventsDropped    *prometheus.CounterVec
	unauthenticated  *prometheus.CounterVec
	refused          *prometheus.CounterVec
}

// New returns a registry with the Go runtime's and the process's series
// and crewlet's.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{reg}
	return &Metrics{
		reg: reg,
		httpRequests: f.counterVec("crewlet_http_requests_total",
			"API requests by route pattern and status: a rise in 5xx is the API failing its callers, in 401/403 a caller with a wrong token or role, in 429 a caller over its mutation budget.",
			"route", "status"),
		httpDuration: f.histogramVec("crewlet_http_request_duration_seconds",
			"API request duration by route pattern: a slow /seats/{handle}/messages is publishing held up by Redis or Temporal.",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60, 600}, "route"),
		mailPublished: f.counter("crewlet_mail_published_total",
			"Messages written to a seat's mailbox by this process: flat while senders keep sending means publishing fails."),
		mailRefused: f.counterVec("crewlet_mail_refused_total",
			"New messages a mail quota refused, by reason: rate_limited is a sender past mailbox.sender_per_minute, insufficient_storage a mailbox at mailbox.max_unread or Redis past mailbox.max_memory_percent.",
			"reason"),
		mailRead: f.counter("crewlet_mail_read_total",
			"Mailbox entries handed to seats by reads on this node, redeliveries included: read far above published is mail handed out again and again (turns failing, tenures moving)."),
		mailAcked: f.counter("crewlet_mail_acked_total",
			"Mailbox entries acked on this node once their turn was recorded: acked falling behind read is turns not finishing."),
		wakeFailures: f.counter("crewlet_wake_failures_total",
			"Published messages whose wake signal to the seat failed: the mail waits for the seat's backstop (mailbox.backstop) instead of being answered now."),
		deadLetters: f.counter("crewlet_dead_letters_total",
			"Messages a seat gave up on (a permanent failure or its delivery budget spent); each is listed by GET /deadletters and can be requeued."),
		fenced: f.counterVec("crewlet_fenced_activities_total",
			"Activities refused because the seat's tenure moved on (a stale epoch, or a node that no longer hosts the seat): failovers and moves in progress; a steady rate means two tenures fight over a seat.",
			"activity"),
		epochReads: f.counterVec("crewlet_epoch_reads_total",
			"Round trips to Postgres made only to read a seat's epoch before an activity runs (the fence), by activity: the steps that check their epoch in their own statements are not counted. A reply costs about two (its mail read and ack) and a tool call one.",
			"activity"),
		internalErrors: f.counterVec("crewlet_activity_internal_errors_total",
			"Activities that failed with an internal error (Postgres, Redis, Temporal, a dial): the worker log holds each under its error_id.",
			"activity"),
		modelCalls: f.histogramVec("crewlet_model_call_seconds",
			"Model call duration by profile and outcome (ok, error): a provider slowing down or failing shows here first.",
			[]float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}, "profile", "outcome"),
		spend: f.counterVec("crewlet_spend_usd_total",
			"Money spent on model calls in dollars, by seat (empty unless metrics.seat_labels), role and model, at the price each call's receipt froze: what the money budgets count down.",
			"seat", "role", "model"),
		unpricedTokens: f.counterVec("crewlet_unpriced_tokens_total",
			"Tokens of model calls no price was found for, by seat (empty unless metrics.seat_labels), role and model: add the model to prices: in the org file, or a money budget cannot count them.",
			"seat", "role", "model"),
		modelTokens: f.counterVec("crewlet_model_tokens_total",
			"Tokens spent by profile and direction (input, output): what a subscription's limit or a budget hold is counting down.",
			"profile", "direction"),
		nodesClaimed: f.counter("crewlet_nodes_claimed_total",
			"Dead peer incarnations this node's failure detector claimed: each is a node that stopped beating, whose seats were told to move."),
		hostLostSignals: f.counterVec("crewlet_host_lost_signals_total",
			"host_lost signals sent to the seats of a dead or fenced node, by result (sent, failed): failed ones are retried on a later beat.",
			"result"),
		selfFences: f.counter("crewlet_node_self_fences_total",
			"Times this node fenced itself: it could not write its presence to Postgres long enough that a peer might take its seats, so it stopped their MCP servers and let them go."),
		outagesRidden: f.counter("crewlet_node_store_outages_ridden_total",
			"Times this node kept its seats while it could not write its presence to Postgres, because no peer could either (the Redis witness said so): an outage, not a partition."),
		tenuresMovedOn: f.counter("crewlet_tenures_moved_on_total",
			"Tenures this node ended because the seat was established elsewhere while this node lived: a false failover or a healed partition."),
		presenceFailures: f.counter("crewlet_node_presence_failures_total",
			"Presence writes that failed: Postgres slow or unreachable from this node; enough in a row and it fences itself."),
		turnsStarted: f.counter("crewlet_turns_started_total",
			"Turns begun on this node (counted when BeginTurn completes, again if it re-runs after a lost worker): started far above finished is turns that never end."),
		turnsFinished: f.counterVec("crewlet_turns_finished_total",
			"Turns finished by outcome (done, stopped, failed), counted when their last step completes: a rise in failed is senders getting a failure note instead of an answer.",
			"outcome"),
		budgetHolds: f.counter("crewlet_budget_holds_total",
			"Turns held because a seat's, role's or the company's token budget is spent: mail waits until the window resets."),
		toolCalls: f.counterVec("crewlet_tool_calls_total",
			"Tool calls by server (the MCP server's name, crewlet for first-party tools) and outcome (ok, error, unknown): unknown is a write whose outcome was lost with its worker.",
			"server", "outcome"),
		quarantines: f.counterVec("crewlet_credential_quarantines_total",
			"Credentials quarantined by profile: the provider said the account's usage limit is reached; its profiles take no turn until the quarantine ends.",
			"profile"),
		coolingOffs: f.counterVec("crewlet_credential_cooling_offs_total",
			"Credentials cooled off by profile: its provider failed a turn with a server error, a refused connection or a timeout.",
			"profile"),
		ticketsOpened: f.counter("crewlet_tickets_opened_total",
			"Tickets opened: delegation between seats, and from people."),
		ticketsEnded: f.counterVec("crewlet_tickets_ended_total",
			"Tickets ended by phase (done, failed, cancelled, expired): a rise in failed or expired is delegation that does not come back.",
			"phase"),
		eventsDropped: f.counterVec("crewlet_stream_events_dropped_total",
			"Live-stream events dropped rather than make a turn wait, by reason (full: the emitter's queue was; failed: Redis did not take them in time; redis_full: Redis was past 80 % of maxmemory, whose rest is kept for mail): watchers missed them.",
			"reason"),
		unauthenticated: f.counterVec("crewlet_api_unauthenticated_total",
			"API requests refused before authentication, by reason (no_token, bad_token, host: a Host header not among the API's names, rate_limited: a source past api.auth_failures_per_minute): each is counted here, only a sample is in the audit log; a rise is someone trying the door.",
			"reason"),
		refused: f.counterVec("crewlet_api_refused_total",
			"API requests of an authenticated principal refused (a right it lacks, acting as someone else, over a limit), by its role: each is counted here, only a sample per principal is in the audit log (api.denied_audits_per_minute).",
			"role"),
	}
}

// factory registers series on one registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// Handler serves the registry in Prometheus text format; a nil Metrics
// serves an empty one.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{})
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// GaugeFunc registers a gauge read at each scrape, for a value a component
// already keeps (a node's hosted seats, its last presence write).
func (m *Metrics) GaugeFunc(name, help string, read func() float64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, read))
}

// HTTPRequest records one API request.
func (m *Metrics) HTTPRequest(route string, status int, took time.Duration) {
	if m == nil {
		return
	}
	m.httpRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(took.Seconds())
}

// MailPublished records a message written to a mailbox.
func (m *Metrics) MailPublished() {
	if m != nil {
		m.mailPublished.Inc()
	}
}

// MailRefused records a new message a quota refused, by its error code.
func (m *Metrics) MailRefused(reason string) {
	if m != nil {
		m.mailRefused.WithLabelValues(reason).Inc()
	}
}

// MailRead records entries handed to a seat by one read.
func (m *Metrics) MailRead(n int) {
	if m != nil {
		m.mailRead.Add(float64(n))
	}
}

// MailAcked records entries acked after their turn.
func (m *Metrics) MailAcked(n int) {
	if m != nil {
		m.mailAcked.Add(float64(n))
	}
}

// EpochRead records a round trip the fence made to read a seat's epoch
// before running activity.
func (m *Metrics) EpochRead(activity string) {
	if m != nil {
		m.epochReads.WithLabelValues(activity).Inc()
	}
}

// WakeFailed records a wake signal that did not reach its seat.
func (m *Metrics) WakeFailed() {
	if m != nil {
		m.wakeFailures.Inc()
	}
}

// DeadLettered records n messages a seat gave up on.
func (m *Metrics) DeadLettered(n int) {
	if m != nil {
		m.deadLetters.Add(float64(n))
	}
}

// Fenced records an activity refused for a tenure that moved on.
func (m *Metrics) Fenced(activity string) {
	if m != nil {
		m.fenced.WithLabelValues(activity).Inc()
	}
}

// InternalError records an activity that failed with an internal error.
func (m *Metrics) InternalError(activity string) {
	if m != nil {
		m.internalErrors.WithLabelValues(activity).Inc()
	}
}

// ModelCall records one model call: its duration, whether it answered, and
// the tokens it spent.
func (m *Metrics) ModelCall(profile string, took time.Duration, err error, inputTokens, outputTokens int64) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.modelCalls.WithLabelValues(profile, outcome).Observe(took.Seconds())
	m.modelTokens.WithLabelValues(profile, "input").Add(float64(inputTokens))
	m.modelTokens.WithLabelValues(profile, "output").Add(float64(outputTokens))
}

// Spend records one model call's money receipt, once, when it is first
// written; an unpriced call counts its tokens instead.
func (m *Metrics) Spend(seat, role, model string, nanoUSD int64, priced bool, tokens int64) {
	if m == nil {
		return
	}
	if !priced {
		m.unpricedTokens.WithLabelValues(seat, role, model).Add(float64(tokens))
		return
	}
	m.spend.WithLabelValues(seat, role, model).Add(prices.USD(nanoUSD))
}

// NodeClaimed records a dead peer claimed by this node's detector.
func (m *Metrics) NodeClaimed() {
	if m != nil {
		m.nodesClaimed.Inc()
	}
}

// HostLostSignal records one host_lost signal and whether it was sent.
func (m *Metrics) HostLostSignal(sent bool) {
	if m == nil {
		return
	}
	result := "sent"
	if !sent {
		result = "failed"
	}
	m.hostLostSignals.WithLabelValues(result).Inc()
}

// SelfFenced records the node fencing itself.
func (m *Metrics) SelfFenced() {
	if m != nil {
		m.selfFences.Inc()
	}
}

// OutageRidden records that the node kept its seats through a Postgres
// outage every node shared.
func (m *Metrics) OutageRidden() {
	if m != nil {
		m.outagesRidden.Inc()
	}
}

// TenureMovedOn records a tenure ended because it moved on.
func (m *Metrics) TenureMovedOn() {
	if m != nil {
		m.tenuresMovedOn.Inc()
	}
}

// TurnStarted records a turn begun.
func (m *Metrics) TurnStarted() {
	if m != nil {
		m.turnsStarted.Inc()
	}
}

// TurnFinished records a turn's outcome.
func (m *Metrics) TurnFinished(outcome string) {
	if m != nil {
		m.turnsFinished.WithLabelValues(outcome).Inc()
	}
}

// BudgetHeld records a turn held for a spent budget.
func (m *Metrics) BudgetHeld() {
	if m != nil {
		m.budgetHolds.Inc()
	}
}

// EventDropped records a live-stream event not written, and why.
func (m *Metrics) EventDropped(reason string) {
	if m != nil {
		m.eventsDropped.WithLabelValues(reason).Inc()
	}
}

// Unauthenticated records a request refused before authentication, and why.
func (m *Metrics) Unauthenticated(reason string) {
	if m != nil {
		m.unauthenticated.WithLabelValues(reason).Inc()
	}
}

// Refused counts one refused request of an authenticated principal of role.
func (m *Metrics) Refused(role string) {
	if m != nil {
		m.refused.WithLabelValues(role).Inc()
	}
}

// ToolCall records one tool call's outcome on its server.
func (m *Metrics) ToolCall(server, outcome string) {
	if m != nil {
		m.toolCalls.WithLabelValues(server, outcome).Inc()
	}
}

// Quarantined records a credential quarantined, by the profile that hit
// its limit.
func (m *Metrics) Quarantined(profile string) {
	if m != nil {
		m.quarantines.WithLabelValues(profile).Inc()
	}
}

// CooledOff records a credential cooled off, by profile.
func (m *Metrics) CooledOff(profile string) {
	if m != nil {
		m.coolingOffs.WithLabelValues(profile).Inc()
	}
}

// TicketOpened records a ticket opened.
func (m *Metrics) TicketOpened() {
	if m != nil {
		m.ticketsOpened.Inc()
	}
}

// TicketEnded records a ticket ended, by its phase.
func (m *Metrics) TicketEnded(phase string) {
	if m != nil {
		m.ticketsEnded.WithLabelValues(phase).Inc()
	}
}

// PresenceFailed records a presence write that failed.
func (m *Metrics) PresenceFailed() {
	if m != nil {
		m.presenceFailures.Inc()
	}
}
