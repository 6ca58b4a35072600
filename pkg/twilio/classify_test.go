package twilio_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/twilio"
)

// The classification of answers the emulator does not give, built by hand.
func TestClassify(t *testing.T) {
	tests := []struct {
		name         string
		err          error
		action       twilio.Action
		reason       string
		code         int
		maybe        bool
		unrecognised bool
		retryAfter   time.Duration
	}{
		{name: "nil", err: nil, action: twilio.ActionDelivered, reason: "delivered"},
		{name: "429 without a code", err: &twilio.Error{Status: 429}, action: twilio.ActionRetryAfter, reason: "rate_limited", code: 429, retryAfter: twilio.DefaultRetryAfter},
		{name: "429 with Retry-After", err: &twilio.Error{Status: 429, Code: 20429, RetryAfter: 7 * time.Second}, action: twilio.ActionRetryAfter, reason: "rate_limited", code: 20429, retryAfter: 7 * time.Second},
		{name: "20003 whatever the status", err: &twilio.Error{Status: 403, Code: 20003}, action: twilio.ActionHalt, reason: "unauthorized", code: 20003},
		{name: "401 without a code", err: &twilio.Error{Status: 401}, action: twilio.ActionHalt, reason: "unauthorized", code: 401},
		{name: "404", err: &twilio.Error{Status: 404, Code: 20404}, action: twilio.ActionHalt, reason: "not_found", code: 20404},
		{name: "landline", err: &twilio.Error{Status: 400, Code: 21635}, action: twilio.ActionRecipientDead, reason: "not_mobile", code: 21635},
		{name: "body required", err: &twilio.Error{Status: 400, Code: 21602}, action: twilio.ActionRejected, reason: "content", code: 21602},
		{name: "body too long", err: &twilio.Error{Status: 400, Code: 21617}, action: twilio.ActionRejected, reason: "content", code: 21617},
		{name: "invalid From", err: &twilio.Error{Status: 400, Code: 21212}, action: twilio.ActionRejected, reason: "sender", code: 21212},
		{name: "From required", err: &twilio.Error{Status: 400, Code: 21603}, action: twilio.ActionRejected, reason: "sender", code: 21603},
		{name: "unknown 400", err: &twilio.Error{Status: 400, Code: 21999}, action: twilio.ActionRejected, reason: "bad_request", code: 21999, unrecognised: true},
		{name: "unknown 409", err: &twilio.Error{Status: 409, Code: 20409}, action: twilio.ActionRejected, reason: "bad_request", code: 20409, unrecognised: true},
		{name: "unknown 403", err: &twilio.Error{Status: 403, Code: 20403}, action: twilio.ActionRecipientDead, reason: "forbidden", code: 20403, unrecognised: true},
		{name: "500", err: &twilio.Error{Status: 500, Code: 20500}, action: twilio.ActionBackoff, reason: "server", code: 20500},
		{name: "502 JSON", err: &twilio.Error{Status: 502}, action: twilio.ActionBackoff, reason: "server", code: 502, maybe: true},
		{name: "504 JSON", err: &twilio.Error{Status: 504, Code: 20504}, action: twilio.ActionBackoff, reason: "server", code: 20504, maybe: true},
		{name: "page 401", err: &twilio.ResponseError{StatusCode: 401}, action: twilio.ActionHalt, reason: "unauthorized", code: 401},
		{name: "page 404", err: &twilio.ResponseError{StatusCode: 404}, action: twilio.ActionHalt, reason: "not_found", code: 404},
		{name: "page 429", err: &twilio.ResponseError{StatusCode: 429}, action: twilio.ActionRetryAfter, reason: "rate_limited", code: 429, retryAfter: twilio.DefaultRetryAfter},
		{name: "page 503", err: &twilio.ResponseError{StatusCode: 503}, action: twilio.ActionBackoff, reason: "server", code: 503},
		{name: "page 403 from a proxy", err: &twilio.ResponseError{StatusCode: 403}, action: twilio.ActionBackoff, reason: "bad_response", code: 403},
		{name: "unreadable 201", err: &twilio.ResponseError{StatusCode: 201, MayHaveBeenDelivered: true}, action: twilio.ActionBackoff, reason: "bad_response", code: 201, maybe: true},
		{name: "network before writing", err: &twilio.NetworkError{}, action: twilio.ActionBackoff, reason: "network"},
		{name: "timeout after writing", err: &twilio.NetworkError{Timeout: true, MayHaveBeenDelivered: true}, action: twilio.ActionBackoff, reason: "timeout", maybe: true},
		{name: "canceled after writing", err: &twilio.NetworkError{Canceled: true, MayHaveBeenDelivered: true}, action: twilio.ActionCanceled, reason: "canceled", maybe: true},
		{name: "not sent", err: &twilio.NotSentError{Err: errors.New("paused")}, action: twilio.ActionNotSent, reason: "not_sent"},
		{name: "wrapped", err: fmt.Errorf("sending: %w", &twilio.Error{Status: 400, Code: 21610}), action: twilio.ActionRecipientDead, reason: "unsubscribed", code: 21610},
		{name: "deadline", err: context.DeadlineExceeded, action: twilio.ActionCanceled, reason: "canceled"},
		{name: "foreign", err: errors.New("boom"), action: twilio.ActionBackoff, reason: "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := twilio.Classify(tt.err)
			if d.Action != tt.action || d.Reason != tt.reason || d.Code != tt.code || d.MaybeDelivered != tt.maybe ||
				d.Unrecognised != tt.unrecognised || d.RetryAfter != tt.retryAfter {
				t.Errorf("Classify(%v) = %+v, want %s %s code %d maybe %v unrecognised %v retry %s",
					tt.err, d, tt.action, tt.reason, tt.code, tt.maybe, tt.unrecognised, tt.retryAfter)
			}
		})
	}
}

func TestSentinels(t *testing.T) {
	unsubscribed := &twilio.Error{Status: 400, Code: 21610}
	for _, s := range []error{twilio.ErrUnsubscribed, twilio.ErrRecipient} {
		if !errors.Is(unsubscribed, s) {
			t.Errorf("21610 does not match %v", s)
		}
	}
	for _, s := range []error{twilio.ErrInvalidNumber, twilio.ErrRateLimited, twilio.ErrServer, twilio.ErrMaybeDelivered, twilio.ErrBadRequestUnknown} {
		if errors.Is(unsubscribed, s) {
			t.Errorf("21610 matches %v", s)
		}
	}
	if e := (&twilio.Error{Status: 502}); !errors.Is(e, twilio.ErrMaybeDelivered) || !errors.Is(e, twilio.ErrServer) {
		t.Errorf("502 should match ErrServer and ErrMaybeDelivered")
	}
	if e := (&twilio.Error{Status: 400, Code: 21999}); e.Known() {
		t.Errorf("an unknown 400 is Known")
	}
	if e := (&twilio.Error{Status: 503, Code: 20503}); !e.Known() {
		t.Errorf("a 503 is not Known")
	}
	if got := (&twilio.Error{Op: "send", Status: 400, Code: 21610, Message: "Attempt to send to unsubscribed recipient"}).Error(); got != "twilio: send: 400 code 21610: Attempt to send to unsubscribed recipient" {
		t.Errorf("Error() = %q", got)
	}
}

func TestActionAndDecisionStrings(t *testing.T) {
	if got := twilio.ActionRecipientDead.String(); got != "recipient_dead" {
		t.Errorf("ActionRecipientDead = %q", got)
	}
	if got := twilio.Action(0).String(); got != "invalid(0)" {
		t.Errorf("Action(0) = %q", got)
	}
	d := twilio.Decision{Action: twilio.ActionRetryAfter, Reason: "rate_limited", Code: 20429, RetryAfter: time.Second}
	if got := d.String(); got != "retry_after (rate_limited, code 20429, retry after 1s)" {
		t.Errorf("Decision.String() = %q", got)
	}
}

// Answers that are not Twilio's, from a server standing in for a proxy.
func TestOddAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		ctype    string
		body     string
		sentinel error
		reason   string
		check    func(t *testing.T, m *twilio.Message)
	}{
		{name: "numbers as numbers, nulls", status: 201, ctype: "application/json",
			body: `{"sid":"SM00000000000000000000000000000001","status":"queued","num_segments":2,"error_code":null,"error_message":null,"date_created":null}`,
			check: func(t *testing.T, m *twilio.Message) {
				if m.NumSegments != 2 || !m.DateCreated.IsZero() {
					t.Errorf("got %+v", m)
				}
			}},
		{name: "created without a sid", status: 201, ctype: "application/json", body: `{"status":"queued"}`, sentinel: twilio.ErrMaybeDelivered, reason: "bad_response"},
		{name: "created, not JSON", status: 201, ctype: "text/plain", body: `OK`, sentinel: twilio.ErrMaybeDelivered, reason: "bad_response"},
		{name: "proxy 403 page", status: 403, ctype: "text/html", body: `<html><title>403 Forbidden ` + testTo + `</title></html>`, sentinel: twilio.ErrBadResponse, reason: "bad_response"},
		{name: "empty 400", status: 400, ctype: "application/json", body: ``, sentinel: twilio.ErrBadResponse, reason: "bad_response"},
		{name: "JSON without code or message", status: 400, ctype: "application/json", body: `{"error":"x"}`, sentinel: twilio.ErrBadResponse, reason: "bad_response"},
		{name: "error code as a string", status: 400, ctype: "application/json", body: `{"code":"21610","message":"Attempt to send to unsubscribed recipient","status":400}`, sentinel: twilio.ErrUnsubscribed, reason: "unsubscribed"},
		{name: "huge body", status: 400, ctype: "application/json", body: `{"message":"` + strings.Repeat("x", 1<<20) + `"}`, sentinel: twilio.ErrBadResponse, reason: "bad_response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			c, err := twilio.New(testSID, testToken, twilio.WithBaseURL(srv.URL), twilio.WithFrom(testFrom))
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseIdleConnections()
			m, err := c.Send(context.Background(), testTo, "hi")
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("Send: %v", err)
				}
				tt.check(t, m)
				return
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v does not match %v", err, tt.sentinel)
			}
			if d := twilio.Classify(err); d.Reason != tt.reason {
				t.Errorf("Classify = %+v, want reason %s", d, tt.reason)
			}
			assertClean(t, "the error", err.Error())
		})
	}
}
