package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// applyOrg is the org of the apply test; each revision is a replacement of
// its text.
const applyOrg = `company: { name: applyco }
auth:
  tokens:
    - { name: ann, role: admin, token_env: CREWLET_E2E_TOKEN_ADMIN }
    - { name: otto, role: operator, token_env: CREWLET_E2E_TOKEN_OPERATOR }
profiles: { local: { provider: scripted } }
roles: { lead: { charter: You answer briefly., profile: local } }
seats:
  - { handle: cto, role: lead }
  - { handle: gone, role: lead }
  - { handle: alice, kind: human }
`

// lastCharter returns the system prompt digest of a seat's newest turn's
// first round.
func (c *company) lastCharter(handle string) string {
	c.t.Helper()
	var turns []wire.TurnRow
	if err := c.call(http.MethodGet, "/seats/"+handle+"/turns?limit=1", nil, &turns); err != nil || len(turns) != 1 {
		c.t.Fatalf("turns of %s: %v (%d)", handle, err, len(turns))
	}
	var view wire.TurnView
	if err := c.call(http.MethodGet, "/turns/"+handle+"/"+url.PathEscape(turns[0].WorkKey), nil, &view); err != nil || len(view.Receipts) == 0 {
		c.t.Fatalf("turn %s of %s: %v (%d receipts)", turns[0].WorkKey, handle, err, len(view.Receipts))
	}
	return view.Receipts[0].SystemSHA256
}

// An org changes while it runs, through crewlet config apply: a seat added
// answers without a restart, a charter edited reaches the next turn, a seat
// removed is stopped, a token removed stops working, a cold change is
// refused naming its key, and an invalid file leaves the running revision.
// Every step shows in crewlet config show.
func TestConfigApplyChangesTheRunningCompany(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", applyOrg))
	admin, operator := "e2e-admin-token-0123456789", "e2e-operator-token-0123456789"
	c.setenv("CREWLET_E2E_TOKEN_ADMIN="+admin, "CREWLET_E2E_TOKEN_OPERATOR="+operator)
	c.token = admin
	c.serve()
	c.waitReply(c.send("cto", "hello"), replyWait)
	before := c.lastCharter("cto")

	apply := func(doc string, flags ...string) (string, error) {
		return c.cli(append([]string{"config", "apply", writeFile(t, "next.yaml", doc), "--token", admin}, flags...)...)
	}
	next := strings.NewReplacer(
		"charter: You answer briefly.", "charter: You answer very briefly.",
		"  - { handle: gone, role: lead }\n", "  - { handle: eng-2, role: lead }\n",
		"    - { name: otto, role: operator, token_env: CREWLET_E2E_TOKEN_OPERATOR }\n", "",
	).Replace(applyOrg)
	out, err := apply(next)
	if err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	for _, want := range []string{"as revision 2", "hot", "roles.lead.charter", "seats.eng-2", "added", "seats.gone", "removed", "auth.tokens.otto"} {
		if !strings.Contains(out, want) {
			t.Fatalf("apply report lacks %q:\n%s", want, out)
		}
	}
	t.Logf("apply report:\n%s", out)

	applied := time.Now()
	c.waitReply(c.send("eng-2", "are you there?"), replyWait)
	t.Logf("apply → eng-2's first reply: %s", time.Since(applied).Round(time.Millisecond))
	c.waitReply(c.send("cto", "hello again"), replyWait)
	if after := c.lastCharter("cto"); after == before {
		t.Fatalf("cto's charter receipt %s did not change with the applied charter", after)
	}
	// The apply triggers the reconcile duty's Schedule; the dev server can
	// take tens of seconds to start a triggered action under a full
	// suite's load, and the duty's own interval (1m) bounds it anyway.
	testenv.Eventually(t, 90*time.Second, "gone stopped", func() error {
		if row, err := c.store().Seat(t.Context(), "gone"); err != nil || row.Status != "stopped" {
			return fmt.Errorf("gone is %q (%v)", row.Status, err)
		}
		return nil
	})
	c.token = operator
	if status, body, _ := c.raw(http.MethodGet, "/seats", nil); status != http.StatusUnauthorized {
		t.Fatalf("removed operator token: %d %s; want 401", status, body)
	}
	c.token = admin

	// A cold change is refused, naming its key, and so is an invalid file;
	// revision 2 stays.
	cold := strings.Replace(next, "company: { name: applyco }", "company: { name: applyco }\nlog: { level: debug }", 1)
	if out, err := apply(cold); err == nil || !strings.Contains(out, "log.level") || !strings.Contains(out, "--restart") {
		t.Fatalf("cold apply: %v\n%s", err, out)
	}
	if out, err := apply(strings.Replace(next, "profile: local", "profile: nowhere", 1)); err == nil || !strings.Contains(out, "nowhere") {
		t.Fatalf("invalid apply: %v\n%s", err, out)
	}
	if out, err := apply(next); err != nil || !strings.Contains(out, "revision 2 already") {
		t.Fatalf("same file again: %v\n%s", err, out)
	}
	var state wire.ConfigState
	if err := c.call(http.MethodGet, "/config", nil, &state); err != nil {
		t.Fatal(err)
	}
	if state.Revision != 2 || state.AppliedBy != "ann" || len(state.Processes) != 1 || state.Processes[0].Revision != 2 {
		t.Fatalf("GET /config = revision %d by %q, processes %+v; want 2 by ann, the one process on 2", state.Revision, state.AppliedBy, state.Processes)
	}

	// With restart, the cold change is applied; the running process takes
	// the rest and says it needs a restart for log.level.
	if out, err := apply(cold, "--restart"); err != nil || !strings.Contains(out, "restart every process to take: log.level") {
		t.Fatalf("cold apply with --restart: %v\n%s", err, out)
	}
	testenv.Eventually(t, 10*time.Second, "the process says it needs a restart", func() error {
		if err := c.call(http.MethodGet, "/config", nil, &state); err != nil {
			return err
		}
		if p := state.Processes[0]; p.Revision != 3 || strings.Join(p.NeedsRestart, ",") != "log.level" {
			return fmt.Errorf("process %+v", p)
		}
		return nil
	})
	out, err = c.cli("config", "show", "--token", admin)
	if err != nil || !strings.Contains(out, "revision 3, applied by ann") || !strings.Contains(out, "log.level") {
		t.Fatalf("config show: %v\n%s", err, out)
	}
	var classes []string
	for _, ch := range state.Changes {
		classes = append(classes, ch.Key+"="+ch.Class)
	}
	sort.Strings(classes)
	if strings.Join(classes, " ") != "log.level="+config.ClassCold {
		t.Fatalf("revision 3's changes: %v", classes)
	}
}

// serve --watch applies its file when it changes: a seat added to the file
// answers, and a file made invalid is refused whole, the running revision
// kept and the refusal logged.
func TestServeWatchAppliesItsFileOnChange(t *testing.T) {
	path := writeFile(t, "org.yaml", applyOrg)
	c := newCompany(t, path)
	admin := "e2e-admin-token-0123456789"
	c.setenv("CREWLET_E2E_TOKEN_ADMIN="+admin, "CREWLET_E2E_TOKEN_OPERATOR=e2e-operator-token-0123456789")
	c.token = admin
	p := c.start("serve", "serve", "--watch")
	c.waitReady(p)

	added := strings.Replace(applyOrg, "  - { handle: alice, kind: human }\n", "  - { handle: alice, kind: human }\n  - { handle: eng-3, role: lead }\n", 1)
	if err := os.WriteFile(path, []byte(added), 0o600); err != nil {
		t.Fatal(err)
	}
	var state wire.ConfigState
	testenv.Eventually(t, 10*time.Second, "the watcher applied the file", func() error {
		if err := c.call(http.MethodGet, "/config", nil, &state); err != nil {
			return err
		}
		if state.Revision != 2 || !strings.HasPrefix(state.AppliedBy, "watch:") {
			return fmt.Errorf("revision %d by %q; want 2 by the watcher", state.Revision, state.AppliedBy)
		}
		return nil
	})
	c.waitReply(c.send("eng-3", "hello"), replyWait)

	if err := os.WriteFile(path, []byte(strings.Replace(added, "profile: local", "profile: nowhere", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the invalid file refused", func() error {
		if refused := linesWith(p.out.String(), "config_apply_refused"); len(refused) == 0 || !strings.Contains(refused[0], "nowhere") {
			return fmt.Errorf("no refusal naming the profile logged: %q", refused)
		}
		return nil
	})
	if err := c.call(http.MethodGet, "/config", nil, &state); err != nil || state.Revision != 2 {
		t.Fatalf("after the invalid file: revision %d, %v; want 2 kept", state.Revision, err)
	}
	c.waitReply(c.send("eng-3", "still here?"), replyWait)
}
