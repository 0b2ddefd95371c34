package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/logging"
	"github.com/crewlet/crewlet/internal/testenv"
)

// jsonLines parses every line written to b so far as a JSON object.
func jsonLines(t *testing.T, b *testenv.Log) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// With log.format json, every line parses, and every line a request causes,
// in the API and in the packages it calls, names the request's id: the
// caller's X-Request-Id when valid, a new one, echoed, when not. Each
// request ends with one access line.
func TestEveryLogLineOfARequestCarriesItsID(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte(`company: { name: logco }
auth: { anonymous: true }
log: { format: json, level: info }
profiles: { local: { provider: scripted } }
roles: { lead: { charter: works as lead, profile: local } }
seats: [ { handle: cto, role: lead } ]
`))
	if err != nil {
		t.Fatal(err)
	}
	sink := &testenv.Log{}
	log, err := logging.New(sink, org.Log)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	srv := httptest.NewServer(withServices(&api.Server{Org: org, Store: b.st, Log: log}).Handler())
	t.Cleanup(srv.Close)

	for _, tc := range []struct{ name, sent string }{
		{"a valid id is kept", "deploy-42.check"},
		{"an invalid id is replaced", "two words"},
		{"an id over 64 characters is replaced", strings.Repeat("a", 65)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/models/scripted/disable", strings.NewReader(`{"reason":"provider outage"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", tc.sent)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			id := resp.Header.Get("X-Request-Id")
			if resp.StatusCode != http.StatusOK || id == "" {
				t.Fatalf("disable scripted: %d, request id %q; want 200 with a request id", resp.StatusCode, id)
			}
			if valid := tc.sent == "deploy-42.check"; valid != (id == tc.sent) {
				t.Fatalf("sent X-Request-Id %q, got back %q; want it kept only when valid", tc.sent, id)
			}
			var mine []map[string]any
			testenv.Eventually(t, 5*time.Second, "the request's access line", func() error {
				mine = nil
				for _, l := range jsonLines(t, sink) {
					if l["request_id"] == id {
						mine = append(mine, l)
					}
				}
				for _, l := range mine {
					if l["msg"] == "http_request" {
						return nil
					}
				}
				return fmt.Errorf("no access line yet among %d lines of request %s", len(mine), id)
			})
			msgs := map[string]map[string]any{}
			for _, l := range mine {
				msgs[l["msg"].(string)] = l
			}
			if _, ok := msgs["model_switched"]; !ok {
				t.Fatalf("lines of request %s: %v; want the model switch control logged under its id", id, mine)
			}
			access := msgs["http_request"]
			if access["method"] != "POST" || access["route"] != "/models/{id}/disable" || access["status"] != float64(200) ||
				access["principal"] == "" || access["duration_ms"] == nil {
				t.Fatalf("access line %v; want method POST, route /models/{id}/disable, status 200, a principal and a duration", access)
			}
		})
	}
	// Every line the server wrote names a request: none escaped it.
	for _, l := range jsonLines(t, sink) {
		if l["request_id"] == nil || l["request_id"] == "" {
			t.Errorf("log line without a request id: %v", l)
		}
	}
}
