package botapi

import "net/http"

// ParseResponse exposes parseResponse to the black-box tests, with the given
// token scrubbed from error texts as the client does.
func ParseResponse(method string, status int, header http.Header, body []byte, result any, token string) error {
	return parseResponse(method, status, header, body, result, secret(token).redact)
}

// MaxResponseBytes exposes the body limit.
const MaxResponseBytes = maxResponseBytes
