package model

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
)

// maxMessageLen bounds ProviderError.Message: it ends up in logs, the seat's
// state and the ledger, where a whole response body does not belong.
const maxMessageLen = 300

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// maxRetryAfter keeps an absurd Retry-After from overflowing a Duration.
const maxRetryAfter = 30 * 24 * time.Hour

// quotaWords mark a response as an exhausted quota or balance rather than a
// passing rate limit or a malformed request.
var quotaWords = []string{"quota", "insufficient_quota", "credit", "billing", "exhausted"}

// secretPatterns catch credentials that are not the caller's key, or a
// provider's echo of it partly masked ("sk-abc***xyz").
var secretPatterns = regexp.MustCompile(`(?i)(bearer\s+[A-Za-z0-9._~+/=\-*]+|\bsk-[A-Za-z0-9_\-*]{6,}|x-api-key:\s*\S+)`)

// classify turns the failure of a provider call into a *crewlet.ProviderError.
// res is the HTTP response the SDK saw (nil when none came); apiKey is
// redacted from every text that reaches the error. A done caller context is
// returned as it is: the call was abandoned, the provider did not fail.
func classify(ctx context.Context, provider, apiKey string, res *http.Response, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if res != nil && res.StatusCode >= 400 {
		return classifyResponse(provider, apiKey, res.StatusCode, res.Header, readErrorBody(res))
	}
	pe := &crewlet.ProviderError{Provider: provider, Kind: crewlet.ProviderServerError}
	if res != nil {
		// A success status whose body could not be read or decoded.
		pe.Status = res.StatusCode
	}
	pe.Message = cleanMessage(apiKey, err.Error())
	if pe.Message == "" {
		pe.Message = "request failed"
	}
	return pe
}

// classifyResponse classifies an HTTP error response:
//
//	429 with quota words        exhausted (RetryAfter kept)
//	429                         rate_limited
//	402, or 400/403 with quota  exhausted
//	401, 403                    auth
//	408, 5xx                    server_error
//	other 4xx                   bad_request
func classifyResponse(provider, apiKey string, status int, header http.Header, body []byte) *crewlet.ProviderError {
	quota := mentionsQuota(body)
	var kind string
	switch {
	case status == http.StatusTooManyRequests && quota:
		kind = crewlet.ProviderExhausted
	case status == http.StatusTooManyRequests:
		kind = crewlet.ProviderRateLimited
	case status == http.StatusPaymentRequired:
		kind = crewlet.ProviderExhausted
	case (status == http.StatusBadRequest || status == http.StatusForbidden) && quota:
		kind = crewlet.ProviderExhausted
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		kind = crewlet.ProviderAuth
	case status == http.StatusRequestTimeout || status >= 500:
		kind = crewlet.ProviderServerError
	default:
		kind = crewlet.ProviderBadRequest
	}
	msg := cleanMessage(apiKey, bodyMessage(body))
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &crewlet.ProviderError{
		Provider:   provider,
		Kind:       kind,
		RetryAfter: retryAfter(header, time.Now()),
		Status:     status,
		Message:    msg,
	}
}

// endpoint checks what every HTTP provider needs before its first call: a
// model, a token cap that is not negative, and an http(s) base URL (def when
// base is empty). It returns the base URL to use, as written and parsed.
func endpoint(provider, model, base, def string, maxTokens int) (string, *url.URL, error) {
	if model == "" {
		return "", nil, crewlet.Errorf(crewlet.EINVALID, "%s: model is required", provider)
	}
	if maxTokens < 0 {
		return "", nil, crewlet.Errorf(crewlet.EINVALID, "%s: max tokens %d is negative", provider, maxTokens)
	}
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, crewlet.Errorf(crewlet.EINVALID, "%s: base URL %q is not an http(s) URL", provider, base)
	}
	return base, u, nil
}

func readErrorBody(res *http.Response) []byte {
	if res.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	return b
}

func mentionsQuota(body []byte) bool {
	lower := strings.ToLower(string(body))
	for _, w := range quotaWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// bodyMessage picks the provider's own words out of an error body. Both
// OpenAI and Anthropic nest them as {"error": {"type"|"code", "message"}};
// OpenAI-compatible servers also answer {"error": "..."}, {"message": "..."}
// or {"detail": ...}. A body that is not JSON is used as text.
func bodyMessage(body []byte) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return string(body)
	}
	if len(env.Error) > 0 {
		var obj struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(env.Error, &obj) == nil {
			label := obj.Type
			if code := jsonText(obj.Code); code != "" {
				label = code
			}
			switch {
			case label != "" && obj.Message != "":
				return label + ": " + obj.Message
			case obj.Message != "":
				return obj.Message
			case label != "":
				return label
			}
		}
		if s := jsonText(env.Error); s != "" {
			return s
		}
	}
	if s := jsonText(env.Message); s != "" {
		return s
	}
	if len(env.Detail) > 0 {
		if s := jsonText(env.Detail); s != "" {
			return s
		}
		return string(env.Detail)
	}
	return string(body)
}

// jsonText returns a JSON string's or number's text, or "".
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// cleanMessage makes s fit for an error: no credential, one line, short.
func cleanMessage(apiKey, s string) string {
	if apiKey != "" {
		s = strings.ReplaceAll(s, apiKey, "[REDACTED]")
	}
	s = secretPatterns.ReplaceAllString(s, "[REDACTED]")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxMessageLen {
		s = crewlet.RunePrefix(s, maxMessageLen) + "…"
	}
	return s
}

// retryAfter reads the provider's advice: retry-after-ms (milliseconds),
// else Retry-After as seconds or an HTTP date. 0 when absent or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			return clampDuration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return clampDuration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return clampDuration(float64(t.Sub(now)))
	}
	return 0
}

func clampDuration(ns float64) time.Duration {
	switch {
	case math.IsNaN(ns) || ns <= 0:
		return 0
	case ns >= float64(maxRetryAfter):
		return maxRetryAfter
	}
	return time.Duration(ns)
}

// invalidRequest reports a request crewlet could not even encode; sending
// it again would fail the same way.
func invalidRequest(provider, apiKey, format string, err error) error {
	return &crewlet.ProviderError{
		Provider: provider,
		Kind:     crewlet.ProviderBadRequest,
		Message:  cleanMessage(apiKey, format+": "+err.Error()),
	}
}

// errorsAsResponse digs the HTTP response out of an SDK error when the
// response capture did not get it.
func errorsAsResponse[E error](err error, response func(E) *http.Response) *http.Response {
	var target E
	if errors.As(err, &target) {
		return response(target)
	}
	return nil
}

// classifyStream classifies the failure of a streaming call. event is the
// body of an error event the provider sent in a stream that began well (nil
// when none came): its error type stands for the HTTP status the same error
// has at the start (streamErrorStatus), so it classifies as that would,
// while Status stays the stream's own. A failure before the stream began is
// classified as classify does it; err nil means the stream ended before the
// answer did, which is worth retrying, as a server error is.
func classifyStream(ctx context.Context, provider, apiKey string, res *http.Response, err error, event []byte) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	status := 0
	if res != nil {
		status = res.StatusCode
	}
	switch {
	case event != nil && status < 400:
		pe := classifyResponse(provider, apiKey, streamErrorStatus(event), nil, event)
		pe.Status = status
		return pe
	case err != nil:
		return classify(ctx, provider, apiKey, res, err)
	}
	return &crewlet.ProviderError{
		Provider: provider, Kind: crewlet.ProviderServerError, Status: status,
		Message: "the stream ended before the answer did",
	}
}

// streamErrorStatuses are the HTTP statuses OpenAI's and Anthropic's error
// types and codes come with when they answer a request with an error.
var streamErrorStatuses = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"rate_limit_exceeded":   http.StatusTooManyRequests,
	"insufficient_quota":    http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"server_error":          http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// streamErrorStatus is the HTTP status an error event's code, else its
// type, stands for; 500 when neither is known: the stream broke after a
// success, which is worth retrying.
func streamErrorStatus(event []byte) int {
	var env struct {
		Error struct {
			Type string          `json:"type"`
			Code json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(event, &env) == nil {
		for _, label := range []string{jsonText(env.Error.Code), env.Error.Type} {
			if status, ok := streamErrorStatuses[label]; ok {
				return status
			}
		}
	}
	return http.StatusInternalServerError
}
