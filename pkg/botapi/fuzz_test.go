package botapi_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/botapi"
)

const fuzzToken = "987654:FUZZ_secret-token"

// FuzzParseResponse feeds arbitrary status codes and bodies to the response
// parser. Whatever the input, it must not panic, must return either a result
// or one of the package's typed errors, must classify to a valid action, and
// must never echo the token.
func FuzzParseResponse(f *testing.F) {
	f.Add(200, []byte(`{"ok":true,"result":{"message_id":1,"chat":{"id":1,"type":"private"},"date":1,"text":"x"}}`))
	f.Add(403, []byte(`{"ok":false,"error_code":403,"description":"Forbidden: `+fuzzToken+`"}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		var msg botapi.Message
		header := http.Header{"Content-Type": {"application/json"}}
		err := botapi.ParseResponse("sendMessage", status, header, body, &msg, fuzzToken)
		d := botapi.Classify(err)
		if strings.HasPrefix(d.Action.String(), "invalid") {
			t.Fatalf("Classify(%v) = invalid action %v", err, d.Action)
		}
		if err == nil {
			if d.Action != botapi.ActionDelivered {
				t.Fatalf("nil error classified as %v", d)
			}
			return
		}
		var apiErr *botapi.Error
		var respErr *botapi.ResponseError
		if !errors.As(err, &apiErr) && !errors.As(err, &respErr) {
			t.Fatalf("error %T is neither *Error nor *ResponseError: %v", err, err)
		}
		if strings.Contains(err.Error(), fuzzToken) || strings.Contains(d.Description, fuzzToken) {
			t.Fatalf("token leaked: %q", err.Error())
		}
		if d.RetryAfter < 0 {
			t.Fatalf("negative RetryAfter %v", d.RetryAfter)
		}
	})
}
