package activities

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/profiles"
	"github.com/crewlet/crewlet/internal/store"
)

// roundTrips counts what a Store sends Postgres: round trips (a statement,
// a batch, a transaction's begin and commit each one) and transactions (a
// statement outside a transaction, a batch, or a transaction, each one).
// Its steps run one at a time, so one count will do for every connection.
type roundTrips struct {
	mu           sync.Mutex
	trips, xacts int
	inTx         bool
}

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	switch sql := strings.ToLower(strings.TrimSpace(d.SQL)); {
	case strings.HasPrefix(sql, "begin"):
		c.inTx = true
	case sql == "commit" || sql == "rollback":
		c.inTx = false
		c.xacts++
	case !c.inTx:
		c.xacts++
	}
	return ctx
}

func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	if !c.inTx {
		c.xacts++
	}
	return ctx
}

func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns the counts since the last take.
func (c *roundTrips) take() (trips, xacts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	trips, xacts = c.trips, c.xacts
	c.trips, c.xacts = 0, 0
	return trips, xacts
}

// BenchmarkReplyRoundTrips counts the Postgres round trips and
// transactions of each step of a reply that takes one model round and no
// tool (the four local activities and the model round, as a seat at
// node-liveness 6 runs them), and reports them per reply: where part 7 of
// issue 35 (12 transactions a reply) stands, step by step. The fence's
// epoch read (ReadMail's) and the seat's status writes are not among them:
// BenchmarkThroughput counts the whole.
//
//	go test ./activities -run '^$' -bench ReplyRoundTrips -benchtime 20x
func BenchmarkReplyRoundTrips(b *testing.B) {
	e := setupTurnsOrg(b, turnsOrg, nil)
	counter := &roundTrips{}
	st, err := store.OpenTraced(e.ctx, e.db, counter)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	org := e.turns.org
	turns, err := NewTurns(e.host, org, st, e.mb, nil, nil, profiles.New(nil, st, org, nil, discard), nil, nil, discard)
	if err != nil {
		b.Fatal(err)
	}
	turns.Now = e.turns.Now
	mail := &Mail{Store: st, Mailbox: e.mb, Log: discard}
	ten := crewlet.Tenure{Handle: "cto", Epoch: e.epoch}
	steps := []string{"ReadMail", "BeginTurn", "ModelRound", "FinishTurn"}
	trips, xacts := map[string]int{}, map[string]int{}
	for i := 0; i < b.N; i++ {
		// The clock moves a day a reply, so the seat's budget (100 tokens
		// a day) never holds a turn.
		e.now = e.now.AddDate(0, 0, 1)
		eventID := fmt.Sprintf("rt-%d", i)
		e.publishIn(b, eventID, crewlet.MessageChat, "c-"+eventID, "hello")
		workKey := crewlet.WorkKey([]string{eventID})
		turnID := crewlet.TurnWorkflowID("cto", workKey)
		var read crewlet.ReadMailOutput
		var begin crewlet.BeginTurnOutput
		run := map[string]func() error{
			"ReadMail": func() (err error) {
				read, err = mail.ReadMail(e.ctx, crewlet.ReadMailInput{Tenure: ten, Consumer: "c", Max: 8, Prepare: true})
				return err
			},
			"BeginTurn": func() (err error) {
				begin, err = turns.BeginTurn(e.ctx, crewlet.BeginTurnInput{Tenure: ten, TurnID: turnID, WorkKey: workKey, Mail: read.Prepared.Run, Acquire: true})
				return err
			},
			"ModelRound": func() error {
				_, err := turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: ten, TurnID: turnID, WorkKey: workKey, Round: 1,
					Profile: begin.Profile.Profile, ThreadKey: begin.ThreadKeys[0]})
				return err
			},
			"FinishTurn": func() error {
				in := crewlet.FinishTurnInput{TurnID: turnID, WorkKey: workKey, Status: crewlet.TurnDone, Rounds: 1,
					Release: true, Ack: []string{read.Mail[0].StreamID}, ThreadKeys: begin.ThreadKeys}
				in.Tenure = ten
				_, err := turns.FinishTurn(e.ctx, in)
				return err
			},
		}
		counter.take()
		for _, step := range steps {
			if err := run[step](); err != nil {
				b.Fatalf("%s: %v", step, err)
			}
			t, x := counter.take()
			trips[step] += t
			xacts[step] += x
		}
	}
	var allTrips, allXacts int
	for _, step := range steps {
		allTrips, allXacts = allTrips+trips[step], allXacts+xacts[step]
		b.ReportMetric(float64(xacts[step])/float64(b.N), step+"-xacts/reply")
	}
	b.ReportMetric(float64(allTrips)/float64(b.N), "pg-round-trips/reply")
	b.ReportMetric(float64(allXacts)/float64(b.N), "pg-xacts/reply")
}
