package maxapi

import (
	"net/http"
	"time"
)

// ParseResponse exposes parseResponse to the black-box tests, with the given
// token scrubbed from error texts as the client does.
func ParseResponse(op string, status int, header http.Header, body []byte, result any, token string, now time.Time) error {
	return parseResponse(op, status, header, body, result, secret(token).redact, now)
}

// MaxResponseBytes exposes the body limit.
const MaxResponseBytes = maxResponseBytes
