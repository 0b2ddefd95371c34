package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/crewlet/crewlet/internal/authority"
)

// param is a route's query parameter, for the OpenAPI document.
type param struct {
	name, typ, doc string
}

// limitQuery is the ?limit=N every listing takes.
func limitQuery(def, most int) param {
	return param{"limit", "integer", "how many to return, 1 to " + strconv.Itoa(most) + "; default " + strconv.Itoa(def)}
}

// openAPI serves the API's OpenAPI 3.0 document, built from the route
// table the router is built from; a test holds the two together and
// checks real answers against it.
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, openAPIDocument(s.routes()))
}

// pathParam matches a chi path parameter, {handle}.
var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// openAPIDocument describes routes: each one's parameters, body, answer and
// the errors it can give, all in crewlet's {error, detail} shape.
func openAPIDocument(routes []route) map[string]any {
	schemas := map[string]any{}
	paths := map[string]map[string]any{}
	for _, rt := range routes {
		op := map[string]any{
			"operationId": operationID(rt),
			"summary":     rt.summary,
			"responses":   responsesOf(rt, schemas),
		}
		if rule := rt.rule(); rule.Right != authority.Public {
			op["description"] = "Action: " + rule.Name + ". Needs the right to " + rule.Right.String() + " (scope " + rule.Scope.String() + "; what a member may: " + rule.Scope.Member() + ")."
			op["security"] = []any{map[string]any{"bearer": []any{}}}
		} else {
			op["security"] = []any{}
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.pattern, -1) {
			params = append(params, map[string]any{
				"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"},
			})
		}
		for _, q := range rt.query {
			params = append(params, map[string]any{
				"name": q.name, "in": "query", "description": q.doc, "schema": map[string]any{"type": q.typ},
			})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.body != nil {
			op["requestBody"] = map[string]any{
				"required": true,
				"content":  map[string]any{"application/json": map[string]any{"schema": bodySchema(rt, schemas)}},
			}
		}
		if paths[rt.pattern] == nil {
			paths[rt.pattern] = map[string]any{}
		}
		paths[rt.pattern][strings.ToLower(rt.method)] = op
	}
	schemas["api.errorBody"] = map[string]any{
		"type":     "object",
		"required": []any{"error", "detail"},
		"properties": map[string]any{
			"error":  map[string]any{"type": "string", "enum": errorCodes(), "description": "the error's code"},
			"detail": map[string]any{"type": "string", "description": "what was wrong and what to do; never internal text"},
		},
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "crewlet",
			"version":     "1",
			"description": "The REST API of a crewlet company. Every response carries X-Request-Id.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer",
					"description": "a token from auth.tokens, or the local token the API mints when none is configured (the CLI on its machine reads it; `crewlet console` prints a sign-in link); only with auth.anonymous does it take calls without one"},
			},
		},
	}
}

// errorCodes lists every error code a response can carry.
func errorCodes() []any {
	codes := make([]string, 0, len(statusOf)+1)
	for code := range statusOf {
		codes = append(codes, code)
	}
	codes = append(codes, "method_not_allowed")
	sort.Strings(codes)
	out := make([]any, len(codes))
	for i, c := range codes {
		out[i] = c
	}
	return out
}

// responsesOf is a route's answer and the errors it can give: every route
// answers a bad path id (400) or an unknown one (404) where it has ids, a
// bad query or body (400), a missing token (401), a role without the right
// (403), a body that is not JSON (415), too many mutations (429), and a
// store or service that failed (500, 503).
func responsesOf(rt route, schemas map[string]any) map[string]any {
	errRef := map[string]any{"$ref": "#/components/schemas/api.errorBody"}
	errorResponse := func(why string) map[string]any {
		return map[string]any{"description": why, "content": map[string]any{"application/json": map[string]any{"schema": errRef}}}
	}
	statuses := rt.statuses
	if statuses == nil {
		statuses = []int{http.StatusOK}
	}
	contentType := rt.contentType
	if contentType == "" {
		contentType = "application/json"
	}
	out := map[string]any{}
	for _, status := range statuses {
		out[strconv.Itoa(status)] = map[string]any{
			"description": rt.summary,
			"content":     map[string]any{contentType: map[string]any{"schema": schemaOf(reflect.TypeOf(rt.answer), schemas)}},
		}
	}
	hasIDs := strings.Contains(rt.pattern, "{")
	if hasIDs || rt.body != nil || len(rt.query) > 0 {
		out["400"] = errorResponse("a path id, query parameter or body field is not valid")
	}
	if hasIDs {
		out["404"] = errorResponse("no such " + strings.Trim(pathParam.FindString(rt.pattern), "{}"))
	}
	if rt.conflict != "" {
		out["409"] = errorResponse(rt.conflict)
	}
	if rt.rule().Right == authority.Public {
		return out
	}
	out["401"] = errorResponse("no valid bearer token")
	out["403"] = errorResponse("the token's role lacks the right, a member's scope leaves the seat, conversation, ticket or approval out, or the request acts as someone else")
	if rt.method != http.MethodGet {
		out["415"] = errorResponse("the body is not application/json")
	}
	if rt.method == http.MethodPost {
		out["429"] = errorResponse("the principal sent more than api.mutations_per_minute")
	}
	if rt.heavy {
		out["429"] = errorResponse("the process serves " + strconv.Itoa(maxHeavyReads) + " large reads at once already; retry after Retry-After")
	}
	if rt.body != nil {
		out["413"] = errorResponse("the body or a field of it is too large")
	}
	out["500"] = errorResponse("an internal error; its text is in the server log under the request id")
	out["503"] = errorResponse("Temporal, Postgres or Redis did not answer")
	return out
}

// bodySchema is the schema of a route's request body. A body is read
// strictly: a field it does not know is refused, and only the fields the
// route needs are required.
func bodySchema(rt route, schemas map[string]any) map[string]any {
	t := reflect.TypeOf(rt.body)
	s := structSchema(t, schemas)
	delete(s, "required")
	if rt.needs != nil {
		needs := make([]any, len(rt.needs))
		for i, n := range rt.needs {
			needs[i] = n
		}
		s["required"] = needs
	}
	s["additionalProperties"] = false
	schemas[schemaName(t)] = s
	return map[string]any{"$ref": "#/components/schemas/" + schemaName(t)}
}

// schemaOf is the JSON schema of what encoding/json makes of t. A named
// struct goes to schemas, once, and is referred to.
func schemaOf(t reflect.Type, schemas map[string]any) map[string]any {
	switch t {
	case reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}
	case reflect.TypeFor[json.RawMessage]():
		return map[string]any{"description": "any JSON value"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := schemaOf(t.Elem(), schemas)
		if _, ref := s["$ref"]; ref {
			return map[string]any{"allOf": []any{s}, "nullable": true}
		}
		s["nullable"] = true
		return s
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), schemas), "nullable": t.Kind() == reflect.Slice}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), schemas), "nullable": true}
	case reflect.Struct:
		if t.Name() == "" {
			return structSchema(t, schemas)
		}
		name := schemaName(t)
		if _, done := schemas[name]; !done {
			schemas[name] = map[string]any{} // a placeholder, for types that refer to themselves
			schemas[name] = structSchema(t, schemas)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{"description": "any JSON value"}
}

// schemaName names a struct type's schema: api.SeatSummary, and for a
// generic one store.Page_of_store.DiaryItem (a component name allows no
// brackets or slashes).
func schemaName(t reflect.Type) string {
	name := importPath.ReplaceAllString(t.String(), "")
	return strings.NewReplacer("[", "_of_", "]", "", ",", "_and_").Replace(name)
}

// importPath matches the import path before a type argument's package.
var importPath = regexp.MustCompile(`[\w.-]+(/[\w.-]+)*/`)

// structSchema lists a struct's fields as encoding/json writes them: by
// their json name, skipping "-", with embedded structs' fields in line;
// a field without omitempty is always present.
func structSchema(t reflect.Type, schemas map[string]any) map[string]any {
	props := map[string]any{}
	var required []any
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				add(f.Type)
				continue
			}
			if name == "" {
				name = f.Name
			}
			s := schemaOf(f.Type, schemas)
			if strings.Contains(opts, "string") {
				s = map[string]any{"type": "string"}
			}
			props[name] = s
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
		}
	}
	add(t)
	out := map[string]any{"type": "object", "properties": props}
	if required != nil {
		out["required"] = required
	}
	return out
}

// operationID names a route for code generators: post_seats_handle_messages.
func operationID(rt route) string {
	return strings.ToLower(rt.method) + strings.NewReplacer("/", "_", "{", "", "}", "").Replace(rt.pattern)
}
