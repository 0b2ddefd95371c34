// Package api is crewlet's REST API: a chi router over the org, its seats and
// their conversations. Errors are JSON {error, detail}.
package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.temporal.io/sdk/client"
	"golang.org/x/time/rate"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/control"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
)

// Server serves the API.
type Server struct {
	Org      *config.Config
	Control  *control.Control
	Store    *store.Store
	Tickets  *control.Tickets
	Profiles *control.Profiles
	Mailbox  *mailbox.Mailbox
	Temporal client.Client
	Log      *slog.Logger
	// creds are the org's tokens, read from the environment by Handler.
	creds []credential
	// limiters hold each principal's mutation budget.
	limitMu  sync.Mutex
	limiters map[string]*rate.Limiter
}

// maxBody bounds a request body; mail and signals are small.
const maxBody = 1 << 20

// route is one API route and the right it needs: the one table of who may
// do what, for REST and the CLI (which calls REST) alike. docs/operations.md
// lists it, and a test holds the two together.
type route struct {
	method, pattern string
	right           Right
	handler         http.HandlerFunc
}

func (s *Server) routes() []route {
	get, post := http.MethodGet, http.MethodPost
	return []route{
		{get, "/healthz", Public, s.healthz},
		{get, "/readyz", Public, s.readyz},
		{get, "/seats", Read, s.listSeats},
		{get, "/seats/{handle}", Read, s.getSeat},
		{post, "/seats/{handle}/messages", Operate, s.sendMessage},
		{get, "/seats/{handle}/inbox", Read, s.inbox},
		{get, "/seats/{handle}/events", Read, s.seatEvents},
		{post, "/seats/{handle}/pause", Operate, s.pauseSeat},
		{post, "/seats/{handle}/resume", Operate, s.resumeSeat},
		{post, "/seats/{handle}/drain", Operate, s.drainSeat},
		{get, "/seats/{handle}/usage", Read, s.seatUsage},
		{get, "/seats/{handle}/turns", Read, s.seatTurns},
		{get, "/seats/{handle}/memory", Read, s.seatMemory},
		{get, "/turns/{handle}/{work_key}", Read, s.getTurn},
		{get, "/conversations/{id}", Read, s.getConversation},
		{post, "/tickets", Operate, s.openTicket},
		{get, "/tickets", Read, s.listTickets},
		{get, "/tickets/{id}", Read, s.getTicket},
		{post, "/tickets/{id}/answer", Operate, s.answerTicket},
		{post, "/tickets/{id}/cancel", Operate, s.cancelTicket},
		{get, "/nodes", Read, s.listNodes},
		{post, "/nodes/{id}/drain", Operate, s.drainNode},
		{get, "/profiles", Read, s.listProfiles},
		{post, "/models/{id}/disable", Operate, s.disableModel},
		{post, "/models/{id}/enable", Operate, s.enableModel},
		{get, "/deadletters", Read, s.listDeadLetters},
		{post, "/deadletters/{id}/requeue", Operate, s.requeueDeadLetter},
		{get, "/audit", Administer, s.listAudit},
	}
}

// Handler returns the API's router.
func (s *Server) Handler() http.Handler {
	s.creds = credentials(s.Org)
	r := chi.NewRouter()
	r.Use(s.requestLog, middleware.Recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method_not_allowed", Detail: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)})
	})
	for _, rt := range s.routes() {
		r.Method(rt.method, rt.pattern, s.guard(rt))
	}
	return r
}

type errorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail"`
}

// statusOf maps domain error codes to HTTP statuses, once for the whole API.
var statusOf = map[string]int{
	crewlet.ECONFLICT:     http.StatusConflict,
	crewlet.EFENCED:       http.StatusConflict,
	crewlet.EINVALID:      http.StatusBadRequest,
	crewlet.ETOOLARGE:     http.StatusRequestEntityTooLarge,
	crewlet.EUNAUTHORIZED: http.StatusUnauthorized,
	crewlet.EFORBIDDEN:    http.StatusForbidden,
	crewlet.EUNSUPPORTED:  http.StatusUnsupportedMediaType,
	crewlet.ERATELIMITED:  http.StatusTooManyRequests,
	crewlet.ENOTFOUND:     http.StatusNotFound,
	crewlet.EUNAVAILABLE:  http.StatusServiceUnavailable,
	crewlet.EINTERNAL:     http.StatusInternalServerError,
}

func writeError(w http.ResponseWriter, err error) {
	code := crewlet.ErrorCode(err)
	writeJSON(w, statusOf[code], errorBody{Error: code, Detail: crewlet.ErrorMessage(err)})
}

// logError writes err to the response and, when it is not the client's
// fault, to the log with its full text.
func (s *Server) logError(w http.ResponseWriter, r *http.Request, err error) {
	if code := crewlet.ErrorCode(err); code == crewlet.EINTERNAL || code == crewlet.EUNAVAILABLE {
		s.Log.ErrorContext(r.Context(), "api_error", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeError(w, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes a request body into v. An empty body leaves v as it is;
// unknown fields, duplicate keys, trailing data and malformed JSON are
// EINVALID, a body over maxBody ETOOLARGE.
func readJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return crewlet.Errorf(crewlet.ETOOLARGE, "request body is over %d bytes", maxBody)
	case err != nil:
		return crewlet.Errorf(crewlet.EINVALID, "request body could not be read: %v", err)
	case len(bytes.TrimSpace(body)) == 0:
		return nil
	}
	if !utf8.Valid(body) {
		// The JSON decoder would quietly turn the bad bytes into U+FFFD.
		return crewlet.Errorf(crewlet.EINVALID, "request body is not valid UTF-8; send UTF-8 JSON")
	}
	if key, dup := duplicateKey(body); dup {
		return crewlet.Errorf(crewlet.EINVALID, "request body names %q twice; name each field once", key)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return crewlet.Errorf(crewlet.EINVALID, "request body is not valid JSON for this call: %v", err)
	}
	if dec.More() {
		return crewlet.Errorf(crewlet.EINVALID, "request body has data after the JSON object")
	}
	return nil
}

// duplicateKey reports the first key an object in the JSON document names
// twice. A document that is not JSON has none; decoding reports it.
func duplicateKey(doc []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var walk func() (string, bool)
	walk = func() (string, bool) {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return "", false
				}
				key, _ := k.(string)
				if seen[key] {
					return key, true
				}
				seen[key] = true
				if key, dup := walk(); dup {
					return key, true
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if key, dup := walk(); dup {
					return key, true
				}
			}
			_, _ = dec.Token()
		}
		return "", false
	}
	return walk()
}

// pathID returns the path parameter name, or writes a 400 and false when it
// is not an id: checked before anything reads the store with it.
func pathID(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	id := chi.URLParam(r, name)
	if err := crewlet.CheckID(name, id); err != nil {
		writeError(w, err)
		return "", false
	}
	return id, true
}
