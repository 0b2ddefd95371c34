package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/views"
	"github.com/crewlet/crewlet/internal/wire"
)

type bundle struct {
	st   *store.Store
	ctx  context.Context
	base string
	now  time.Time
}

// setup serves the API over a fresh database with the clock at noon UTC on
// 10 June 2026; cto's role caps a day at 100 tokens.
func setup(t *testing.T) bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st := testenv.Store(t, testenv.MigratedDatabase(t))
	org := &config.Config{
		Company: config.Company{Name: "acme", Timezone: "UTC", Budget: config.Budget{TokensPerMonth: 5000}},
		Roles:   map[string]config.Role{"engineer": {Charter: "builds", Profile: "local", Budget: config.Budget{TokensPerDay: 100}}},
		Seats:   []config.Seat{{Handle: "cto", Role: "engineer", Kind: string(crewlet.SeatAgent)}},
	}
	now := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	read := views.New(org, seatclient.New(nil, org), st, nil)
	read.Now = func() time.Time { return now }
	srv := httptest.NewServer((&api.Server{Org: org, Views: read, Store: st, Log: log, LocalToken: bundleToken}).Handler())
	t.Cleanup(srv.Close)
	return bundle{st: st, ctx: ctx, base: srv.URL, now: now}
}

// bundleToken is the admin token the bundle's API takes, as one minted by a
// tokenless org's API.
const bundleToken = "bundle-local-token-0123456789abcdef"

// crewlet runs a client command against the bundle's API and returns its
// output.
func (b bundle) crewlet(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(b.ctx, append(args, "--api", b.base, "--token", bundleToken), &out, &errOut)
	return out.String(), err
}

func (b bundle) turn(t *testing.T, workKey string, msgs ...wire.TurnMessage) {
	t.Helper()
	testenv.SeatAtEpoch(t, b.ctx, b.st, "cto", 3)
	_, err := b.st.OpenTurn(b.ctx, wire.TurnRow{
		Seat: "cto", WorkKey: workKey, TurnID: crewlet.TurnWorkflowID("cto", workKey), Epoch: 3, MaxRounds: 8,
		Mail:      []crewlet.Message{{EventID: "ev-" + workKey, Type: crewlet.MessageChat, From: "alice", To: "cto", Body: "question"}},
		Threads:   []int{0},
		StartedAt: b.now.Add(-time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := b.st.AppendTurnMessage(b.ctx, "cto", crewlet.ThreadKey("ev-"+workKey), m); err != nil {
			t.Fatal(err)
		}
	}
}

func (b bundle) round(t *testing.T, workKey string, round int, in, out int64) {
	t.Helper()
	_, err := b.st.RecordRound(b.ctx, wire.RoundRow{
		Seat: "cto", WorkKey: crewlet.ThreadKey("ev-" + workKey), Round: round, Profile: "local",
		SystemSHA256: "0123456789abcdef" + strings.Repeat("0", 48), SystemBytes: 812,
		InputTokens: in, OutputTokens: out, RecordedAt: b.now.Add(-time.Minute),
	}, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestSeatsUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, err := b.crewlet(t, "seats", "usage", "cto")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "SCOPE", "RESETS AT", "not held; windows run on UTC")

	b.round(t, "wk1", 1, 90, 30)
	out, err = b.crewlet(t, "seats", "usage", "cto")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out,
		"seat     day     120   100   2026-06-11T00:00:00Z",
		"company  month   120   5000  2026-07-01T00:00:00Z",
		"held: the seat day cap of 100 tokens is reached (120 used); turns wait until 2026-06-11T00:00:00Z (UTC)")

	_, err = b.crewlet(t, "seats", "usage", "nobody")
	if err == nil || !strings.Contains(err.Error(), `no seat "nobody"`) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("usage of an unknown seat: %v; want the API's 404", err)
	}
}

func TestSeatsTurnsAndTurnShow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.turn(t, "wk1",
		wire.TurnMessage{Thread: 0, Key: "user", Message: crewlet.ChatMessage{Role: "user", Content: "alice asks: question"}},
		wire.TurnMessage{Thread: 0, Key: "r1", Round: 1, Message: crewlet.ChatMessage{Role: "assistant", Content: "let me look",
			ToolCalls: []crewlet.ToolCall{{ID: "call-1", Name: "read_file", Args: json.RawMessage(`{"path":"go.mod"}`)}}}},
		wire.TurnMessage{Thread: 0, Key: "r1c1", Round: 1, Message: crewlet.ChatMessage{Role: "tool", ToolCallID: "call-1", Content: "module x"}},
		wire.TurnMessage{Thread: 0, Key: "r2", Round: 2, Message: crewlet.ChatMessage{Role: "assistant", Content: "it is x"}},
		wire.TurnMessage{Thread: 0, Key: "note", Message: crewlet.ChatMessage{Role: "note", Content: "stopped by bob"}},
	)
	b.round(t, "wk1", 1, 40, 5)
	b.round(t, "wk1", 2, 50, 7)
	if _, err := b.st.FinishTurn(b.ctx, "cto", "wk1", string(crewlet.TurnStopped), "stopped by bob", "bob", 2); err != nil {
		t.Fatal(err)
	}

	out, err := b.crewlet(t, "seats", "turns", "cto")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "ID", "turn/cto/wk1  stopped  2       2026-06-10T11:00:00Z  stopped by bob")

	out, err = b.crewlet(t, "turn", "show", "turn/cto/wk1")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out,
		"turn/cto/wk1  stopped, 2 rounds (max 8), epoch 3",
		"stopped by bob",
		"thread 0 (answers ev-wk1 from alice)",
		"  [user] alice asks: question",
		`  [assistant] let me look -> tool_calls read_file({"path":"go.mod"})`,
		"  [tool read_file] module x",
		"  [assistant] it is x",
		"  [note] stopped by bob",
		"receipts:",
		"  1      local    0123456789ab  812    40         5",
		"  2      local    0123456789ab  812    50         7",
	)

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown turn", []string{"turn", "show", "turn/cto/nope"}, "404"},
		{"not a turn id", []string{"turn", "show", "cto"}, "is not turn/HANDLE/WORK_KEY"},
		{"bad limit", []string{"seats", "turns", "cto", "--limit", "500"}, "limit must be a number from 1 to 200"},
		{"unknown seat", []string{"seats", "turns", "nobody"}, `no seat "nobody"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.crewlet(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("crewlet %v: error %v; want one containing %q", tt.args, err, tt.want)
			}
		})
	}
}
