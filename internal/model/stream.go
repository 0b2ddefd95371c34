package model

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"

	"github.com/crewlet/crewlet"
)

// maxWholeAnswer bounds a whole answer read in place of a stream.
const maxWholeAnswer = 64 << 20

// answeredWhole reports whether a server asked to stream answered with one
// JSON body instead, as an OpenAI-compatible server or a proxy that does
// not stream may: the body is then the whole answer, not events.
func answeredWhole(res *http.Response) bool {
	if res == nil || res.StatusCode >= 300 || res.Body == nil {
		return false
	}
	mediaType, _, err := mime.ParseMediaType(res.Header.Get("Content-Type"))
	return err == nil && mediaType == "application/json"
}

// decodeWhole reads the whole answer answeredWhole found into v.
func decodeWhole(res *http.Response, v any) error {
	return json.NewDecoder(io.LimitReader(res.Body, maxWholeAnswer)).Decode(v)
}

// wholeAsDelta hands a whole answer's text over as one piece, so a caller
// of ChatStream gets its text in deltas whatever the server did.
func wholeAsDelta(resp crewlet.ModelResponse, onDelta func(string)) crewlet.ModelResponse {
	if resp.Text != "" && onDelta != nil {
		onDelta(resp.Text)
	}
	return resp
}
