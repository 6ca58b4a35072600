package botapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"
)

// maxResponseBytes bounds how much of a response body the client reads. Bot
// API answers to sendMessage, sendPhoto and getMe are a few hundred bytes; anything
// near this size is not a Bot API answer.
const maxResponseBytes = 1 << 20

// maxRetryAfter caps retry_after so that absurd values cannot overflow a
// time.Duration. Telegram's real pauses are seconds to hours.
const maxRetryAfter = 7 * 24 * time.Hour

// maxSnippet bounds ResponseError.Snippet.
const maxSnippet = 96

// envelope is the Bot API's answer, its result kept as R: raw for the
// general path, the caller's value for the single pass. Numbers are decoded
// as json.Number so that out-of-range values degrade to "absent" instead of
// failing the whole answer.
type envelope[R any] struct {
	OK          *bool       `json:"ok"`
	Result      R           `json:"result"`
	ErrorCode   json.Number `json:"error_code"`
	Description string      `json:"description"`
	Parameters  *struct {
		MigrateToChatID json.Number `json:"migrate_to_chat_id"`
		RetryAfter      json.Number `json:"retry_after"`
	} `json:"parameters"`
}

// retryAfterText finds "retry after N" in a 429 description.
var retryAfterText = regexp.MustCompile(`(?i)retry after (\d{1,9})`)

// htmlTitle finds an HTML page's title.
var htmlTitle = regexp.MustCompile(`(?is)<title>(.*?)</title>`)

// parseResponse turns an HTTP answer into either a decoded result (nil error)
// or an *Error or *ResponseError. It never panics, whatever the input. The
// body must have been read with a limit of maxResponseBytes+1 so that an
// oversized body is recognised. scrub removes the token from any text taken
// from the body.
func parseResponse(method string, status int, header http.Header, body []byte, result any, scrub func(string) string) error {
	if len(body) <= maxResponseBytes && decodedInOnePass(body, result) {
		return nil
	}
	return parseGeneral(method, status, header, body, result, scrub)
}

// parseGeneral is parseResponse for any answer, in two passes: the envelope,
// with its result kept raw, then the result.
func parseGeneral(method string, status int, header http.Header, body []byte, result any, scrub func(string) string) error {
	respErr := func(problem string, err error) error {
		return &ResponseError{
			Method:               method,
			StatusCode:           status,
			ContentType:          scrub(sanitize(header.Get("Content-Type"), 64)),
			Problem:              problem,
			Snippet:              scrub(snippet(body)),
			RetryAfter:           retryAfterHeader(status, header),
			MayHaveBeenDelivered: maybeDeliveredStatus(status),
			Err:                  err,
		}
	}
	if len(body) > maxResponseBytes {
		return respErr(fmt.Sprintf("body larger than %d bytes", maxResponseBytes), nil)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return respErr("empty body", nil)
	}
	var env envelope[json.RawMessage]
	if err := json.Unmarshal(body, &env); err != nil {
		var syntaxErr *json.SyntaxError
		if errors.As(err, &syntaxErr) {
			return respErr("not JSON", scrubErr(err, scrub))
		}
		return respErr("not a Bot API envelope", scrubErr(err, scrub))
	}
	if env.OK == nil {
		return respErr("not a Bot API envelope: no \"ok\" field", nil)
	}
	if *env.OK {
		if result == nil {
			return nil
		}
		if len(env.Result) == 0 || bytes.Equal(env.Result, []byte("null")) {
			return respErr("ok without result", nil)
		}
		if err := json.Unmarshal(env.Result, result); err != nil {
			return respErr("undecodable result", scrubErr(err, scrub))
		}
		return nil
	}

	e := &Error{Method: method, Code: status, Description: scrub(sanitize(env.Description, 512))}
	if code, ok := parseInt(env.ErrorCode); ok && code > 0 && code < 1000 {
		e.Code = int(code)
	}
	if e.Description == "" {
		e.Description = http.StatusText(e.Code)
	}
	if p := env.Parameters; p != nil {
		if id, ok := parseInt(p.MigrateToChatID); ok {
			e.MigrateToChatID = id
		}
		if s, ok := parseInt(p.RetryAfter); ok {
			e.RetryAfter = seconds(s)
		}
	}
	if e.RetryAfter == 0 && e.Code == 429 {
		if m := retryAfterText.FindStringSubmatch(e.Description); m != nil {
			s, _ := strconv.ParseInt(m[1], 10, 64)
			e.RetryAfter = seconds(s)
		}
	}
	return e
}

// maxOnePassBytes is the largest answer decodedInOnePass takes: no deeper
// than encoding/json's 10,000 levels of nesting (each takes a byte), which
// segmentio/encoding does not count. An answer to sendMessage is at most a
// few kilobytes (a 4,096-character text).
const maxOnePassBytes = 10000

// decodedInOnePass decodes a successful answer and its result in a single
// pass over the body, and reports whether it did. Every answer sent
// (sendMessage's, sendPhoto's) is a successful one, and parseResponse's
// general path (encoding/json, in two passes: the envelope with its result
// kept raw, then the result) cost a worker about 8% of its CPU. The single
// pass uses segmentio/encoding's decoder, which follows encoding/json's
// rules: 2.0 µs instead of 8.8 for the answer to a sendMessage
// (BenchmarkParseResponse).
//
// It reports false, with result left at its zero value, for anything the
// general path must judge: no result wanted or a result already set, a body
// larger than maxOnePassBytes or that does not decode (or makes the decoder
// panic), "ok" not true, a null, absent or type-mismatched result, or one
// that decoded to its zero value (which the single pass cannot tell from an
// absent one). For every other body the general path would decode the
// same value with no error (a JSON object whose "result" key appears twice
// aside, whose meaning RFC 8259 leaves open: here the occurrences merge,
// there the last one wins): TestOnePassMatchesGeneral and
// FuzzOnePassMatchesGeneral.
func decodedInOnePass(body []byte, result any) (decoded bool) {
	if result == nil {
		return false
	}
	v := reflect.ValueOf(result)
	if v.Kind() != reflect.Pointer || v.IsNil() || !v.Elem().IsZero() {
		return false
	}
	if len(body) > maxOnePassBytes {
		return false
	}
	defer func() {
		if recover() != nil {
			v.Elem().SetZero()
			decoded = false
		}
	}()
	env := envelope[any]{Result: result}
	err := segjson.Unmarshal(body, &env)
	if err == nil && env.OK != nil && *env.OK && env.Result == result && !v.Elem().IsZero() {
		return true
	}
	v.Elem().SetZero()
	return false
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

// parseInt reads a JSON number as an int64, accepting integral floats such
// as 5.0 or 1e3. It reports false for anything else.
func parseInt(n json.Number) (int64, bool) {
	if n == "" {
		return 0, false
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

// seconds converts a retry_after in seconds to a Duration, clamped to
// [0, maxRetryAfter].
func seconds(s int64) time.Duration {
	switch {
	case s <= 0:
		return 0
	case s >= int64(maxRetryAfter/time.Second):
		return maxRetryAfter
	default:
		return time.Duration(s) * time.Second
	}
}

// retryAfterHeader reads a Retry-After header (seconds form) on a 429 or 503.
func retryAfterHeader(status int, header http.Header) time.Duration {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return 0
	}
	s, err := strconv.ParseInt(strings.TrimSpace(header.Get("Retry-After")), 10, 64)
	if err != nil {
		return 0
	}
	return seconds(s)
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
