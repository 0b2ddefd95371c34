package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// WrapConnect puts wrap around the watch's connect, so that a test can hold
// a reconnect.
func (w *TicketWatch) WrapConnect(wrap func(ctx context.Context, connect func(context.Context) (*pgx.Conn, error)) (*pgx.Conn, error)) {
	connect := w.connect
	w.connect = func(ctx context.Context) (*pgx.Conn, error) { return wrap(ctx, connect) }
}

// Waiting is how many wait on ticket id.
func (w *TicketWatch) Waiting(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiters[id])
}
