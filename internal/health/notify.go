package health

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// Notification is the JSON body a webhook of health.notify receives.
type Notification struct {
	Company string             `json:"company"`
	Seat    string             `json:"seat"`
	From    crewlet.SeatHealth `json:"from"`
	To      crewlet.SeatHealth `json:"to"`
	Cause   string             `json:"cause"`
	At      time.Time          `json:"at"`
}

// NotifyQueue bounds the transitions waiting for one webhook; past it a
// transition is dropped and logged (seat_health_notify_dropped), so a
// webhook that is down never holds up the monitor.
const NotifyQueue = 256

// Notifier posts health transitions to the webhooks of health.notify, each
// from its own bounded queue, retried with back-off.
type Notifier struct {
	company string
	hooks   []*hook
	log     *slog.Logger
	wg      sync.WaitGroup
	// ctx ends with Stop, and with it any post in flight.
	ctx    context.Context
	cancel context.CancelFunc
	// Backoff is the first retry's delay, doubled each retry; Attempts
	// bounds the tries of one post.
	Backoff  time.Duration
	Attempts int
}

type hook struct {
	config.HealthNotify
	queue chan Notification
}

// NewNotifier returns the notifier of org's health.notify, nil when there
// is none (a nil Notifier posts nothing).
func NewNotifier(org *config.Config, log *slog.Logger) *Notifier {
	if len(org.Health.Notify) == 0 {
		return nil
	}
	n := &Notifier{company: org.Company.Name, log: log, Backoff: time.Second, Attempts: 6}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for _, h := range org.Health.Notify {
		n.hooks = append(n.hooks, &hook{HealthNotify: h, queue: make(chan Notification, NotifyQueue)})
	}
	return n
}

// Start runs one sender per webhook until Stop.
func (n *Notifier) Start() {
	if n == nil {
		return
	}
	// A redirect is not followed: the hook's headers (headers_from, often
	// a bearer token) would go to wherever the redirect points. It fails
	// the delivery, naming where it pointed.
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	for _, h := range n.hooks {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for {
				select {
				case <-n.ctx.Done():
					return
				case note := <-h.queue:
					n.send(client, h, note)
				}
			}
		}()
	}
}

// Stop ends the senders, and the posts in flight; what is still queued is
// not sent.
func (n *Notifier) Stop() {
	if n == nil {
		return
	}
	n.cancel()
	n.wg.Wait()
}

// Post queues a transition for every webhook whose states name its from or
// to state. It never blocks.
func (n *Notifier) Post(t crewlet.HealthTransition) {
	if n == nil {
		return
	}
	note := Notification{Company: n.company, Seat: t.Seat, From: t.From, To: t.To, Cause: t.Cause, At: t.At}
	for _, h := range n.hooks {
		if len(h.States) > 0 && !slices.Contains(h.States, string(t.To)) && !slices.Contains(h.States, string(t.From)) {
			continue
		}
		select {
		case h.queue <- note:
		default:
			n.log.Warn("seat_health_notify_dropped", "url", h.URL, "seat", t.Seat, "to", t.To, "reason", "queue full")
		}
	}
}

// send posts one notification, retrying with back-off until it is taken
// (2xx), refused for good (4xx other than 408 and 429), or out of attempts.
func (n *Notifier) send(client *http.Client, h *hook, note Notification) {
	body, _ := json.Marshal(note)
	delay := n.Backoff
	for attempt := 1; ; attempt++ {
		err := post(n.ctx, client, h, body)
		if err == nil || n.ctx.Err() != nil {
			return
		}
		var refused *refusedError
		if errors.As(err, &refused) || attempt >= n.Attempts {
			n.log.Warn("seat_health_notify_failed", "url", h.URL, "seat", note.Seat, "to", note.To, "attempts", attempt, "error", err)
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay *= 2
	}
}

type refusedError struct {
	status int
	// location is where a redirect pointed.
	location string
}

func (e *refusedError) Error() string {
	if e.location != "" {
		return fmt.Sprintf("answered HTTP %d, a redirect to %s, which is not followed (it would carry the hook's headers); set the webhook's url to the final address", e.status, e.location)
	}
	return fmt.Sprintf("refused with HTTP %d", e.status)
}

func post(ctx context.Context, client *http.Client, h *hook, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h.Headers() {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode < 400:
		return &refusedError{status: resp.StatusCode, location: crewlet.Clean(resp.Header.Get("Location"))}
	case resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return &refusedError{status: resp.StatusCode}
	}
	return fmt.Errorf("HTTP %d", resp.StatusCode)
}
