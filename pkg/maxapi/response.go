package maxapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxResponseBytes bounds how much of a response body the client reads.
// MAX's answers to POST /messages and GET /me are a few kilobytes at most.
const maxResponseBytes = 1 << 20

// maxRetryAfter caps Retry-After so that absurd values cannot overflow a
// time.Duration.
const maxRetryAfter = 7 * 24 * time.Hour

// maxSnippet bounds ResponseError.Snippet.
const maxSnippet = 96

// errorEnvelope is the schema's Error: code and message are required, error
// is optional.
type errorEnvelope struct {
	Code    *string `json:"code"`
	Message *string `json:"message"`
	Error   string  `json:"error"`
}

// htmlTitle finds an HTML page's title.
var htmlTitle = regexp.MustCompile(`(?is)<title>(.*?)</title>`)

// parseResponse turns an HTTP answer into either a decoded result (nil
// error) or an *Error or *ResponseError. It never panics, whatever the
// input. The body must have been read with a limit of maxResponseBytes+1 so
// that an oversized body is recognised. scrub removes the token from any
// text taken from the body; now dates a Retry-After given as an HTTP date.
func parseResponse(op string, status int, header http.Header, body []byte, result any, scrub func(string) string, now time.Time) error {
	respErr := func(problem string, err error) error {
		return &ResponseError{
			Op:                   op,
			StatusCode:           status,
			ContentType:          scrub(sanitize(header.Get("Content-Type"), 64)),
			Problem:              problem,
			Snippet:              scrub(snippet(body)),
			RetryAfter:           retryAfterHeader(status, header, now),
			MayHaveBeenDelivered: maybeDeliveredStatus(status),
			Err:                  err,
		}
	}
	if len(body) > maxResponseBytes {
		return respErr(fmt.Sprintf("body larger than %d bytes", maxResponseBytes), nil)
	}
	if status >= 200 && status < 300 {
		if len(bytes.TrimSpace(body)) == 0 {
			return respErr("empty body", nil)
		}
		if err := json.Unmarshal(body, result); err != nil {
			return respErr("undecodable result", scrubErr(err, scrub))
		}
		return nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return respErr("empty body", nil)
	}
	var env errorEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		var syntaxErr *json.SyntaxError
		if errors.As(err, &syntaxErr) {
			return respErr("not JSON", scrubErr(err, scrub))
		}
		return respErr("not MAX's error body", scrubErr(err, scrub))
	}
	if env.Code == nil && env.Message == nil {
		return respErr("not MAX's error body: no code or message", nil)
	}
	e := &Error{Op: op, Status: status, RetryAfter: retryAfterHeader(status, header, now)}
	if env.Code != nil {
		e.Code = scrub(sanitize(*env.Code, 128))
	}
	if env.Message != nil {
		e.Message = scrub(sanitize(*env.Message, 512))
	}
	if e.Message == "" && env.Error != "" {
		e.Message = scrub(sanitize(env.Error, 512))
	}
	return e
}

// scrubErr replaces err by a token-free copy of its message; json errors
// quote input bytes.
func scrubErr(err error, scrub func(string) string) error {
	msg := err.Error()
	if clean := scrub(msg); clean != msg {
		return errors.New(clean)
	}
	return err
}

// retryAfterHeader reads the Retry-After header of a 429 or 503, in seconds
// or as an HTTP date.
func retryAfterHeader(status int, header http.Header, now time.Time) time.Duration {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return 0
	}
	v := strings.TrimSpace(header.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		if s >= int64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// maybeDeliveredStatus reports whether an HTTP status that came without a
// readable answer means the request may have been acted upon: a 2xx (MAX
// accepted it) or a gateway's 502/504 (it forwarded the request and lost the
// answer).
func maybeDeliveredStatus(code int) bool {
	return (code >= 200 && code < 300) || code == 502 || code == 504
}

// snippet returns a short printable excerpt of a body: an HTML page's title
// when there is one, its first bytes otherwise.
func snippet(body []byte) string {
	if len(body) > 4096 {
		body = body[:4096]
	}
	if m := htmlTitle.FindSubmatch(body); m != nil {
		return sanitize(string(m[1]), maxSnippet)
	}
	return sanitize(string(body), maxSnippet)
}

// sanitize collapses whitespace, drops control and invalid bytes and cuts s
// to at most n bytes on a rune boundary.
func sanitize(s string, n int) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			continue
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case !unicode.IsPrint(r):
			continue
		}
		if space {
			if b.Len()+1 > n {
				break
			}
			b.WriteByte(' ')
			space = false
		}
		if b.Len()+utf8.RuneLen(r) > n {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
