package api_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
)

// loadOpenAPI fetches GET /openapi.json and loads it with kin-openapi,
// failing unless it is a valid OpenAPI 3 document.
func loadOpenAPI(t *testing.T, base string) *openapi3.T {
	t.Helper()
	status, body := call(t, http.MethodGet, base+"/openapi.json", "", "")
	if status != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", status, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatalf("load the OpenAPI document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document is not valid: %v", err)
	}
	return doc
}

// The document validates, and it and the router describe the same routes:
// every route the router serves is in the document with its path
// parameters, and the document names no route the router lacks.
func TestOpenAPIDocumentMatchesTheRouter(t *testing.T) {
	base, _ := authServer(t)
	doc := loadOpenAPI(t, base)
	org, _ := config.Parse([]byte(authOrg))
	h := (&api.Server{Org: org, Log: slog.New(slog.DiscardHandler)}).Handler()
	served := map[string]bool{}
	err := chi.Walk(h.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if pattern == "/ui" || strings.HasPrefix(pattern, "/ui/") {
			// The console's files: a page, not an operation of the API.
			return nil
		}
		served[method+" "+pattern] = true
		item := doc.Paths.Find(pattern)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s %s is served but not in the OpenAPI document", method, pattern)
			return nil
		}
		op := item.GetOperation(method)
		var want, got []string
		for _, m := range regexp.MustCompile(`\{([a-z_]+)\}`).FindAllStringSubmatch(pattern, -1) {
			want = append(want, m[1])
		}
		for _, p := range op.Parameters {
			if p.Value.In == openapi3.ParameterInPath {
				got = append(got, p.Value.Name)
			}
		}
		if !slices.Equal(want, got) {
			t.Errorf("%s %s: path parameters %v in the document; want %v", method, pattern, got, want)
		}
		if op.Responses.Value("401") == nil && !slices.Contains([]string{"/healthz", "/readyz", "/openapi.json"}, pattern) {
			t.Errorf("%s %s: the document lists no 401 for a route that needs a token", method, pattern)
		}
		return nil
	})
	if err != nil || len(served) < 20 {
		t.Fatalf("walked %d routes (%v)", len(served), err)
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+path] {
				t.Errorf("the OpenAPI document names %s %s, which the router does not serve", method, path)
			}
		}
	}
}

// What the API answers is what the document says it answers: real
// responses, success and error alike, validate against their schemas, and
// the requests it took validate against theirs.
func TestOpenAPIDescribesWhatTheAPIAnswers(t *testing.T) {
	base, _ := authServer(t)
	doc := loadOpenAPI(t, base)
	doc.Servers = openapi3.Servers{{URL: base}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{http.MethodGet, "/healthz", "", "", 200},
		{http.MethodGet, "/metrics", tokens["viewer"], "", 200},
		{http.MethodPost, "/models/scripted/disable", tokens["admin"], `{"reason":"outage"}`, 200},
		{http.MethodPost, "/models/scripted/enable", tokens["admin"], `{}`, 200},
		{http.MethodPost, "/models/nope/disable", tokens["admin"], `{}`, 404},
		// Model ids are checked before anything reads with them.
		{http.MethodPost, "/models/a%00b/disable", tokens["admin"], `{}`, 400},
		{http.MethodPost, "/models/" + strings.Repeat("m", 129) + "/disable", tokens["admin"], `{}`, 400},
		{http.MethodPost, "/models/a%FFb/disable", tokens["admin"], `{}`, 400},
		{http.MethodPost, "/models/meta-llama%2FLlama-3.1-8B/disable", tokens["admin"], `{}`, 404},
		{http.MethodGet, "/profiles", tokens["viewer"], "", 200},
		{http.MethodGet, "/nodes?all=true", tokens["viewer"], "", 200},
		{http.MethodGet, "/tickets?open=true", tokens["viewer"], "", 200},
		{http.MethodGet, "/tickets/t-nope", tokens["viewer"], "", 404},
		{http.MethodGet, "/audit", tokens["admin"], "", 200},
		{http.MethodGet, "/audit?limit=0", tokens["admin"], "", 400},
		{http.MethodGet, "/audit", tokens["viewer"], "", 403},
		{http.MethodGet, "/seats/cto/turns", "", "", 401},
		{http.MethodGet, "/seats/cto/usage", tokens["viewer"], "", 200},
		{http.MethodGet, "/seats/cto/memory", tokens["viewer"], "", 200},
		{http.MethodGet, "/seats/cto/events", tokens["viewer"], "", 200},
		{http.MethodGet, "/conversations/c-1", tokens["viewer"], "", 404},
	} {
		var rd io.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, base+c.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d %s; want %d", c.method, c.path, resp.StatusCode, body, c.want)
			continue
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s %s: no route in the document: %v", c.method, c.path, err)
			continue
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if resp.StatusCode < 300 {
			// What the API took, the document takes too.
			req.Body = io.NopCloser(strings.NewReader(c.body))
			if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
				t.Errorf("%s %s %s was answered %d, but the document refuses it: %v", c.method, c.path, c.body, resp.StatusCode, err)
			}
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		out.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s %s answered %d %s, which the document does not describe: %v", c.method, c.path, resp.StatusCode,
				bytes.TrimSpace(body), err)
		}
	}
}
