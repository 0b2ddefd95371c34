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
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.temporal.io/sdk/client"

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
	Mailbox  *mailbox.Mailbox
	Temporal client.Client
	Log      *slog.Logger
}

// maxBody bounds a request body; mail and signals are small.
const maxBody = 1 << 20

// Handler returns the API's router.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method_not_allowed", Detail: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)})
	})
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Route("/seats", func(r chi.Router) {
		r.Get("/", s.listSeats)
		r.Get("/{handle}", s.getSeat)
		r.Post("/{handle}/messages", s.sendMessage)
		r.Get("/{handle}/inbox", s.inbox)
		r.Get("/{handle}/events", s.seatEvents)
		r.Post("/{handle}/pause", s.pauseSeat)
		r.Post("/{handle}/resume", s.resumeSeat)
		r.Post("/{handle}/drain", s.drainSeat)
		r.Get("/{handle}/usage", s.seatUsage)
		r.Get("/{handle}/turns", s.seatTurns)
		r.Get("/{handle}/memory", s.seatMemory)
	})
	r.Get("/turns/{handle}/{work_key}", s.getTurn)
	r.Get("/conversations/{id}", s.getConversation)
	r.Post("/tickets", s.openTicket)
	r.Get("/tickets", s.listTickets)
	r.Get("/tickets/{id}", s.getTicket)
	r.Post("/tickets/{id}/answer", s.answerTicket)
	r.Post("/tickets/{id}/cancel", s.cancelTicket)
	r.Get("/nodes", s.listNodes)
	r.Get("/deadletters", s.listDeadLetters)
	r.Post("/deadletters/{id}/requeue", s.requeueDeadLetter)
	r.Post("/nodes/{id}/drain", s.drainNode)
	return r
}

type errorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail"`
}

// statusOf maps domain error codes to HTTP statuses, once for the whole API.
var statusOf = map[string]int{
	crewlet.ECONFLICT:    http.StatusConflict,
	crewlet.EFENCED:      http.StatusConflict,
	crewlet.EINVALID:     http.StatusBadRequest,
	crewlet.ETOOLARGE:    http.StatusRequestEntityTooLarge,
	crewlet.ENOTFOUND:    http.StatusNotFound,
	crewlet.EUNAVAILABLE: http.StatusServiceUnavailable,
	crewlet.EINTERNAL:    http.StatusInternalServerError,
}

func writeError(w http.ResponseWriter, err error) {
	code := crewlet.ErrorCode(err)
	writeJSON(w, statusOf[code], errorBody{Error: code, Detail: crewlet.ErrorMessage(err)})
}

// logError writes err to the response and, when it is not the client's
// fault, to the log with its full text.
func (s *Server) logError(w http.ResponseWriter, r *http.Request, err error) {
	if code := crewlet.ErrorCode(err); code == crewlet.EINTERNAL || code == crewlet.EUNAVAILABLE {
		s.Log.Error("api_error", "method", r.Method, "path", r.URL.Path, "error", err)
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
