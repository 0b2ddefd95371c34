package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/crewlet/crewlet"
	"go.temporal.io/sdk/converter"
)

// maxSignalBytes bounds a signal's encoded payload: every field at its bound
// (crewlet's signal checks, signal_check.go), even with JSON's six-byte
// escapes, fits.
const maxSignalBytes = 16 << 10

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
// The payload must be JSON of T's type and within size; a struct T must be a
// JSON object with only T's fields (matched exactly, as crewlet sends them),
// of the right types. check (the payload type's Validate, which the seat
// client calls before it sends) then validates the values. A payload that
// fails is dropped and logged by the caller. No payload, or JSON null, is
// T's zero value, as it always was.
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
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Struct {
		if err := onlyFieldsOf(t, data); err != nil {
			return v, err
		}
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

// onlyFieldsOf checks that data is a JSON object whose keys are all JSON
// names of t's fields.
func onlyFieldsOf(t reflect.Type, data []byte) error {
	// encoding/json gives the same result for the same bytes; workflowcheck
	// flags it only through reflect's panic paths and the allocator.
	var obj map[string]json.RawMessage
	//workflowcheck:ignore
	if err := json.Unmarshal(data, &obj); err != nil {
		return errors.New("payload is not a JSON object")
	}
	known := 0
	for _, f := range jsonFields(t) {
		if _, ok := obj[f]; ok {
			known++
		}
	}
	if unknown := len(obj) - known; unknown > 0 {
		return fmt.Errorf("payload has %d unknown field(s)", unknown)
	}
	return nil
}

// jsonFields lists the JSON names of a struct type's fields.
func jsonFields(t reflect.Type) []string {
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

// clipText cuts s to at most limit bytes on a rune boundary, ending in "…"
// when it cut anything.
func clipText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	kept := crewlet.RunePrefix(s, limit-len(ellipsis))
	if limit < len(ellipsis) {
		return kept
	}
	return kept + ellipsis
}
