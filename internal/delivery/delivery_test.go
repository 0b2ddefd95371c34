package delivery

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/testenv"
)

// syncBuffer is a log the background wake writes to while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// While Temporal does not answer, a publish answers within its wake wait
// with the mail durable in the seat's stream, and a wake that fails lowers
// the seat's awake flag, so the next publish tries a wake again instead of
// trusting a seat that never heard one. Down is both a server that refuses
// (killed: the wake fails at once) and one that hangs (a black hole: the
// publish answers after the wake wait, and the wake goes on in the
// background, its flag up meanwhile so later mail adds no wake of its own,
// until it gives up).
func TestPublishDoesNotWaitOnTemporalThatIsDown(t *testing.T) {
	refused := "127.0.0.1:1" // nothing listens on port 1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn // open, never answered
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	for _, tc := range []struct {
		name     string
		addr     string
		inFlight bool
	}{
		{"refused", refused, false},
		{"hangs", ln.Addr().String(), true},
	} {
		t.Run(tc.name, func(t *testing.T) { publishWithTemporalDown(t, tc.addr, tc.inFlight) })
	}
}

func publishWithTemporalDown(t *testing.T, addr string, inFlight bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	org, err := config.Parse([]byte(`company: { name: acme }
profiles: { local: { provider: scripted } }
roles: { worker: { charter: works, profile: local } }
seats: [ { handle: cto, role: worker } ]
`))
	if err != nil {
		t.Fatal(err)
	}
	prefix := "dltest" + testenv.Suffix()
	mb, err := mailbox.Open(ctx, testenv.Stack(t).RedisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Delete(context.Background(), "cto"); _ = mb.Close() })
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	quiet := tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	tc, err := client.NewLazyClient(client.Options{HostPort: addr, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	var logged syncBuffer
	d := New(org, mb, seatclient.New(tc, org), nil, nil, slog.New(slog.NewTextHandler(&logged, nil)))
	d.wakeWait, d.wakeGiveUp = 200*time.Millisecond, 2*time.Second
	awake := func() bool {
		n, err := mb.Redis().Exists(ctx, prefix+":seat:cto:awake").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	for i, text := range []string{"first", "second"} {
		began := time.Now()
		msg, err := d.Send(ctx, SendRequest{To: "cto", Text: text})
		took := time.Since(began)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if took > time.Second {
			t.Errorf("send %d took %s with Temporal down; want under 1s", i, took)
		}
		if msg.StreamID == "" {
			t.Errorf("send %d: no stream id; want the mail in the stream", i)
		}
		if inFlight && !awake() {
			t.Errorf("send %d: awake flag down while its wake is in flight", i)
		}
		testenv.Eventually(t, 10*time.Second, "awake flag lowered after the wake failed", func() error {
			if awake() {
				return errors.New("awake flag still up")
			}
			return nil
		})
	}
	if n := strings.Count(logged.String(), "msg=wake_failed"); n != 2 {
		t.Errorf("%d wake_failed lines; want one per publish, 2:\n%s", n, logged.String())
	}
	if n, err := mb.Redis().XLen(ctx, mb.Stream("cto")).Result(); err != nil || n != 2 {
		t.Errorf("stream holds %d entries (%v); want 2", n, err)
	}
}
