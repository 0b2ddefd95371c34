package health

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// queryCounter counts the queries a Store sends.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// runningSeats is the real list of seat workflows (what a pass pays
// Temporal for) plus the seats the benchmark cannot afford to run as
// workflows, shown idle as the list would show them.
type runningSeats struct {
	real Lister
	idle map[string]crewlet.SeatStatus
}

func (r runningSeats) Statuses(ctx context.Context) (map[string]crewlet.SeatStatus, error) {
	out, err := r.real.Statuses(ctx)
	if err != nil {
		return nil, err
	}
	maps.Copy(out, r.idle)
	return out, nil
}

// BenchmarkHealthPass10000Seats times one pass over 10,000 agent seats with
// 50,000 turns, 1,000 waits, 100 seats' dead letters and a mailbox each,
// and reports the Postgres queries and Temporal calls per pass: both must
// stay flat as the seats grow (Temporal's list pages at 1,000 running
// workflows a page; the seats here are not run as workflows, so it is one
// page).
func BenchmarkHealthPass10000Seats(b *testing.B) {
	const seats = 10_000
	org := monitorOrg(b, seats)
	url := testenv.MigratedDatabase(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	seed(b, ctx, url, seats)
	queries := &queryCounter{}
	st, err := store.OpenTraced(ctx, url, queries)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var temporalCalls atomic.Int64
	tc, err := client.Dial(client.Options{HostPort: testenv.Stack(b).Temporal, ConnectionOptions: client.ConnectionOptions{
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			temporalCalls.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		})},
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer tc.Close()
	idle := map[string]crewlet.SeatStatus{}
	for i := range seats {
		idle[fmt.Sprintf("s%d", i)] = crewlet.StatusIdle
	}
	m, _ := newMonitor(b, org, st, runningSeats{seatclient.New(tc, org), idle}, &testenv.Log{})
	for i := range seats {
		if err := m.Mailbox.Ensure(ctx, fmt.Sprintf("s%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	// The first pass records every seat; the benchmark times the steady
	// state, where transitions are few.
	if _, err := m.Pass(ctx); err != nil {
		b.Fatal(err)
	}
	queries.n.Store(0)
	temporalCalls.Store(0)
	b.ResetTimer()
	for b.Loop() {
		out, err := m.Pass(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if out.Seats != seats || out.Unknown {
			b.Fatalf("pass %+v", out)
		}
	}
	b.ReportMetric(float64(queries.n.Load())/float64(b.N), "queries/pass")
	b.ReportMetric(float64(temporalCalls.Load())/float64(b.N), "temporal_calls/pass")
}

// seed writes the benchmark's seats, turns, waits, dead letters and usage.
func seed(b *testing.B, ctx context.Context, url string, seats int) {
	b.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		`INSERT INTO seats (handle, role, kind, epoch, node, status)
		 SELECT 's' || i, 'eng', 'agent', 1, 'n1', 'active' FROM generate_series(0, $1 - 1) i`,
		`INSERT INTO turns (seat, work_key, turn_id, epoch, status, started_at, finished_at)
		 SELECT 's' || i, 'w' || j, 'turn/s' || i || '/w' || j, 1, CASE WHEN j = 1 THEN 'failed' ELSE 'done' END,
		        now() - make_interval(mins => j), now() - make_interval(mins => j)
		 FROM generate_series(0, $1 - 1) i, generate_series(0, 4) j`,
		`INSERT INTO tickets (id, create_key, from_handle, from_seat, to_handle, task, conversation, request_event, waiter)
		 SELECT 't-' || i, 'k-' || i, 's' || i, true, 's' || ((i + 1) % $1), 'task', 'c', 'e-' || i, 'turn/s' || i || '/w0'
		 FROM generate_series(0, $1 / 10 - 1) i`,
		`INSERT INTO seat_events (seat, kind) SELECT 's' || (i * 100), 'dead_lettered' FROM generate_series(0, $1 / 100 - 1) i`,
		`INSERT INTO usage_counters (scope, window_name, window_start, tokens)
		 SELECT 'seat:s' || i, 'day', date_trunc('day', now()), 1000 FROM generate_series(0, $1 - 1) i`,
	} {
		if _, err := conn.Exec(ctx, sql, seats); err != nil {
			b.Fatalf("seed: %v\n%s", err, sql)
		}
	}
}
