package store_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

type awaited struct {
	ticket crewlet.Ticket
	err    error
	at     time.Time
}

// await runs w.Await for ticket in the background, once it waits.
func await(t *testing.T, w *store.TicketWatch, ctx context.Context, ticket crewlet.Ticket, within time.Duration) <-chan awaited {
	t.Helper()
	done := make(chan awaited, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		tk, err := w.Await(ctx, ticket)
		done <- awaited{tk, err, time.Now()}
	}()
	testenv.Eventually(t, 20*time.Second, "the waiter subscribed", func() error {
		if w.Waiting(ticket.ID) != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	return done
}

// listenerPID is the backend of the watch's LISTEN, once there is one.
func listenerPID(t *testing.T, db *pgx.Conn, ctx context.Context) int32 {
	t.Helper()
	var pid int32
	testenv.Eventually(t, 20*time.Second, "the ticket listener listens", func() error {
		return db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN crewlet_ticket' AND datname = current_database()`).Scan(&pid)
	})
	return pid
}

func runWatch(t *testing.T, w *store.TicketWatch) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
}

func TestTicketWaiterWakesWhenTheTicketSettles(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	w := st.WatchTickets(slog.New(slog.DiscardHandler))
	runWatch(t, w)
	listenerPID(t, db, ctx)
	var total time.Duration
	const n = 20
	for i := range n {
		tk := newTicket(t, st, ctx, "wake-"+string(rune('a'+i)), "bob")
		done := await(t, w, ctx, tk, 20*time.Second)
		if _, settled, err := st.SettleTicket(ctx, tk.ID, "the reply"); err != nil || !settled {
			t.Fatalf("SettleTicket: %v %v", settled, err)
		}
		// Committed: from here on the waiter may see it.
		start := time.Now()
		got := <-done
		if got.err != nil || got.ticket.Phase != crewlet.TicketDone || got.ticket.Reply != "the reply" {
			t.Fatalf("Await = %+v, %v; want the ticket done with its reply", got.ticket, got.err)
		}
		total += got.at.Sub(start)
	}
	// The figure docs/architecture.md quotes; the poll this replaced woke
	// every 200 ms.
	t.Logf("settle → waiter returned: %s on average over %d tickets", total/n, n)
}

func TestTicketWaiterSeesAChangeMissedWhileTheListenerWasDown(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	w := st.WatchTickets(slog.New(slog.DiscardHandler))
	var connects atomic.Int32
	reconnecting := make(chan struct{})
	gate := make(chan struct{})
	w.WrapConnect(func(ctx context.Context, connect func(context.Context) (*pgx.Conn, error)) (*pgx.Conn, error) {
		if connects.Add(1) == 2 {
			close(reconnecting)
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return connect(ctx)
	})
	runWatch(t, w)
	pid := listenerPID(t, db, ctx)
	tk := newTicket(t, st, ctx, "missed", "bob")
	done := await(t, w, ctx, tk, 20*time.Second)

	var killed bool
	if err := db.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener: %v %v", killed, err)
	}
	<-reconnecting
	// Notified to nobody: the listener is down.
	if _, ended, err := st.EndTicket(ctx, tk.ID, crewlet.TicketCancelled, "cancelled by ops"); err != nil || !ended {
		t.Fatalf("EndTicket: %v %v", ended, err)
	}
	select {
	case got := <-done:
		t.Fatalf("the waiter returned %+v before the listener was back", got.ticket)
	default:
	}
	close(gate)
	got := <-done
	if got.err != nil || got.ticket.Phase != crewlet.TicketCancelled {
		t.Fatalf("Await = %s, %v; want the ticket cancelled once the listener is back", got.ticket.Phase, got.err)
	}
}

func TestTicketWaitEndsAtItsDeadline(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	w := st.WatchTickets(slog.New(slog.DiscardHandler))
	runWatch(t, w)
	tk := newTicket(t, st, ctx, "deadline", "bob")
	got := <-await(t, w, ctx, tk, 300*time.Millisecond)
	if got.err != nil || got.ticket.Phase != crewlet.TicketPending {
		t.Fatalf("Await = %s, %v; want the ticket still pending, no error", got.ticket.Phase, got.err)
	}
	if n := w.Waiting(tk.ID); n != 0 {
		t.Errorf("%d still subscribed after the wait ended", n)
	}
}
