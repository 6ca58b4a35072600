package jetstream

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// PermissionError is an operation the NATS server refused because the
// user's permissions (nats-server.conf's permissions block, or the user
// JWT's) do not allow it. The server reports the refusal asynchronously
// (-ERR 'Permissions Violation for Publish to "SUBJECT"'); the operation
// itself, a JetStream publish or API request, only times out. [Denied]
// joins the two.
type PermissionError struct {
	// Op is "publish" or "subscribe".
	Op string
	// Subject is the subject refused.
	Subject string
	// Err is the operation's own error.
	Err error
}

// Error names the operation, the subject and the operation's error.
func (e *PermissionError) Error() string {
	return fmt.Sprintf("the NATS server does not allow this user to %s to %q (permissions violation: see the user's permissions, docs/RUNBOOK.md#permissions): %v",
		e.Op, e.Subject, e.Err)
}

// Unwrap returns the operation's own error.
func (e *PermissionError) Unwrap() error { return e.Err }

// Is matches nats.ErrPermissionViolation.
func (e *PermissionError) Is(target error) bool { return target == nats.ErrPermissionViolation }

// violation is a permissions violation the server reported.
type violation struct{ op, subject string }

// violationRE matches the server's message as nats.go passes it on.
var violationRE = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]+)"`)

// parseViolation extracts the operation and the subject of a permissions
// violation reported by the server.
func parseViolation(err error) (violation, bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return violation{}, false
	}
	m := violationRE.FindStringSubmatch(err.Error())
	if m == nil {
		return violation{}, false
	}
	op := "publish"
	if strings.EqualFold(m[1], "subscription") {
		op = "subscribe"
	}
	return violation{op: op, subject: m[2]}, true
}

// Denied explains err, the error of an operation on nc, as a
// *[PermissionError] when it is a timeout and the last error the server
// reported on nc is a permissions violation: a request whose subject the
// user may not publish to is dropped by the server, and the requester only
// sees the timeout. Otherwise it returns err unchanged. The violation is
// the connection's last one, so an unrelated timeout after an old violation
// is explained by it too; the message says which subject was refused.
func Denied(nc *nats.Conn, err error) error {
	if err == nil || nc == nil {
		return err
	}
	var pe *PermissionError
	if errors.As(err, &pe) || !timedOut(err) {
		return err
	}
	v, ok := parseViolation(nc.LastError())
	if !ok {
		return err
	}
	return &PermissionError{Op: v.op, Subject: v.subject, Err: err}
}

// timedOut reports whether err is a request that got no answer in time.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, natsjs.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, natsjs.ErrNoStreamResponse)
}
