package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/store"
)

const doorToken = "door-e2e-token-0123456789"

// While at least 10,000 requests without a valid token hit `crewlet
// serve`, the seats keep answering mail sent with a token (3 messages, each
// sent and answered while the flood runs), and the audit log takes a
// handful of rows, not 10,000.
func TestSeatsAnswerThroughAnAnonymousFlood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "org.yaml")
	org := `company: { name: doorco }
auth: { tokens: [ { name: ops, role: admin, token_env: CREWLET_E2E_DOOR_TOKEN } ] }
profiles: { quick: { provider: scripted } }
roles: { clerk: { charter: answers, profile: quick } }
seats: [ { handle: s01, role: clerk } ]
`
	if err := os.WriteFile(path, []byte(org), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCompany(t, path)
	c.setenv("CREWLET_E2E_DOOR_TOKEN=" + doorToken)
	c.token = doorToken
	c.serve()

	const n = 10000
	var sent atomic.Int64
	var answering atomic.Bool
	answering.Store(true)
	var wg sync.WaitGroup
	began := time.Now()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := sent.Add(1); i <= n || answering.Load(); i = sent.Add(1) {
				req, _ := http.NewRequest(http.MethodGet, c.api+"/seats/s01/inbox", nil)
				if i%2 == 0 {
					req.Header.Set("Authorization", "Bearer wrong-"+strconv.FormatInt(i, 10))
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("anonymous request %d: %d; want 401", i, resp.StatusCode)
					return
				}
			}
		}()
	}
	const answered = 3
	for i := range answered {
		msg := c.send("s01", fmt.Sprintf("hello %d during the flood", i))
		c.waitReply(msg, 30*time.Second)
	}
	answering.Store(false)
	wg.Wait()
	total := sent.Load() - 16 // each worker's last count sent nothing
	took := time.Since(began)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := c.store().Audit(ctx, store.AuditFilter{Principal: "-", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d anonymous requests in %s (%.0f/s); %d messages answered meanwhile; %d audit rows added",
		total, took.Round(time.Millisecond), float64(total)/took.Seconds(), answered, len(rows))
	// api.denied_audits_per_minute (5) at once, then 5 a minute.
	if bound := 5 * (2 + int(took/time.Minute)); len(rows) == 0 || len(rows) > bound {
		t.Fatalf("%d audit rows for %d refusals in %s; want between 1 and %d", len(rows), total, took, bound)
	}
}
