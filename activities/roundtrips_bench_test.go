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
// tool (the seat loop's mail steps and the turn's, as the seat runs them),
// and reports them per reply: where part 7 of issue 35 (12 transactions a
// reply) stands, step by step. The fence's epoch reads (ReadMail, AckMail)
// and the seat's status writes are not among them: BenchmarkThroughput
// counts the whole.
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
	steps := []string{"ReadMail", "PrepareTurn", "BeginTurn", "AcquireProfile", "ModelRound", "ReleaseProfile", "FinishTurn", "AckMail"}
	trips, xacts := map[string]int{}, map[string]int{}
	for i := 0; i < b.N; i++ {
		// The clock moves a day a reply, so the seat's budget (100 tokens
		// a day) never holds a turn.
		e.now = e.now.AddDate(0, 0, 1)
		eventID := fmt.Sprintf("rt-%d", i)
		ref := e.publishIn(b, eventID, crewlet.MessageChat, "c-"+eventID, "hello")
		workKey := crewlet.WorkKey([]string{eventID})
		turnID := crewlet.TurnWorkflowID("cto", workKey)
		var profile string
		run := map[string]func() error{
			"ReadMail": func() error {
				_, err := mail.ReadMail(e.ctx, crewlet.ReadMailInput{Tenure: ten, Consumer: "c", Max: 8})
				return err
			},
			"PrepareTurn": func() error {
				_, err := mail.PrepareTurn(e.ctx, crewlet.PrepareTurnInput{Tenure: ten, Mail: []crewlet.MailRef{ref}})
				return err
			},
			"BeginTurn": func() error {
				_, err := turns.BeginTurn(e.ctx, crewlet.BeginTurnInput{Tenure: ten, TurnID: turnID, WorkKey: workKey, Mail: []crewlet.MailRef{ref}})
				return err
			},
			"AcquireProfile": func() error {
				out, err := turns.AcquireProfile(e.ctx, crewlet.AcquireProfileInput{Tenure: ten, TurnID: turnID, WorkKey: workKey})
				profile = out.Profile
				return err
			},
			"ModelRound": func() error {
				_, err := turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: ten, TurnID: turnID, WorkKey: workKey, Round: 1, Profile: profile})
				return err
			},
			"ReleaseProfile": func() error {
				return turns.ReleaseProfile(e.ctx, crewlet.ReleaseProfileInput{Tenure: ten, TurnID: turnID})
			},
			"FinishTurn": func() error {
				in := crewlet.FinishTurnInput{TurnID: turnID, WorkKey: workKey, Status: crewlet.TurnDone, Rounds: 1}
				in.Tenure = ten
				_, err := turns.FinishTurn(e.ctx, in)
				return err
			},
			"AckMail": func() error {
				return mail.AckMail(e.ctx, crewlet.AckMailInput{Tenure: ten, StreamIDs: []string{ref.StreamID}})
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
