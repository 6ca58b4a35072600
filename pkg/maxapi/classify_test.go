package maxapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/maxapi"
)

// apiErr parses a MAX error body as the client does.
func apiErr(t *testing.T, status int, body string, header http.Header) error {
	t.Helper()
	if header == nil {
		header = http.Header{}
	}
	err := maxapi.ParseResponse(maxapi.OpSendMessage, status, header, []byte(body), nil, testToken, time.Unix(1_700_000_000, 0))
	if err == nil {
		t.Fatalf("ParseResponse(%d, %s) = nil, want an error", status, body)
	}
	return err
}

func TestClassifyAnswers(t *testing.T) {
	t.Parallel()
	retry := http.Header{"Retry-After": {"7"}}
	for _, tt := range []struct {
		status       int
		body         string
		header       http.Header
		action       maxapi.Action
		reason       string
		unrecognised bool
		retryAfter   time.Duration
		maybe        bool
	}{
		{429, `{"code":"too.many.requests","message":"Too many requests"}`, retry, maxapi.ActionRetryAfter, maxapi.ReasonRateLimited, false, 7 * time.Second, false},
		{429, `{"code":"too.many.requests","message":"x"}`, nil, maxapi.ActionRetryAfter, maxapi.ReasonRateLimited, false, maxapi.DefaultRetryAfter, false},
		{429, `<html>slow down</html>`, retry, maxapi.ActionRetryAfter, maxapi.ReasonRateLimited, false, 7 * time.Second, false},
		{401, `{"code":"verify.token","message":"Invalid access_token"}`, nil, maxapi.ActionHalt, maxapi.ReasonUnauthorized, false, 0, false},
		{401, ``, nil, maxapi.ActionHalt, maxapi.ReasonUnauthorized, false, 0, false},
		{405, `{"code":"method.not.allowed","message":"x"}`, nil, maxapi.ActionHalt, maxapi.ReasonMethodNotAllowed, false, 0, false},
		{404, `<html><title>404 Not Found</title></html>`, nil, maxapi.ActionHalt, maxapi.ReasonEndpointNotFound, false, 0, false},
		{500, `{"code":"internal.error","message":"x"}`, nil, maxapi.ActionBackoff, maxapi.ReasonServer, false, 0, false},
		{503, `{"code":"service.unavailable","message":"x"}`, retry, maxapi.ActionBackoff, maxapi.ReasonServer, false, 0, false},
		{502, `<html><title>502 Bad Gateway</title></html>`, nil, maxapi.ActionBackoff, maxapi.ReasonServer, false, 0, true},
		{504, `{"code":"gateway.timeout","message":"x"}`, nil, maxapi.ActionBackoff, maxapi.ReasonServer, false, 0, true},
		{403, `{"code":"chat.denied","message":"error.dialog.suspended"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonBlocked, false, 0, false},
		{403, `{"code":"CHAT.DENIED","message":"Error.Dialog.Suspended"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonBlocked, false, 0, false},
		{403, `{"code":"chat.denied","message":"Forwarding messages from this chat or channel is prohibited"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonChatDenied, false, 0, false},
		{403, `{"code":"access.denied","message":"Access denied"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonForbidden, true, 0, false},
		{403, `<html><title>403 Forbidden</title></html>`, nil, maxapi.ActionBackoff, maxapi.ReasonBadResponse, false, 0, false},
		{404, `{"code":"dialog.not.found","message":"error.dialog.notfound"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonNotFound, false, 0, false},
		{404, `{"code":"chat.not.found","message":"x"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonNotFound, false, 0, false},
		{404, `{"code":"not.found","message":"error.user.notfound"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonNotFound, false, 0, false},
		{404, `{"code":"not.found","message":"Path is not found"}`, nil, maxapi.ActionRecipientDead, maxapi.ReasonNotFound, true, 0, false},
		{400, `{"code":"proto.payload","message":"text: size must be between 0 and 4000"}`, nil, maxapi.ActionRejected, maxapi.ReasonInvalidRequest, false, 0, false},
		{400, `{"code":"attachment.not.ready","message":""}`, nil, maxapi.ActionBackoff, maxapi.ReasonAttachmentNotReady, false, 0, false},
		{400, `{"code":"something.new","message":"x"}`, nil, maxapi.ActionRejected, maxapi.ReasonBadRequest, true, 0, false},
		{400, `{"message":"no code at all"}`, nil, maxapi.ActionRejected, maxapi.ReasonBadRequest, true, 0, false},
		{400, `{"code":"x","error":"only an error field"}`, nil, maxapi.ActionRejected, maxapi.ReasonBadRequest, true, 0, false},
		{409, `{"code":"conflict","message":"x"}`, nil, maxapi.ActionRejected, maxapi.ReasonClientError, true, 0, false},
		{413, `{"code":"too.large","message":"x"}`, nil, maxapi.ActionRejected, maxapi.ReasonClientError, true, 0, false},
		{418, `not json`, nil, maxapi.ActionBackoff, maxapi.ReasonBadResponse, false, 0, false},
	} {
		t.Run(fmt.Sprintf("%d %s", tt.status, tt.body), func(t *testing.T) {
			d := maxapi.Classify(apiErr(t, tt.status, tt.body, tt.header))
			if d.Action != tt.action || d.Reason != tt.reason || d.Unrecognised != tt.unrecognised || d.RetryAfter != tt.retryAfter ||
				d.MaybeDelivered != tt.maybe || d.Status != tt.status {
				t.Errorf("Classify = %+v, want %v (%s), unrecognised %v, retry after %v, maybe delivered %v",
					d, tt.action, tt.reason, tt.unrecognised, tt.retryAfter, tt.maybe)
			}
		})
	}
}

func TestClassifyOtherErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		err    error
		action maxapi.Action
		reason string
	}{
		{"nil", nil, maxapi.ActionDelivered, maxapi.ReasonDelivered},
		{"not sent", &maxapi.NotSentError{Op: maxapi.OpSendMessage, Err: errors.New("paused")}, maxapi.ActionNotSent, maxapi.ReasonNotSent},
		{"wrapped not sent", fmt.Errorf("x: %w", &maxapi.NotSentError{Err: errors.New("halted")}), maxapi.ActionNotSent, maxapi.ReasonNotSent},
		{"params", &maxapi.ParamsError{Field: "chat_id"}, maxapi.ActionRejected, maxapi.ReasonBadRequest},
		{"canceled network", &maxapi.NetworkError{Canceled: true, Err: context.Canceled}, maxapi.ActionCanceled, maxapi.ReasonCanceled},
		{"context", context.DeadlineExceeded, maxapi.ActionCanceled, maxapi.ReasonCanceled},
		{"anything", errors.New("boom"), maxapi.ActionBackoff, maxapi.ReasonUnknown},
		{"success without a message id", &maxapi.ResponseError{StatusCode: 200, MayHaveBeenDelivered: true}, maxapi.ActionBackoff, maxapi.ReasonBadResponse},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if d := maxapi.Classify(tt.err); d.Action != tt.action || d.Reason != tt.reason {
				t.Errorf("Classify(%v) = %v, want %v (%s)", tt.err, d, tt.action, tt.reason)
			}
		})
	}
}

func TestParseResponse(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	t.Run("success", func(t *testing.T) {
		var out struct {
			UserID int64 `json:"user_id"`
		}
		if err := maxapi.ParseResponse(maxapi.OpGetMe, 200, http.Header{}, []byte(`{"user_id":5}`), &out, testToken, now); err != nil || out.UserID != 5 {
			t.Errorf("got %v, %+v", err, out)
		}
	})
	for _, tt := range []struct {
		name    string
		status  int
		body    string
		problem string
		maybe   bool
	}{
		{"empty success", 200, ``, "empty body", true},
		{"undecodable success", 200, `[1,2]`, "undecodable", true},
		{"empty error", 500, ``, "empty body", false},
		{"HTML", 502, `<html><head><title>502 Bad Gateway</title></head></html>`, "not JSON", true},
		{"JSON without code or message", 400, `{"ok":false}`, "no code or message", false},
		{"JSON array", 400, `["x"]`, "not MAX's error body", false},
		{"oversized", 500, strings.Repeat(" ", maxapi.MaxResponseBytes+1), "larger than", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out struct {
				UserID int64 `json:"user_id"`
			}
			err := maxapi.ParseResponse(maxapi.OpGetMe, tt.status, http.Header{"Content-Type": {"text/html"}}, []byte(tt.body), &out, testToken, now)
			re, ok := errors.AsType[*maxapi.ResponseError](err)
			if !ok || !strings.Contains(re.Problem, tt.problem) || re.MayHaveBeenDelivered != tt.maybe || !errors.Is(err, maxapi.ErrBadResponse) {
				t.Errorf("got %#v, want a ResponseError %q (may have been delivered: %v)", err, tt.problem, tt.maybe)
			}
		})
	}
	t.Run("snippet is the HTML title", func(t *testing.T) {
		err := apiErr(t, 502, "<html><head><title>502 Bad Gateway</title></head><body>…</body></html>", nil)
		if re, _ := errors.AsType[*maxapi.ResponseError](err); re == nil || re.Snippet != "502 Bad Gateway" {
			t.Errorf("got %v, want the title as snippet", err)
		}
	})
	t.Run("token echoed by the server is scrubbed", func(t *testing.T) {
		err := apiErr(t, 401, `{"code":"verify.token","message":"Invalid access_token `+testToken+`"}`, nil)
		noToken(t, "the error", fmt.Sprintf("%v %+v", err, maxapi.Classify(err)))
		err = apiErr(t, 502, `<title>bad `+testToken+`</title>`, nil)
		noToken(t, "the response error", err.Error())
	})
	t.Run("Retry-After as an HTTP date", func(t *testing.T) {
		h := http.Header{"Retry-After": {now.Add(90 * time.Second).UTC().Format(http.TimeFormat)}}
		e, _ := errors.AsType[*maxapi.Error](apiErr(t, 429, `{"code":"too.many.requests","message":"x"}`, h))
		if e == nil || e.RetryAfter != 90*time.Second {
			t.Errorf("got %+v, want a retry after 90s", e)
		}
	})
	t.Run("Retry-After is capped", func(t *testing.T) {
		e, _ := errors.AsType[*maxapi.Error](apiErr(t, 429, `{"code":"x","message":"x"}`, http.Header{"Retry-After": {"99999999999"}}))
		if e == nil || e.RetryAfter != 7*24*time.Hour {
			t.Errorf("got %+v, want the cap", e)
		}
	})
}

func TestActionNames(t *testing.T) {
	t.Parallel()
	for a := maxapi.ActionDelivered; a <= maxapi.ActionNotSent; a++ {
		if s := a.String(); s == "" || strings.HasPrefix(s, "invalid") {
			t.Errorf("action %d has no name", a)
		}
	}
	if s := maxapi.Action(0).String(); s != "invalid(0)" {
		t.Errorf("the zero action is %q, want invalid(0)", s)
	}
}
