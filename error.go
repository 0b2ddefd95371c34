package crewlet

import (
	"errors"
	"fmt"
	"time"
)

// Error codes. The api package maps each to one HTTP status.
const (
	ECONFLICT = "conflict"
	EFENCED   = "fenced"
	EINTERNAL = "internal"
	EINVALID  = "invalid"
	ENOTFOUND = "not_found"
	ETOOLARGE = "too_large"
	// EUNAUTHORIZED: no valid credential; EFORBIDDEN: the credential's role
	// may not do it; EUNSUPPORTED: a body in a type the API does not take.
	EUNAUTHORIZED = "unauthorized"
	EFORBIDDEN    = "forbidden"
	EUNSUPPORTED  = "unsupported_media_type"
	ERATELIMITED  = "rate_limited"
	EUNAVAILABLE  = "unavailable"
	// EFULL: the store the request would add to has no room for it (a
	// mailbox at mailbox.max_unread, Redis past its memory line); waiting
	// for the recipient to catch up is what helps, not retrying at once.
	EFULL = "insufficient_storage"
)

// Error is a failure a user can act on: Code says which kind, Message says what
// was wrong and what to do. Messages never carry secrets.
type Error struct {
	Code    string
	Message string
	// RetryAfter, when set, is how long the caller should wait before
	// trying again (the API's Retry-After header).
	RetryAfter time.Duration
	// cause is the internal failure behind it (a Redis, SQL or Temporal
	// error): in Error() and the log, never in Message, which a client or
	// a seat's reply gets.
	cause error
}

func (e *Error) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap is the internal cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Wrapf returns an *Error whose message a client may read, caused by an
// internal failure it must not: the cause goes to the log only.
func Wrapf(code string, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), cause: cause}
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL for
// any other non-nil error and "" for nil.
func ErrorCode(err error) string {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	default:
		return EINTERNAL
	}
}

// ErrorRetryAfter returns the RetryAfter of the first *Error in err's chain,
// 0 when there is none.
func ErrorRetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// ErrorMessage returns the message of the first *Error in err's chain, or a
// generic text for other errors so internal details do not leak to clients.
func ErrorMessage(err error) string {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Message
	default:
		return "internal error; see the server log"
	}
}
