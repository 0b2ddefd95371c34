package push

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/store"
)

// Delivery's bounds: each attempt times out after attemptTimeout; a
// failed one is tried again after firstRetry, doubled each time up to
// maxRetry, with jitter; after maxAttempts attempts, or once a
// notification is maxAge old, it is given up on. A claim holds a
// notification for lease, well past an attempt, so two processes post it
// at once only when one stalled past the lease.
const (
	attemptTimeout = 10 * time.Second
	lease          = time.Minute
	firstRetry     = 2 * time.Second
	maxRetry       = 10 * time.Minute
	maxAttempts    = 12
	maxAge         = 24 * time.Hour
	// keepFinished is how long a notification delivered or given up on is
	// kept, to read why, before the dispatcher deletes it.
	keepFinished = 24 * time.Hour
	// batch is the most notifications one pass claims, posted at once.
	batch = 16
)

// Dispatcher posts the notifications the outbox owes, in each API
// process: any process posts any task's, each once it is claimed.
type Dispatcher struct {
	Store *store.Store
	// Allow is the org's a2a.push.allow, read at each delivery.
	Allow func() []string
	Log   *slog.Logger
	// Every is how often it looks for notifications due.
	Every  time.Duration
	client *http.Client
	now    func() time.Time
}

// allowedKey marks a delivery's context when its URL is in
// a2a.push.allow: its dial may reach an internal address.
type allowedKey struct{}

// NewDispatcher is a dispatcher of st's outbox, that looks every every.
func NewDispatcher(st *store.Store, allow func() []string, log *slog.Logger, every time.Duration) *Dispatcher {
	dialer := &net.Dialer{Timeout: attemptTimeout, ControlContext: func(ctx context.Context, _, address string, _ syscall.RawConn) error {
		if allowed, _ := ctx.Value(allowedKey{}).(bool); allowed {
			return nil
		}
		return checkDial(address)
	}}
	return &Dispatcher{Store: st, Allow: allow, Log: log, Every: every, now: time.Now,
		client: &http.Client{
			Timeout: attemptTimeout,
			// A proxy would dial for it, past the check; a keep-alive
			// connection, dialed for an allowed URL, would carry another
			// URL of its host; a redirect would lead anywhere.
			Transport:     &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true, TLSHandshakeTimeout: attemptTimeout},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}}
}

// Run posts what is due every d.Every, and trims what is finished, until
// ctx ends.
func (d *Dispatcher) Run(ctx context.Context) {
	tick := time.NewTicker(d.Every)
	defer tick.Stop()
	lastTrim := time.Time{}
	for {
		// A full batch says more may be due.
		for full := true; full && ctx.Err() == nil; {
			full = d.Pass(ctx) == batch
		}
		if now := d.now(); now.Sub(lastTrim) > time.Hour {
			if n, err := d.Store.TrimPushes(ctx, keepFinished); err != nil {
				d.Log.WarnContext(ctx, "a2a_push_trim_failed", "error", err)
			} else if n > 0 {
				d.Log.InfoContext(ctx, "a2a_push_trimmed", "notifications", n)
			}
			lastTrim = now
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Pass claims the notifications due and posts them, and says how many it
// claimed.
func (d *Dispatcher) Pass(ctx context.Context) int {
	pushes, err := d.Store.ClaimPushes(ctx, batch, lease)
	if err != nil {
		if ctx.Err() == nil {
			d.Log.WarnContext(ctx, "a2a_push_claim_failed", "error", err)
		}
		return 0
	}
	var wg sync.WaitGroup
	for _, p := range pushes {
		wg.Go(func() { d.deliver(ctx, p) })
	}
	wg.Wait()
	return len(pushes)
}

// deliver posts p and records the outcome: delivered on a 2xx, else tried
// again later or given up on.
func (d *Dispatcher) deliver(ctx context.Context, p store.Push) {
	err := d.post(ctx, p)
	if ctx.Err() != nil {
		return // the process stops: the lease passes and another posts it
	}
	if err == nil {
		if err := d.Store.PushDelivered(ctx, p.ID); err != nil {
			d.Log.WarnContext(ctx, "a2a_push_unrecorded", "notification", p.ID, "error", err)
		}
		return
	}
	why := crewlet.OneLine(err.Error(), 512)
	retry := Backoff(p.Attempts, rand.Float64())
	if p.Attempts >= maxAttempts || d.now().Add(retry).Sub(p.CreatedAt) > maxAge {
		retry = 0
		d.Log.WarnContext(ctx, "a2a_push_gave_up", "notification", p.ID, "task", p.Ticket.ID, "config", p.Config.ID,
			"state", a2a.StateOf(p.Ticket.Phase), "attempts", p.Attempts, "error", why)
	}
	if err := d.Store.PushFailed(ctx, p.ID, why, retry); err != nil {
		d.Log.WarnContext(ctx, "a2a_push_unrecorded", "notification", p.ID, "error", err)
	}
}

// Backoff is how long to wait after failed attempt n (1 for the first):
// firstRetry doubled per attempt up to maxRetry, of which jitter (0 to 1)
// takes up to half away, so receivers that failed together are not
// retried together.
func Backoff(n int, jitter float64) time.Duration {
	wait := maxRetry
	if n < 20 {
		wait = min(firstRetry<<(n-1), maxRetry)
	}
	return wait - time.Duration(jitter*float64(wait/2))
}

// Body is the notification of a state change of t: the task as it stood
// then, waiting for approval when waiting is set, as an A2A stream
// response.
func Body(t crewlet.Ticket, waiting *crewlet.Approval) ([]byte, error) {
	task := a2a.TaskOf(t)
	if waiting != nil {
		a2a.AwaitingApproval(&task, t, *waiting)
	}
	return json.Marshal(a2a.StreamResponse{Task: &task})
}

func (d *Dispatcher) post(ctx context.Context, p store.Push) error {
	body, err := Body(p.Ticket, p.Approval)
	if err != nil {
		return err
	}
	ctx = context.WithValue(ctx, allowedKey{}, Allowed(p.Config.URL, d.Allow()))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Config.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(d.now().Unix(), 10)
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set(TokenHeader, p.Config.Token)
	req.Header.Set(EventIDHeader, strconv.FormatInt(p.ID, 10))
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(SignatureHeader, Sign(p.Config.Token, ts, body))
	if p.Config.AuthScheme != "" {
		req.Header.Set("Authorization", p.Config.AuthScheme+" "+p.Config.AuthCredentials)
	}
	resp, err := d.client.Do(req)
	if urlErr, ok := err.(*url.Error); ok {
		return urlErr.Err // its URL may hold a secret in its query
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}
