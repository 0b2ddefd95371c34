package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

const spawnOrg = `company: { name: spawnco }
nodes: { reconcile_interval: 1s }
profiles: { local: { provider: scripted, rules: [ { match: ".", reply: "Done." } ] } }
roles:
  lead: { charter: leads, profile: local }
  eng: { charter: builds, profile: local }
pools: [ { role: eng, max_seats: 2, idle_reap_after: 8s } ]
schedules: [ { name: build, every: 24h, to: "spawn:eng", text: "run the nightly build" } ]
seats:
  - { handle: cto, role: lead }
  - { handle: alice, kind: human }
`

// pool returns GET /pools' entry for role.
func (c *company) pool(role string) wire.PoolView {
	c.t.Helper()
	var pools []wire.PoolView
	if err := c.call(http.MethodGet, "/pools", nil, &pools); err != nil {
		c.t.Fatal(err)
	}
	for _, p := range pools {
		if p.Role == role {
			return p
		}
	}
	c.t.Fatalf("GET /pools has no pool of %s: %+v", role, pools)
	return wire.PoolView{}
}

// Seats spawn from a role's pool on two worker nodes: a ticket to
// spawn:eng is served by a new seat; concurrent spawns never pass
// max_seats; GET /pools and GET /seats show them; a spawned seat idle with
// nothing open is reaped and no longer takes mail, while one with mail
// waiting is kept until it has answered it.
func TestSpawnedSeatsSpawnAnswerAndAreReaped(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", spawnOrg))
	c.apiServer()
	c.worker("n1")
	c.worker("n2")
	c.waitAttached(30 * time.Second)

	status, body, err := c.raw(http.MethodPost, "/tickets", api.OpenTicketRequest{To: "spawn:eng", Task: "build it", From: "alice", Wait: "30s"})
	var tk crewlet.Ticket
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &tk) != nil {
		t.Fatalf("POST /tickets to spawn:eng: %d %s %v", status, body, err)
	}
	if !strings.HasPrefix(tk.To, "eng-") || tk.Phase != crewlet.TicketDone || tk.Reply != "Done." {
		t.Fatalf("ticket to spawn:eng = %+v; want done by a spawned eng seat", tk)
	}
	first := tk.To

	// Six spawns at once with one seat live and room for two: one more.
	var mu sync.Mutex
	var wg sync.WaitGroup
	codes := map[int]int{}
	var second string
	for range 6 {
		wg.Go(func() {
			status, body, err := c.raw(http.MethodPost, "/seats/spawn", wire.SpawnRequest{Role: "eng"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			codes[status]++
			var s wire.SpawnedSeat
			if status == http.StatusCreated && json.Unmarshal(body, &s) == nil {
				second = s.Handle
			}
		})
	}
	wg.Wait()
	if codes[http.StatusCreated] != 1 || codes[http.StatusConflict] != 5 {
		t.Fatalf("concurrent spawns answered %v; want one 201 and five 409", codes)
	}
	if p := c.pool("eng"); p.Live != 2 || p.Free != 0 || p.MaxSeats != 2 {
		t.Fatalf("GET /pools eng = %+v; want 2 live, 0 free", p)
	}
	if out, err := c.cli("pools"); err != nil || !strings.Contains(out, first) || !strings.Contains(out, second) {
		t.Fatalf("crewlet pools: %v\n%s", err, out)
	}
	if out, err := c.cli("seats", "spawn", "eng"); err == nil || !strings.Contains(out, "full") {
		t.Fatalf("crewlet seats spawn on a full pool: %v\n%s", err, out)
	}
	spawned := 0
	for _, s := range c.seats() {
		if s.Spawned {
			spawned++
		}
	}
	if spawned != 2 {
		t.Fatalf("GET /seats marks %d seats spawned; want 2", spawned)
	}
	c.waitReply(c.send(second, "hello"), replyWait)

	// first has mail waiting (it is paused); second has nothing open: only
	// second is reaped, and mail to it is refused, not lost.
	if err := c.call(http.MethodPost, "/seats/"+first+"/pause", crewlet.PauseRequest{Reason: "hold", By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, first+" paused", func() error {
		if st := c.state(first); st.Status != crewlet.StatusPaused {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	waiting := c.send(first, "while paused")
	testenv.Eventually(t, 60*time.Second, second+" reaped", func() error {
		if p := c.pool("eng"); strings.Contains(strings.Join(p.Seats, ","), second) {
			return fmt.Errorf("pool still has %v", p.Seats)
		}
		return nil
	})
	if status, body, _ := c.raw(http.MethodPost, "/seats/"+second+"/messages", api.SendMessageRequest{Text: "anyone?"}); status != http.StatusNotFound {
		t.Fatalf("mail to a reaped seat: %d %s; want 404", status, body)
	}
	testenv.Eventually(t, 30*time.Second, second+"'s workflow stopped", func() error {
		if row, err := c.store().Seat(t.Context(), second); err != nil || row.Status != "stopped" {
			return fmt.Errorf("%s is %q (%v)", second, row.Status, err)
		}
		return nil
	})
	if p := c.pool("eng"); p.Live != 1 || p.Seats[0] != first {
		t.Fatalf("GET /pools after the reap = %+v; want %s alone", p, first)
	}
	if err := c.call(http.MethodPost, "/seats/"+first+"/resume", crewlet.ResumeRequest{By: "tester"}, nil); err != nil {
		t.Fatal(err)
	}
	c.waitReply(waiting, replyWait)

	// A schedule to spawn:eng spawns a seat for its fire, which answers it.
	if out, err := c.cli("schedules", "trigger", "build"); err != nil {
		t.Fatalf("crewlet schedules trigger build: %v\n%s", err, out)
	}
	testenv.Eventually(t, 30*time.Second, "the fire answered by a spawned seat", func() error {
		out, err := c.cli("schedules", "show", "build")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, " eng-") && strings.Contains(line, "after") && !strings.Contains(line, first) {
				return nil
			}
		}
		return fmt.Errorf("no fire answered by a new eng seat:\n%s", out)
	})
}
