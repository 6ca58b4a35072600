package botapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
)

const nginx502 = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n"

// TestClassifyRecordedResponses classifies the envelopes Telegram actually
// sends (and the pages proxies send), byte for byte.
func TestClassifyRecordedResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		action     botapi.Action
		reason     string
		retryAfter time.Duration
		migrateTo  int64
		maybe      bool
		is         []error // sentinels the error must match
		isNot      []error // sentinels it must not match
	}{
		{
			name:   "delivered",
			status: 200,
			body:   `{"ok":true,"result":{"message_id":7,"from":{"id":123456789,"is_bot":true,"first_name":"Shop","username":"shop_bot"},"chat":{"id":42,"first_name":"Ann","type":"private"},"date":1717000000,"text":"Your order shipped"}}`,
			action: botapi.ActionDelivered, reason: botapi.ReasonDelivered,
		},
		{
			name:   "429 with retry_after",
			status: 429,
			body:   `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 9","parameters":{"retry_after":9}}`,
			action: botapi.ActionRetryAfter, reason: botapi.ReasonRateLimited, retryAfter: 9 * time.Second,
			is: []error{botapi.ErrRateLimited}, isNot: []error{botapi.ErrServer, botapi.ErrBlocked, botapi.ErrMaybeDelivered},
		},
		{
			name:   "429 retry after only in the description",
			status: 429,
			body:   `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 35"}`,
			action: botapi.ActionRetryAfter, reason: botapi.ReasonRateLimited, retryAfter: 35 * time.Second,
			is: []error{botapi.ErrRateLimited},
		},
		{
			name:   "429 without any wait",
			status: 429,
			body:   `{"ok":false,"error_code":429,"description":"Too Many Requests"}`,
			action: botapi.ActionRetryAfter, reason: botapi.ReasonRateLimited, retryAfter: botapi.DefaultRetryAfter,
		},
		{
			name:   "429 with absurd retry_after is clamped",
			status: 429,
			body:   `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 99999999999999999999","parameters":{"retry_after":99999999999999}}`,
			action: botapi.ActionRetryAfter, reason: botapi.ReasonRateLimited, retryAfter: 7 * 24 * time.Hour,
		},
		{
			name:   "blocked by the user",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}`,
			action: botapi.ActionDead, reason: botapi.ReasonBlocked,
			is: []error{botapi.ErrBlocked, botapi.ErrBlockedByUser}, isNot: []error{botapi.ErrUserDeactivated, botapi.ErrForbiddenUnknown, botapi.ErrContent},
		},
		{
			name:   "user is deactivated",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: user is deactivated"}`,
			action: botapi.ActionDead, reason: botapi.ReasonDeactivated,
			is: []error{botapi.ErrBlocked, botapi.ErrUserDeactivated}, isNot: []error{botapi.ErrBlockedByUser},
		},
		{
			name:   "kicked from the group chat",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot was kicked from the group chat"}`,
			action: botapi.ActionDead, reason: botapi.ReasonKicked,
			is: []error{botapi.ErrBlocked, botapi.ErrKicked},
		},
		{
			name:   "kicked from the supergroup chat",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot was kicked from the supergroup chat"}`,
			action: botapi.ActionDead, reason: botapi.ReasonKicked,
			is: []error{botapi.ErrKicked},
		},
		{
			name:   "not a member of the channel chat",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot is not a member of the channel chat"}`,
			action: botapi.ActionDead, reason: botapi.ReasonNotMember,
			is: []error{botapi.ErrBlocked, botapi.ErrNotMember},
		},
		{
			name:   "not a member of the supergroup chat",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot is not a member of the supergroup chat"}`,
			action: botapi.ActionDead, reason: botapi.ReasonNotMember,
		},
		{
			name:   "can't initiate conversation",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot can't initiate conversation with a user"}`,
			action: botapi.ActionDead, reason: botapi.ReasonCantInitiate,
			is: []error{botapi.ErrBlocked, botapi.ErrCantInitiate},
		},
		{
			name:   "can't send messages to bots",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot can't send messages to bots"}`,
			action: botapi.ActionDead, reason: botapi.ReasonBots,
			is: []error{botapi.ErrBlocked, botapi.ErrRecipientIsBot},
		},
		{
			name:   "can't send messages to the user",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: bot can't send messages to the user"}`,
			action: botapi.ActionDead, reason: botapi.ReasonCantSend,
			is: []error{botapi.ErrCantSendToUser}, isNot: []error{botapi.ErrBlocked, botapi.ErrForbiddenUnknown},
		},
		{
			name:   "group chat deleted",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: the group chat was deleted"}`,
			action: botapi.ActionDead, reason: botapi.ReasonChatDeleted,
			is: []error{botapi.ErrChatDeleted},
		},
		{
			name:   "user not found",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: user not found"}`,
			action: botapi.ActionDead, reason: botapi.ReasonUserNotFound,
			is: []error{botapi.ErrUserNotFound}, isNot: []error{botapi.ErrBadRequestUnknown},
		},
		{
			name:   "topic closed",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: TOPIC_CLOSED"}`,
			action: botapi.ActionDead, reason: botapi.ReasonTopicClosed,
			is: []error{botapi.ErrTopicClosed},
		},
		{
			name:   "message thread not found",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: message thread not found"}`,
			action: botapi.ActionDead, reason: botapi.ReasonThreadNotFound,
			is: []error{botapi.ErrThreadNotFound}, isNot: []error{botapi.ErrChatNotFound, botapi.ErrBadRequestUnknown},
		},
		{
			name:   "caption too long",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: message caption is too long"}`,
			action: botapi.ActionDead, reason: botapi.ReasonContent,
			is: []error{botapi.ErrContent, botapi.ErrCaptionTooLong}, isNot: []error{botapi.ErrMessageTooLong},
		},
		{
			name:   "photo URL Telegram cannot use",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: wrong file identifier/HTTP URL specified"}`,
			action: botapi.ActionDead, reason: botapi.ReasonPhoto,
			is: []error{botapi.ErrPhoto},
		},
		{
			name:   "photo URL Telegram could not fetch",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: failed to get HTTP URL content"}`,
			action: botapi.ActionDead, reason: botapi.ReasonPhoto,
			is: []error{botapi.ErrPhoto},
		},
		{
			name:   "too many buttons",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: reply markup is too long"}`,
			action: botapi.ActionDead, reason: botapi.ReasonMarkup,
			is: []error{botapi.ErrMarkup},
		},
		{
			name:   "button URL refused",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: inline keyboard button URL 'ftp://x' is invalid: Unsupported URL protocol"}`,
			action: botapi.ActionDead, reason: botapi.ReasonMarkup,
			is: []error{botapi.ErrMarkup}, isNot: []error{botapi.ErrContent},
		},
		{
			name:   "unknown 403 is a dead chat, counted apart",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: something new"}`,
			action: botapi.ActionDead, reason: botapi.ReasonForbiddenUnknown,
			is: []error{botapi.ErrForbiddenUnknown}, isNot: []error{botapi.ErrBlocked, botapi.ErrRecipientIsBot},
		},
		{
			name:   "description case differs",
			status: 403,
			body:   `{"ok":false,"error_code":403,"description":"Forbidden: Bot was blocked by the user"}`,
			action: botapi.ActionDead, reason: botapi.ReasonBlocked,
		},
		{
			name:   "chat not found",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}`,
			action: botapi.ActionDead, reason: botapi.ReasonChatNotFound,
			is: []error{botapi.ErrChatNotFound}, isNot: []error{botapi.ErrBlocked},
		},
		{
			name:   "group migrated to a supergroup",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: group chat was upgraded to a supergroup chat","parameters":{"migrate_to_chat_id":-1001234567890}}`,
			action: botapi.ActionMigrate, reason: botapi.ReasonMigrated, migrateTo: -1001234567890,
			is: []error{botapi.ErrMigrated}, isNot: []error{botapi.ErrBadRequestUnknown},
		},
		{
			name:   "migration wording without the parameter is not a migration",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: group chat was migrated to a supergroup chat"}`,
			action: botapi.ActionDead, reason: botapi.ReasonBadRequest,
			isNot: []error{botapi.ErrMigrated},
		},
		{
			name:   "migrate id at 52 bits",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: group chat was upgraded to a supergroup chat","parameters":{"migrate_to_chat_id":-4503599627370495}}`,
			action: botapi.ActionMigrate, reason: botapi.ReasonMigrated, migrateTo: -4503599627370495,
		},
		{
			name:   "message is too long",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: message is too long"}`,
			action: botapi.ActionDead, reason: botapi.ReasonContent,
			is: []error{botapi.ErrContent, botapi.ErrMessageTooLong}, isNot: []error{botapi.ErrMessageEmpty},
		},
		{
			name:   "message text is empty",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: message text is empty"}`,
			action: botapi.ActionDead, reason: botapi.ReasonContent,
			is: []error{botapi.ErrContent, botapi.ErrMessageEmpty},
		},
		{
			name:   "can't parse entities",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: can't parse entities: Unsupported start tag \"foo\" at byte offset 6"}`,
			action: botapi.ActionDead, reason: botapi.ReasonContent,
			is: []error{botapi.ErrContent, botapi.ErrCantParseEntities},
		},
		{
			name:   "have no rights to send a message",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: have no rights to send a message"}`,
			action: botapi.ActionDead, reason: botapi.ReasonNoRights,
			is: []error{botapi.ErrNoRights},
		},
		{
			name:   "CHAT_WRITE_FORBIDDEN",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: CHAT_WRITE_FORBIDDEN"}`,
			action: botapi.ActionDead, reason: botapi.ReasonNoRights,
			is: []error{botapi.ErrNoRights},
		},
		{
			name:   "not enough rights",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: not enough rights to send text messages to the chat"}`,
			action: botapi.ActionDead, reason: botapi.ReasonNoRights,
		},
		{
			name:   "unknown 400 is a permanent failure of the message",
			status: 400,
			body:   `{"ok":false,"error_code":400,"description":"Bad Request: SOMETHING_NEW_INVALID"}`,
			action: botapi.ActionDead, reason: botapi.ReasonBadRequest,
			is: []error{botapi.ErrBadRequestUnknown}, isNot: []error{botapi.ErrContent},
		},
		{
			name:   "unauthorized",
			status: 401,
			body:   `{"ok":false,"error_code":401,"description":"Unauthorized"}`,
			action: botapi.ActionHalt, reason: botapi.ReasonUnauthorized,
			is: []error{botapi.ErrUnauthorized},
		},
		{
			name:   "method not found",
			status: 404,
			body:   `{"ok":false,"error_code":404,"description":"Not Found"}`,
			action: botapi.ActionHalt, reason: botapi.ReasonMethodNotFound,
			is: []error{botapi.ErrMethodNotFound},
		},
		{
			name:   "conflict is not a sending error",
			status: 409,
			body:   `{"ok":false,"error_code":409,"description":"Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}`,
			action: botapi.ActionBackoff, reason: botapi.ReasonUnknown,
		},
		{
			name:   "JSON 500",
			status: 500,
			body:   `{"ok":false,"error_code":500,"description":"Internal Server Error"}`,
			action: botapi.ActionBackoff, reason: botapi.ReasonServer,
			is: []error{botapi.ErrServer}, isNot: []error{botapi.ErrMaybeDelivered, botapi.ErrBadResponse},
		},
		{
			name:   "JSON 502",
			status: 502,
			body:   `{"ok":false,"error_code":502,"description":"Bad Gateway"}`,
			action: botapi.ActionBackoff, reason: botapi.ReasonServer, maybe: true,
			is: []error{botapi.ErrServer, botapi.ErrMaybeDelivered},
		},
		{
			name:   "nginx 502 page",
			status: 502,
			header: http.Header{"Content-Type": {"text/html"}},
			body:   nginx502,
			action: botapi.ActionBackoff, reason: botapi.ReasonServer, maybe: true,
			is: []error{botapi.ErrServer, botapi.ErrBadResponse, botapi.ErrMaybeDelivered},
		},
		{
			name:   "503 page with Retry-After",
			status: 503,
			header: http.Header{"Content-Type": {"text/html"}, "Retry-After": {"30"}},
			body:   "<html><head><title>503 Service Temporarily Unavailable</title></head></html>",
			action: botapi.ActionBackoff, reason: botapi.ReasonServer,
			is: []error{botapi.ErrServer}, isNot: []error{botapi.ErrMaybeDelivered},
		},
		{
			name:   "429 page with Retry-After",
			status: 429,
			header: http.Header{"Content-Type": {"text/html"}, "Retry-After": {"12"}},
			body:   "<html><head><title>429 Too Many Requests</title></head></html>",
			action: botapi.ActionRetryAfter, reason: botapi.ReasonRateLimited, retryAfter: 12 * time.Second,
			is: []error{botapi.ErrRateLimited, botapi.ErrBadResponse},
		},
		{
			name:   "401 page",
			status: 401,
			header: http.Header{"Content-Type": {"text/html"}},
			body:   "<html><head><title>401 Authorization Required</title></head></html>",
			action: botapi.ActionHalt, reason: botapi.ReasonUnauthorized,
			is: []error{botapi.ErrUnauthorized},
		},
		{
			name:   "200 empty body",
			status: 200,
			body:   "",
			action: botapi.ActionBackoff, reason: botapi.ReasonBadResponse, maybe: true,
			is: []error{botapi.ErrBadResponse, botapi.ErrMaybeDelivered},
		},
		{
			name:   "200 truncated JSON",
			status: 200,
			body:   `{"ok":true,"result":{"message_id":`,
			action: botapi.ActionBackoff, reason: botapi.ReasonBadResponse, maybe: true,
		},
		{
			name:   "200 ok without result",
			status: 200,
			body:   `{"ok":true}`,
			action: botapi.ActionBackoff, reason: botapi.ReasonBadResponse, maybe: true,
		},
		{
			name:   "200 ok with a result of the wrong type",
			status: 200,
			body:   `{"ok":true,"result":"sent"}`,
			action: botapi.ActionBackoff, reason: botapi.ReasonBadResponse, maybe: true,
		},
		{
			name:   "JSON that is not an envelope",
			status: 200,
			body:   `{"message":"hello from a proxy"}`,
			action: botapi.ActionBackoff, reason: botapi.ReasonBadResponse, maybe: true,
		},
		{
			name:   "error envelope without error_code uses the HTTP status",
			status: 403,
			body:   `{"ok":false,"description":"Forbidden: bot was blocked by the user"}`,
			action: botapi.ActionDead, reason: botapi.ReasonBlocked,
		},
		{
			name:   "huge numbers",
			status: 400,
			body:   `{"ok":false,"error_code":1e400,"description":"Bad Request: chat not found","parameters":{"migrate_to_chat_id":-99999999999999999999999,"retry_after":1e999}}`,
			action: botapi.ActionDead, reason: botapi.ReasonChatNotFound,
		},
		{
			name:   "body over the limit",
			status: 200,
			body:   `{"ok":true,"result":"` + strings.Repeat("x", botapi.MaxResponseBytes) + `"}`,
			action: botapi.ActionBackoff, reason: botapi.ReasonBadResponse, maybe: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			header := tt.header
			if header == nil {
				header = http.Header{"Content-Type": {"application/json"}}
			}
			var msg botapi.Message
			err := botapi.ParseResponse("sendMessage", tt.status, header, []byte(tt.body), &msg, "123:token")
			d := botapi.Classify(err)
			if d.Action != tt.action || d.Reason != tt.reason {
				t.Fatalf("Classify(%v) = %v, want %v (%s)", err, d, tt.action, tt.reason)
			}
			if d.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", d.RetryAfter, tt.retryAfter)
			}
			if d.MigrateTo != tt.migrateTo {
				t.Errorf("MigrateTo = %d, want %d", d.MigrateTo, tt.migrateTo)
			}
			if d.MaybeDelivered != tt.maybe {
				t.Errorf("MaybeDelivered = %v, want %v", d.MaybeDelivered, tt.maybe)
			}
			for _, s := range tt.is {
				if !errors.Is(err, s) {
					t.Errorf("errors.Is(%v, %v) = false, want true", err, s)
				}
			}
			for _, s := range tt.isNot {
				if errors.Is(err, s) {
					t.Errorf("errors.Is(%v, %v) = true, want false", err, s)
				}
			}
			if err == nil && msg.MessageID != 7 {
				t.Errorf("MessageID = %d, want 7", msg.MessageID)
			}
			if err != nil && d.Code == 0 {
				t.Errorf("Decision.Code = 0, want the status")
			}
		})
	}
}

func TestClassifyOtherErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		action botapi.Action
		reason string
		maybe  bool
	}{
		{"nil", nil, botapi.ActionDelivered, botapi.ReasonDelivered, false},
		{"dial failure", &botapi.NetworkError{Method: "sendMessage", Err: errors.New("connection refused")}, botapi.ActionBackoff, botapi.ReasonNetwork, false},
		{"reset after writing", &botapi.NetworkError{Method: "sendMessage", MayHaveBeenDelivered: true, Err: errors.New("connection reset by peer")}, botapi.ActionBackoff, botapi.ReasonNetwork, true},
		{"timeout", &botapi.NetworkError{Method: "sendMessage", Timeout: true, MayHaveBeenDelivered: true, Err: context.DeadlineExceeded}, botapi.ActionBackoff, botapi.ReasonTimeout, true},
		{"caller canceled", &botapi.NetworkError{Method: "sendMessage", Canceled: true, Err: context.Canceled}, botapi.ActionCanceled, botapi.ReasonCanceled, false},
		{"wrapped API error", fmt.Errorf("delivering: %w", &botapi.Error{Method: "sendMessage", Code: 403, Description: "Forbidden: user is deactivated"}), botapi.ActionDead, botapi.ReasonDeactivated, false},
		{"bare context error", fmt.Errorf("worker: %w", context.Canceled), botapi.ActionCanceled, botapi.ReasonCanceled, false},
		{"unknown error", errors.New("something else"), botapi.ActionBackoff, botapi.ReasonUnknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := botapi.Classify(tt.err)
			if d.Action != tt.action || d.Reason != tt.reason || d.MaybeDelivered != tt.maybe {
				t.Errorf("Classify(%v) = %v, want %v (%s), maybe delivered %v", tt.err, d, tt.action, tt.reason, tt.maybe)
			}
		})
	}
}

func TestDecisionChatDead(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    botapi.Decision
		want bool
	}{
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonBlocked}, true},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonChatNotFound}, true},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonContent}, false},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonForbiddenUnknown}, true},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonBadRequest}, false},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonTopicClosed}, false},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonThreadNotFound}, false},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonPhoto}, false},
		{botapi.Decision{Action: botapi.ActionDead, Reason: botapi.ReasonMarkup}, false},
		{botapi.Decision{Action: botapi.ActionBackoff, Reason: botapi.ReasonServer}, false},
	} {
		if got := tt.d.ChatDead(); got != tt.want {
			t.Errorf("%v.ChatDead() = %v, want %v", tt.d, got, tt.want)
		}
	}
}

func TestActionString(t *testing.T) {
	t.Parallel()
	if got, want := botapi.ActionRetryAfter.String(), "retry_after"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := botapi.Action(0).String(), "invalid(0)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
