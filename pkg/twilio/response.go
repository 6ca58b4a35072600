package twilio

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxResponseBytes bounds how much of a response body the client reads.
// Twilio's Message and Account resources are a few kilobytes.
const maxResponseBytes = 1 << 20

// maxRetryAfter caps a Retry-After header.
const maxRetryAfter = 24 * time.Hour

// maxSnippet bounds ResponseError.Snippet.
const maxSnippet = 96

// errorBody is Twilio's JSON error answer.
type errorBody struct {
	Code     json.Number `json:"code"`
	Message  string      `json:"message"`
	MoreInfo string      `json:"more_info"`
	Status   json.Number `json:"status"`
}

// htmlTitle finds an HTML page's title.
var htmlTitle = regexp.MustCompile(`(?is)<title>(.*?)</title>`)

// parseAnswer decodes an HTTP answer into result (a 2xx) or returns an
// *Error or *ResponseError. It never panics, whatever the input; the body
// must have been read with a limit of maxResponseBytes+1. redact removes
// credentials and masks phone numbers in any text taken from the body.
func parseAnswer(op string, status int, header http.Header, body []byte, result any, redact func(string) string) error {
	retryAfter := parseRetryAfter(header.Get("Retry-After"))
	// Redact before truncating, so that no part of a credential or a phone
	// number survives a cut.
	clean := func(s string, n int) string { return sanitize(redact(s), n) }
	respErr := func(problem string, err error) error {
		if err != nil {
			err = errors.New(clean(err.Error(), 256))
		}
		return &ResponseError{
			Op:                   op,
			StatusCode:           status,
			ContentType:          clean(header.Get("Content-Type"), 64),
			Problem:              problem,
			Snippet:              clean(excerpt(body), maxSnippet),
			RetryAfter:           retryAfter,
			MayHaveBeenDelivered: maybeDeliveredStatus(status),
			Err:                  err,
		}
	}
	if len(body) > maxResponseBytes {
		return respErr("body larger than 1 MiB", nil)
	}
	trimmed := bytes.TrimSpace(body)
	if status >= 200 && status < 300 {
		if len(trimmed) == 0 {
			return respErr("empty body", nil)
		}
		if err := json.Unmarshal(trimmed, result); err != nil {
			return respErr("not a resource", err)
		}
		return nil
	}
	if len(trimmed) == 0 {
		return respErr("empty body", nil)
	}
	if trimmed[0] != '{' {
		return respErr("not JSON", nil)
	}
	var eb errorBody
	if err := json.Unmarshal(trimmed, &eb); err != nil {
		return respErr("not JSON", err)
	}
	if eb.Code == "" && eb.Message == "" {
		return respErr("not a Twilio error", nil)
	}
	code, _ := strconv.Atoi(eb.Code.String())
	return &Error{
		Op:         op,
		Status:     status,
		Code:       code,
		Message:    clean(eb.Message, 512),
		MoreInfo:   clean(eb.MoreInfo, 256),
		RetryAfter: retryAfter,
	}
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return min(time.Duration(min(n, int64(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), maxRetryAfter)
	}
	return 0
}

// excerpt returns the part of a body worth quoting: an HTML page's title,
// or its first bytes.
func excerpt(body []byte) string {
	if m := htmlTitle.FindSubmatch(body); m != nil {
		return string(m[1])
	}
	if len(body) <= 4*maxSnippet {
		return string(body)
	}
	// Drop the word the cut went through: it may be the start of a
	// credential or a phone number that redaction would no longer
	// recognise.
	return strings.TrimRightFunc(string(body[:4*maxSnippet]), func(r rune) bool {
		return r == '+' || r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)) || r == utf8.RuneError
	})
}

// sanitize makes s printable on one line and at most n runes long.
func sanitize(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n]) + "…"
	}
	return s
}
