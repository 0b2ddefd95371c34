package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

var acme = store.Deployment{Company: "acme", Namespace: "default", TaskQueue: "crewlet-acme"}

// A database belongs to the first deployment that claims it: the same one
// claims it again, any other (another company, or the same company on
// another namespace or task queue) is refused with both named.
func TestClaimDeploymentRefusesAnotherDeployment(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	if err := st.ClaimDeployment(ctx, acme); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := st.ClaimDeployment(ctx, acme); err != nil {
		t.Fatalf("the same deployment claiming again: %v; want ok", err)
	}
	if err := st.CheckDeployment(ctx, acme); err != nil {
		t.Fatalf("check as the same deployment: %v; want ok", err)
	}
	for _, other := range []store.Deployment{
		{Company: "globex", Namespace: "default", TaskQueue: "crewlet-globex"},
		{Company: "acme", Namespace: "default", TaskQueue: "crewlet-moved"},
		{Company: "acme", Namespace: "acme-ns", TaskQueue: "crewlet-acme"},
	} {
		t.Run(other.Company+"/"+other.Namespace+"/"+other.TaskQueue, func(t *testing.T) {
			for name, claim := range map[string]func(context.Context, store.Deployment) error{
				"claim": st.ClaimDeployment, "check": st.CheckDeployment,
			} {
				err := claim(ctx, other)
				if crewlet.ErrorCode(err) != crewlet.ECONFLICT {
					t.Fatalf("%s: error %v; want %s", name, err, crewlet.ECONFLICT)
				}
				msg := crewlet.ErrorMessage(err)
				for _, want := range []string{
					fmt.Sprintf("company %q (Temporal namespace %q, task queue %q)", acme.Company, acme.Namespace, acme.TaskQueue),
					fmt.Sprintf("company %q (Temporal namespace %q, task queue %q)", other.Company, other.Namespace, other.TaskQueue),
					"its own database", "postgres.url_env",
				} {
					if !strings.Contains(msg, want) {
						t.Errorf("%s: message %q does not say %q", name, msg, want)
					}
				}
			}
		})
	}
	got, ok, err := st.RecordedDeployment(ctx)
	if err != nil || !ok || got.Company != acme.Company || got.Namespace != acme.Namespace || got.TaskQueue != acme.TaskQueue {
		t.Fatalf("recorded deployment = %+v, %v (%v); want %+v, kept", got, ok, err, acme)
	}
	if time.Since(got.CreatedAt) > time.Minute {
		t.Fatalf("created_at = %v; want when it was claimed", got.CreatedAt)
	}
}

// Processes of different companies started at once on an empty database:
// exactly one wins and records one row; every other is refused.
func TestConcurrentClaimsLeaveOneRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.MigratedDatabase(t)
	st := testenv.Store(t, url)
	const n = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = st.ClaimDeployment(ctx, store.Deployment{Company: fmt.Sprintf("co%d", i), Namespace: "default", TaskQueue: fmt.Sprintf("q%d", i)})
		}()
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("co%d and co%d both claimed the database", won, i)
		case err == nil:
			won = i
		case crewlet.ErrorCode(err) != crewlet.ECONFLICT:
			t.Fatalf("co%d: %v; want ok or %s", i, err, crewlet.ECONFLICT)
		}
	}
	if won < 0 {
		t.Fatalf("no claim won: %v", errs)
	}
	got, ok, err := st.RecordedDeployment(ctx)
	if err != nil || !ok || got.Company != fmt.Sprintf("co%d", won) {
		t.Fatalf("recorded = %+v, %v (%v); want co%d", got, ok, err, won)
	}
	if rows := deploymentRows(t, ctx, url); rows != 1 {
		t.Fatalf("deployment rows = %d; want 1", rows)
	}
}

func deploymentRows(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM deployment`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// A database before migration 0015 (or an empty one) has no claim: the check
// servers make before migrating passes, and the first claim after migrating
// takes it, data and all (the upgrade path).
func TestUnclaimedDatabaseIsClaimedAfterMigrating(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Database(t)
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CheckDeployment(ctx, acme); err != nil {
		t.Fatalf("check before migrating: %v; want ok", err)
	}
	if _, ok, err := st.RecordedDeployment(ctx); ok || err != nil {
		t.Fatalf("recorded before migrating: %v (%v); want none", ok, err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureSeat(ctx, "cto", "engineer", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	if err := st.ClaimDeployment(ctx, acme); err != nil {
		t.Fatalf("claim a database holding data but no claim: %v", err)
	}
	if rows := deploymentRows(t, ctx, url); rows != 1 {
		t.Fatalf("deployment rows = %d; want 1", rows)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO deployment (id, company, namespace, task_queue) VALUES (false, 'x', 'x', 'x')`); err == nil {
		t.Fatal("a second deployment row was accepted; the table must hold one")
	}
}
