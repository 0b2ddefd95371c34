package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.temporal.io/sdk/converter"

	"github.com/crewlet/crewlet"
)

// Bounds on signal payloads. The Temporal frontend is a second door to seats
// and turns (docs/architecture.md, "Doors: the API and the Temporal frontend"):
// whoever reaches it can signal them with anything, so every payload is
// checked here, and one that fails is dropped and logged. They are the API
// door's bounds (input.go) where the door has one, and at least what crewlet
// itself sends; they keep a seat's carried state small (maxCarryBytes).
const (
	// maxSignalBytes bounds a signal's encoded payload: every field at its
	// bound, even with JSON's six-byte escapes, fits.
	maxSignalBytes = 16 << 10
	// maxReasonBytes bounds a free-text reason (pause, drain, move, stop,
	// stop_turn), as the door does.
	maxReasonBytes = crewlet.MaxReasonBytes
	// maxNodeBytes bounds a node incarnation (workers.Incarnation): a host
	// name (at most 253 bytes), ':' and 8 hex digits.
	maxNodeBytes = 264
	// maxByBytes bounds who asked: a principal's name (the door's bound),
	// or a node's incarnation, which a node drain's moves are by.
	maxByBytes = max(crewlet.MaxNameBytes, maxNodeBytes)
	// maxTicketBytes bounds a ticket id, as the door bounds ids.
	maxTicketBytes = crewlet.MaxIDBytes
	// idPunct is what an id field (by, exclude_node, ticket) may hold
	// besides letters and digits: the door's id charset (principal names,
	// host names, node incarnations, ticket ids); no spaces, controls or
	// quotes.
	idPunct = "._@:-"
)

// Bounds on what a seat carries across continue-as-new. A carried string
// that came from outside (a signal, a turn's note) is clipped to these, so a
// seat's carry stays far below Temporal's 2 MiB payload limit whatever it
// was sent before these checks existed.
const (
	// maxLastErrorBytes bounds SeatState.LastError: an error message or a
	// turn's failure note, clipped.
	maxLastErrorBytes = 2048
	// maxCarriedExclude bounds the nodes a carry asks the next placement to
	// avoid; exclusion is a one-placement hint, so the oldest go first.
	maxCarriedExclude = 16
	// maxCarryBytes is the stated bound on a seat's continue-as-new input
	// as JSON, with every field at its bound (TestSeatCarryIsBounded).
	maxCarryBytes = 64 << 10
)

// Encodings a signal payload may have: JSON, or none at all (a signal sent
// without input, or with nil).
const (
	encodingJSON = "json/plain"
	encodingNull = "binary/null"
)

// decodeSignal decodes a signal payload received as a converter.RawValue.
// Receiving raw matters: a typed Receive drops a payload the SDK cannot
// decode and waits for the next signal on that channel, so one bad signal
// would hold the receiving coroutine, and every other signal with it.
//
// The payload must be a JSON object with only T's fields (matched exactly,
// as crewlet sends them), of the right types, and within size; check then
// validates the values. No payload, or JSON null, is T's zero value, as it
// always was.
func decodeSignal[T any](raw converter.RawValue, check func(T) error) (T, error) {
	var v T
	p := raw.Payload()
	if p == nil {
		return v, check(v)
	}
	data := p.GetData()
	if len(data) > maxSignalBytes {
		return v, fmt.Errorf("payload of %d bytes, more than %d", len(data), maxSignalBytes)
	}
	switch string(p.GetMetadata()[converter.MetadataEncoding]) {
	case encodingNull:
		return v, check(v)
	case encodingJSON:
	default:
		return v, fmt.Errorf("payload encoding is not %s", encodingJSON)
	}
	if !utf8.Valid(data) {
		return v, errors.New("payload is not valid UTF-8")
	}
	if !json.Valid(data) {
		return v, errors.New("payload is not valid JSON")
	}
	// encoding/json gives the same result for the same bytes; workflowcheck
	// flags it only through reflect's panic paths and the allocator.
	var obj map[string]json.RawMessage
	//workflowcheck:ignore
	if err := json.Unmarshal(data, &obj); err != nil {
		return v, errors.New("payload is not a JSON object")
	}
	known := 0
	for _, f := range jsonFields(reflect.TypeFor[T]()) {
		if _, ok := obj[f]; ok {
			known++
		}
	}
	if unknown := len(obj) - known; unknown > 0 {
		return v, fmt.Errorf("payload has %d unknown field(s)", unknown)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	//workflowcheck:ignore
	if err := dec.Decode(&v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			// Field is one of T's own names: every key was checked above.
			return v, fmt.Errorf("%s: not a %s", typeErr.Field, typeErr.Type)
		}
		return v, errors.New("payload does not decode")
	}
	return v, check(v)
}

// jsonFields lists the JSON names of a struct type's fields.
func jsonFields(t reflect.Type) []string {
	if t.Kind() != reflect.Struct {
		return nil
	}
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// payloadBytes is the size of a received payload, the only thing about a
// rejected payload that is logged.
func payloadBytes(raw converter.RawValue) int {
	return len(raw.Payload().GetData())
}

// checkReason validates free text as the door does: bounded, valid UTF-8,
// no NUL (Postgres text refuses it). Its errors never quote the text.
func checkReason(field, s string) error {
	return crewlet.CheckText(field, s, maxReasonBytes)
}

// checkID validates an id-like field: bounded, letters, digits and idPunct
// only. Empty is allowed (crewlet sends by "" when nobody was named).
func checkID(field, s string, limit int) error {
	switch {
	case len(s) > limit:
		return fmt.Errorf("%s: %d bytes, more than %d", field, len(s), limit)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s: not valid UTF-8", field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s: contains NUL", field)
	}
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune(idPunct, r) {
			return fmt.Errorf("%s: only letters, digits and %q are allowed", field, idPunct)
		}
	}
	return nil
}

func checkPause(r crewlet.PauseRequest) error {
	return firstErr(checkReason("reason", r.Reason), checkID("by", r.By, maxByBytes))
}

func checkResume(r crewlet.ResumeRequest) error {
	return checkID("by", r.By, maxByBytes)
}

func checkDrain(r crewlet.DrainRequest) error {
	return firstErr(checkReason("reason", r.Reason), checkID("by", r.By, maxByBytes))
}

func checkMove(r crewlet.MoveRequest) error {
	return firstErr(checkID("exclude_node", r.ExcludeNode, maxNodeBytes),
		checkReason("reason", r.Reason), checkID("by", r.By, maxByBytes))
}

func checkHostLost(r crewlet.HostLostRequest) error {
	if r.Node == "" {
		return errors.New("node: empty")
	}
	return firstErr(checkID("node", r.Node, maxNodeBytes), checkID("by", r.By, maxByBytes))
}

func checkStop(r crewlet.StopRequest) error {
	return firstErr(checkReason("reason", r.Reason), checkID("by", r.By, maxByBytes))
}

func checkStopTurn(r crewlet.StopTurnRequest) error {
	return firstErr(checkReason("reason", r.Reason), checkID("by", r.By, maxByBytes))
}

func checkTicket(r crewlet.TicketSignal) error {
	if r.Ticket == "" {
		return errors.New("ticket: empty")
	}
	return checkID("ticket", r.Ticket, maxTicketBytes)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// clipText cuts s to at most limit bytes on a rune boundary, ending in "…"
// when it cut anything.
func clipText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	cut := max(limit-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if limit < len(ellipsis) {
		return s[:cut]
	}
	return s[:cut] + ellipsis
}
