package jetstream

import (
	"errors"
	"net/url"
	"strings"
)

// redacted replaces a secret in URLs and messages.
const redacted = "xxxxx"

// RedactURL returns the comma-separated server URLs with their credentials
// replaced: a password by xxxxx, and a user name without password (which
// NATS reads as a token) by xxxxx. Text that does not parse as a URL is
// replaced whole, since it cannot be shown to be free of secrets.
func RedactURL(urls string) string {
	parts := splitURLs(urls)
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

func redactOne(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return redacted
	}
	if _, hasPassword := u.User.Password(); hasPassword {
		u.User = url.UserPassword(u.User.Username(), redacted)
	} else {
		u.User = url.User(redacted)
	}
	return u.String()
}

// splitURLs splits a comma-separated URL list, dropping empty entries.
func splitURLs(urls string) []string {
	var out []string
	for _, p := range strings.Split(urls, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// validateURL checks one server URL without echoing it: url.Parse errors
// quote the whole input, credentials included.
func validateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("a server URL does not parse (not shown: it may contain credentials)")
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return errors.New("a server URL has scheme " + quoteSafe(u.Scheme) + ", want nats, tls, ws or wss")
	}
	if u.Hostname() == "" {
		return errors.New("a server URL has no host")
	}
	return nil
}

func quoteSafe(s string) string {
	if len(s) > 16 {
		s = s[:16] + "…"
	}
	return `"` + s + `"`
}

// secretError carries a message from which secrets were removed while still
// matching the original error with errors.Is and errors.As.
type secretError struct {
	msg string
	err error
}

func (e *secretError) Error() string { return e.msg }
func (e *secretError) Unwrap() error { return e.err }

// scrub returns err with every non-empty secret in its message replaced.
func scrub(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	changed := false
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, redacted)
			changed = true
		}
	}
	if !changed {
		return err
	}
	return &secretError{msg: msg, err: err}
}
