package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// With tokens, the processes, the API and the CLI agree: a viewer cannot
// send, an admin sends as a human seat explicitly and the audit log says
// so, and the CLI works with --token and is refused without it.
func TestTokensFromTheProcessesToTheCLI(t *testing.T) {
	org := `company: { name: authco }
auth:
  tokens:
    - { name: ann, role: admin, token_env: CREWLET_E2E_TOKEN_ADMIN }
    - { name: vic, role: viewer, token_env: CREWLET_E2E_TOKEN_VIEWER }
profiles: { local: { provider: scripted } }
roles: { lead: { charter: answers, profile: local } }
seats:
  - { handle: cto, role: lead }
  - { handle: alice, kind: human }
`
	c := newCompany(t, writeFile(t, "org.yaml", org))
	admin, viewer := "e2e-admin-token-0123456789", "e2e-viewer-token-0123456789"
	c.setenv("CREWLET_E2E_TOKEN_ADMIN="+admin, "CREWLET_E2E_TOKEN_VIEWER="+viewer)
	c.token = admin
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	c.token = viewer
	if status, body, _ := c.raw(http.MethodPost, "/seats/cto/messages", api.SendMessageRequest{Text: "hi"}); status != http.StatusForbidden {
		t.Fatalf("viewer sending: %d %s; want 403", status, body)
	}
	c.token = admin
	var msg crewlet.Message
	if err := c.call(http.MethodPost, "/seats/cto/messages", api.SendMessageRequest{Text: "status please", From: "alice"}, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.From != "alice" {
		t.Fatalf("admin sending as alice: from %q", msg.From)
	}
	c.waitReply(msg, 30*time.Second)
	rows, err := c.store().Audit(context.Background(), store.AuditFilter{Principal: "ann", Action: "POST /seats/{handle}/messages", Limit: 5})
	if err != nil || len(rows) != 1 || rows[0].Outcome != wire.AuditAllowed || rows[0].Target != "handle=cto" || strings.Contains(rows[0].Reason, "status please") {
		t.Fatalf("audit of the admin's send-as: %+v, %v; want one allowed row, no text", rows, err)
	}
	if out, err := c.cli("seats", "ls"); err == nil || !strings.Contains(out, "unauthorized") {
		t.Fatalf("CLI without a token: %v\n%s", err, out)
	}
	if out, err := c.cli("seats", "ls", "--token", viewer); err != nil || !strings.Contains(out, "cto") {
		t.Fatalf("CLI with --token: %v\n%s", err, out)
	}
	out, err := c.cli("audit", "--token", admin, "--principal", "vic")
	if err != nil || !strings.Contains(out, "denied") || !strings.Contains(out, "POST /seats/{handle}/messages") {
		t.Fatalf("crewlet audit: %v\n%s", err, out)
	}
	t.Logf("crewlet audit --principal vic:\n%s", out)
}

// The example org names no tokens, and still no caller is anonymous: GET
// /me without a token is 401, with a made-up one 401; the CLI on this
// machine works unchanged (it reads the local token), `crewlet console`
// prints a sign-in link with the token in the fragment only, and that link
// signs the real browser in as the local admin and leaves the address bar
// without the token.
func TestExampleOrgWithNoTokensTakesNoAnonymousCaller(t *testing.T) {
	c := newCompany(t, exampleOrg)
	c.serve()

	for _, token := range []string{"", "made-up-token-0123456789abcdef"} {
		if status, body := getAs(t, c.api+"/me", token); status != http.StatusUnauthorized {
			t.Fatalf("GET /me with token %q: %d %s; want 401", token, status, body)
		}
	}

	if out, err := c.cli("seats", "ls"); err != nil || !strings.Contains(out, "cto") {
		t.Fatalf("crewlet seats ls on this machine: %v\n%s", err, out)
	}
	out, err := c.cli("console")
	link := strings.TrimSpace(out)
	if err != nil || link != c.api+"/ui/#token="+c.bearer() {
		t.Fatalf("crewlet console: %v\n%s\nwant %s/ui/#token=<the local token>", err, out, c.api)
	}

	b := newBrowser(t, c.api)
	b.signInByLink(c.bearer())
	if who := b.text("#who"); !strings.Contains(who, "local (admin)") {
		t.Fatalf("the console's header says %q; want the local admin", who)
	}
	b.open("/ui/#/company")
	b.waitText("main", "cto")
}
