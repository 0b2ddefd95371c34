package crewlet

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Bounds of what a caller may send: refused at the door, so nothing a caller
// sends can fail inside a turn
// (docs/architecture.md, "Doors: the API and the Temporal frontend").
const (
	// MaxMessageBytes bounds a message's text and a ticket's task,
	// question and answer.
	MaxMessageBytes = 64 << 10
	// MaxReasonBytes bounds a pause, drain or cancel reason.
	MaxReasonBytes = 1024
	// MaxNameBytes bounds a "by" name.
	MaxNameBytes = 128
	// MaxChatIDBytes bounds a chat id.
	MaxChatIDBytes = 256
	// MaxIDBytes bounds a conversation id and any id in a path.
	MaxIDBytes = 128
)

// idPattern is the charset of conversation ids and ids in paths: what
// crewlet makes (uuids, digests, ticket and stream ids, node incarnations)
// and what a person would type.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]*$`)

// IDPattern describes the id charset for error messages.
const IDPattern = "letters, digits, '.', '_', ':', '@' and '-', starting with a letter or digit"

// CheckText refuses a text field that is not valid UTF-8, holds a NUL
// character, or is longer than max bytes. field names it in the error.
func CheckText(field, s string, max int) error {
	switch {
	case !utf8.ValidString(s):
		return Errorf(EINVALID, "%s is not valid UTF-8; send UTF-8 text", field)
	case strings.IndexByte(s, 0) >= 0:
		return Errorf(EINVALID, "%s holds a NUL character; remove it", field)
	case len(s) > max:
		return Errorf(EINVALID, "%s is %d bytes; at most %d", field, len(s), max)
	}
	return nil
}

// CheckID refuses an id (a conversation id, an id in a path) outside the id
// charset or longer than MaxIDBytes. An empty id is refused too.
func CheckID(field, s string) error {
	switch {
	case s == "":
		return Errorf(EINVALID, "%s is empty", field)
	case len(s) > MaxIDBytes:
		return Errorf(EINVALID, "%s is %d bytes; at most %d", field, len(s), MaxIDBytes)
	case !idPattern.MatchString(s):
		return Errorf(EINVALID, "%s %s is not an id: ids are %s", field, quoteID(s), IDPattern)
	}
	return nil
}

// quoteID shows a refused id safely: quoted, clipped, control and invalid
// bytes escaped.
func quoteID(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// Clean makes text a model or a tool produced storable and sendable: invalid
// UTF-8 and NUL characters become U+FFFD. It returns s itself when there is
// nothing to clean.
func Clean(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
