package metrics

import (
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
)

// Temporal returns the Temporal SDK's metrics handler over this registry:
// what the SDK counts (requests and their failures, polls, workflow task
// failures and latencies, schedule-to-start, the sticky cache) becomes
// temporal_* series, counters ending in _total and timers in _seconds.
func (m *Metrics) Temporal() client.MetricsHandler {
	if m == nil {
		return client.MetricsNopHandler
	}
	return temporalHandler{series: &temporalSeries{reg: m.reg, vecs: map[string]*labelled{}}}
}

// temporalSeries holds the SDK's series: Prometheus fixes a series' labels
// when it is made, so each name keeps the tag keys it was first used with;
// a later use fills a missing key with "" and drops a key it lacks.
type temporalSeries struct {
	reg  *prometheus.Registry
	mu   sync.Mutex
	vecs map[string]*labelled
}

type labelled struct {
	keys []string
	vec  prometheus.Collector
}

type temporalHandler struct {
	series *temporalSeries
	tags   map[string]string
}

func (h temporalHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[promName(k)] = v
	}
	return temporalHandler{series: h.series, tags: merged}
}

func (h temporalHandler) Counter(name string) client.MetricsCounter {
	vec, values := h.series.get(promName(name)+"_total", h.tags, func(name string, keys []string) prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: sdkHelp(name, "counter")}, keys)
	})
	c, ok := vec.(*prometheus.CounterVec)
	if !ok {
		return client.MetricsNopHandler.Counter(name)
	}
	counter := c.WithLabelValues(values...)
	return counterFunc(func(d int64) { counter.Add(float64(d)) })
}

func (h temporalHandler) Gauge(name string) client.MetricsGauge {
	vec, values := h.series.get(promName(name), h.tags, func(name string, keys []string) prometheus.Collector {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: sdkHelp(name, "gauge")}, keys)
	})
	g, ok := vec.(*prometheus.GaugeVec)
	if !ok {
		return client.MetricsNopHandler.Gauge(name)
	}
	gauge := g.WithLabelValues(values...)
	return gaugeFunc(gauge.Set)
}

func (h temporalHandler) Timer(name string) client.MetricsTimer {
	vec, values := h.series.get(promName(name)+"_seconds", h.tags, func(name string, keys []string) prometheus.Collector {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: sdkHelp(name, "timer"),
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60}}, keys)
	})
	t, ok := vec.(*prometheus.HistogramVec)
	if !ok {
		return client.MetricsNopHandler.Timer(name)
	}
	observer := t.WithLabelValues(values...)
	return timerFunc(func(d time.Duration) { observer.Observe(d.Seconds()) })
}

// get returns the series called name, made by newVec with the keys of tags
// the first time, and the label values tags gives it.
func (s *temporalSeries) get(name string, tags map[string]string, newVec func(string, []string) prometheus.Collector) (prometheus.Collector, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.vecs[name]
	if !ok {
		keys := make([]string, 0, len(tags))
		for k := range tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		l = &labelled{keys: keys, vec: newVec(name, keys)}
		if err := s.reg.Register(l.vec); err != nil {
			l.vec = nil // a name crewlet itself uses: the SDK's is dropped
		}
		s.vecs[name] = l
	}
	values := make([]string, len(l.keys))
	for i, k := range l.keys {
		values[i] = tags[k]
	}
	return l.vec, values
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }

var notNameChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// workflowHelp documents the series crewlet's workflows record through the
// SDK's handler, which only the workflow can record replay-safely.
var workflowHelp = map[string]string{
	crewlet.MetricEstablish + "_seconds": "How long a seat was without a tenure before it established one (placed and attached), by workflow type: " +
		"a slow placement, a node refusing attaches, or a failover that takes longer than the heartbeat timeout.",
}

// sdkHelp is the help line of an SDK handler series.
func sdkHelp(name, kind string) string {
	if h, ok := workflowHelp[name]; ok {
		return h
	}
	return "Temporal SDK " + kind + " " + name + "."
}

// promName is name as a Prometheus metric or label name. The SDK names
// every metric and tag on each recording, and its names are nearly always
// valid already: those are returned as they are, without the regexp, which
// was a few percent of a loaded worker's CPU.
func promName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return notNameChar.ReplaceAllString(strings.TrimSpace(name), "_")
		}
	}
	return name
}
