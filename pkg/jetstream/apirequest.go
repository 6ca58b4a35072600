package jetstream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Requester is what a JetStream API request needs of a connection
// (*nats.Conn).
type Requester interface {
	RequestWithContext(ctx context.Context, subject string, data []byte) (*nats.Msg, error)
}

// APIError is a JetStream API request that failed, or that the server
// refused.
type APIError struct {
	// Subject is the API subject asked ($JS.API.…).
	Subject string
	// Code is the server's error code (err_code, e.g. 10008: no meta
	// leader); 0 when the request itself failed or the answer was not
	// understood.
	Code int
	// Err is the request's error, or the server's refusal.
	Err error
}

// Error names the subject and the failure.
func (e *APIError) Error() string { return e.Subject + ": " + e.Err.Error() }

// Unwrap returns the failure.
func (e *APIError) Unwrap() error { return e.Err }

// APIRequest sends a JetStream API request on subject with data (nil for
// none), within ctx, and decodes a successful answer into v (unless v is
// nil). A failed request, an answer that is not JSON and the server's
// refusal ({"error": …}) are each an *[APIError].
func APIRequest(ctx context.Context, nc Requester, subject string, data []byte, v any) error {
	m, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return &APIError{Subject: subject, Err: err}
	}
	var e struct {
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &e); err != nil {
		return &APIError{Subject: subject, Err: fmt.Errorf("decoding the answer: %w", err)}
	}
	if e.Error != nil {
		return &APIError{Subject: subject, Code: e.Error.ErrCode, Err: fmt.Errorf("%s (%d)", e.Error.Description, e.Error.ErrCode)}
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return &APIError{Subject: subject, Err: fmt.Errorf("decoding the answer: %w", err)}
	}
	return nil
}
