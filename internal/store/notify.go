package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

// ticketChannel is the channel migration 0029's trigger notifies, in the
// transaction that changes a ticket's phase, with the ticket's id.
const ticketChannel = "crewlet_ticket"

// Timing of the listening connection: how long it waits for a notification
// before it checks the connection is alive (a connection that died without
// a word would otherwise wait forever), and the back-off between attempts
// to connect again.
var (
	listenPing     = 30 * time.Second
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 10 * time.Second
)

// TicketWatch wakes those who wait for a ticket to change (a POST /tickets
// long-poll) when it does: one LISTEN connection per process, whose
// notifications are fanned out by ticket id. A notification is a wake, not
// the data: the waiter reads the ticket again. Notifications sent while the
// connection was down are lost, so each time it is made again every waiter
// is woken to read again (docs/architecture.md, "Ticket waits").
type TicketWatch struct {
	st  *Store
	log *slog.Logger
	// connect opens the listening connection: a connection of its own, not
	// one of the pool's, which it would hold for as long as the process.
	connect func(context.Context) (*pgx.Conn, error)

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// WatchTickets returns the store's ticket watch; Run listens.
func (s *Store) WatchTickets(log *slog.Logger) *TicketWatch {
	cfg := s.pool.Config().ConnConfig
	return &TicketWatch{
		st: s, log: log,
		connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg.Copy()) },
		waiters: map[string]map[chan struct{}]struct{}{},
	}
}

// Run listens until ctx ends, connecting again with back-off whenever the
// connection is lost.
func (w *TicketWatch) Run(ctx context.Context) {
	retry := listenRetryMin
	for {
		listened, err := w.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			retry = listenRetryMin
		}
		w.log.Warn("ticket_listener_lost", "error", err, "retry_in", retry.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, listenRetryMax)
	}
}

// listen runs one listening connection until it fails; listened says it
// got as far as listening.
func (w *TicketWatch) listen(ctx context.Context) (listened bool, err error) {
	conn, err := w.connect(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+ticketChannel); err != nil {
		return false, err
	}
	// Whatever changed before this LISTEN was notified to nobody here.
	w.wakeAll()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			w.wake(n.Payload)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			pingCtx, cancel := context.WithTimeout(ctx, listenPing)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, err
			}
		default:
			return true, err
		}
	}
}

// Subscribe wakes the channel it returns each time ticket id changes
// phase, until stop is called; wakes that come while the reader reads
// coalesce. A wake is not the data: read the ticket after subscribing.
func (w *TicketWatch) Subscribe(id string) (woken <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters[id] == nil {
		w.waiters[id] = map[chan struct{}]struct{}{}
	}
	w.waiters[id][ch] = struct{}{}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waiters[id], ch)
		if len(w.waiters[id]) == 0 {
			delete(w.waiters, id)
		}
	}
}

func (w *TicketWatch) wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[id] {
		poke(ch)
	}
}

func (w *TicketWatch) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, chs := range w.waiters {
		for ch := range chs {
			poke(ch)
		}
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Await returns the ticket once it has ended, or as it stands when ctx
// ends first (then with no error: the wait ran out, the ticket did not).
func (w *TicketWatch) Await(ctx context.Context, ticket crewlet.Ticket) (crewlet.Ticket, error) {
	return w.AwaitUntil(ctx, ticket, func(t crewlet.Ticket) bool { return !t.Phase.Open() })
}

// AwaitUntil returns the ticket once until holds of it, or as it stands
// when ctx ends first.
func (w *TicketWatch) AwaitUntil(ctx context.Context, ticket crewlet.Ticket, until func(crewlet.Ticket) bool) (crewlet.Ticket, error) {
	woken, stop := w.Subscribe(ticket.ID)
	defer stop()
	for {
		// Read after subscribing: a change between the caller's read and
		// the subscription is in this read, and one after it wakes us.
		t, err := w.st.Ticket(context.WithoutCancel(ctx), ticket.ID)
		if err != nil {
			return ticket, err
		}
		ticket = t
		if until(ticket) {
			return ticket, nil
		}
		select {
		case <-ctx.Done():
			return ticket, nil
		case <-woken:
		}
	}
}
