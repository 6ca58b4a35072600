package botapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// sentAnswer is an answer to sendMessage as the Bot API gives it.
const sentAnswer = `{"ok":true,"result":{"message_id":4711,"from":{"id":987654,"is_bot":true,"first_name":"Shop","username":"shop_bot"},"chat":{"id":123456789,"first_name":"Ann","username":"ann","type":"private"},"date":1765000000,"text":"Your order 1042 was accepted: 2 items, 1 990 \u20bd. We will tell you when it ships."}}`

// onePassBodies are answers the single pass must judge as the general path
// does: every kind it accepts, and every kind it must hand over.
var onePassBodies = []string{
	sentAnswer,
	`{"ok":true,"result":{"message_id":1,"chat":{"id":1,"type":"private"},"date":1,"photo":[{"file_id":"a","file_unique_id":"b","width":90,"height":90}]}}`,
	`{"result":{"message_id":1},"ok":true}`,
	`{"OK":true,"Result":{"MESSAGE_ID":2}}`,
	`{"ok":true,"result":{}}`,
	`{"ok":true,"result":null}`,
	`{"ok":true}`,
	`{"ok":true,"result":true}`,
	`{"ok":true,"result":{"message_id":"1"}}`,
	`{"ok":true,"result":{"message_id":1,"date":"x"}}`,
	`{"ok":"true","result":{"message_id":1}}`,
	`{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user","result":{"message_id":1}}`,
	`{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}}`,
	`{"ok":true,"result":{"message_id":1},"error_code":"x"}`,
	`{"ok":true,"result":{"message_id":1}} trailing`,
	`{"ok":true,"result":{"message_id":1}`,
	`{"ok":null,"result":{"message_id":1}}`,
	`[1,2]`,
	`<html><title>502 Bad Gateway</title></html>`,
	`   `,
	// Nested deeper than encoding/json's 10,000 levels: the general path
	// refuses it, and the single pass must not take it.
	`{"ok":true,"result":{"message_id":1,"z":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`,
}

// TestOnePassMatchesGeneral checks that parseResponse, which decodes a
// successful answer in one pass, returns for every kind of body exactly
// what the general two-pass path returns: the same error and the same
// decoded message.
func TestOnePassMatchesGeneral(t *testing.T) {
	for _, body := range onePassBodies {
		for _, status := range []int{200, 400, 429, 502} {
			checkOnePass(t, status, []byte(body))
		}
	}
}

// TestOnePassTakesTheAnswers checks that the answers the worker gets for
// every send are decoded by the single pass, not by the general path (so
// the test above compares something).
func TestOnePassTakesTheAnswers(t *testing.T) {
	for _, body := range onePassBodies[:4] {
		var msg Message
		if !decodedInOnePass([]byte(body), &msg) {
			t.Errorf("the single pass handed over %s", body)
		}
		if msg.MessageID == 0 {
			t.Errorf("the single pass decoded no message_id from %s", body)
		}
	}
	for _, body := range onePassBodies[4:] {
		var msg Message
		if decodedInOnePass([]byte(body), &msg) {
			t.Errorf("the single pass took %s, which the general path must judge", body)
		}
		if !reflect.ValueOf(msg).IsZero() {
			t.Errorf("the single pass handed %s over with the result set: %+v", body, msg)
		}
	}
	if decodedInOnePass([]byte(sentAnswer), nil) {
		t.Error("the single pass took an answer with no result wanted")
	}
	set := Message{MessageID: 9}
	if decodedInOnePass([]byte(sentAnswer), &set) {
		t.Error("the single pass decoded into a result already set")
	}
}

// FuzzOnePassMatchesGeneral is TestOnePassMatchesGeneral for arbitrary
// bodies.
func FuzzOnePassMatchesGeneral(f *testing.F) {
	for _, body := range onePassBodies {
		f.Add(200, []byte(body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if resultKeys(body) > 1 {
			t.Skip("a repeated result key: RFC 8259 leaves its meaning open")
		}
		checkOnePass(t, status, body)
	})
}

// checkOnePass compares parseResponse and parseGeneral on one answer.
func checkOnePass(t *testing.T, status int, body []byte) {
	t.Helper()
	header := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"3"}}
	scrub := secret("123:token").redact
	var got, want Message
	gotErr := parseResponse("sendMessage", status, header, body, &got, scrub)
	wantErr := parseGeneral("sendMessage", status, header, body, &want, scrub)
	if g, w := describeErr(gotErr), describeErr(wantErr); g != w {
		t.Fatalf("status %d, body %q:\nparseResponse: %s\nparseGeneral:  %s", status, body, g, w)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status %d, body %q:\nparseResponse decoded %+v\nparseGeneral decoded  %+v", status, body, got, want)
	}
}

// describeErr prints an error with its type and fields, and its cause's
// text.
func describeErr(err error) string {
	switch e := err.(type) {
	case nil:
		return "<nil>"
	case *ResponseError:
		c := *e
		cause := ""
		if c.Err != nil {
			cause = c.Err.Error()
		}
		c.Err = nil
		return fmt.Sprintf("%+v cause %q", c, cause)
	case *Error:
		return fmt.Sprintf("%+v", *e)
	default:
		return fmt.Sprintf("%T %v", err, err)
	}
}

// resultKeys counts the keys of a top-level JSON object that name "result"
// in encoding/json's matching (case folded); 0 for anything else.
func resultKeys(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if key, ok := tok.(string); ok && strings.EqualFold(key, "result") {
			n++
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return n
		}
	}
	return n
}

// BenchmarkParseResponse measures the decoding of the answer to every send.
func BenchmarkParseResponse(b *testing.B) {
	header := http.Header{"Content-Type": {"application/json"}}
	scrub := secret("123:token").redact
	body := []byte(sentAnswer)
	for _, bc := range []struct {
		name  string
		parse func(string, int, http.Header, []byte, any, func(string) string) error
	}{{"one_pass", parseResponse}, {"two_passes", parseGeneral}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var msg Message
				if err := bc.parse("sendMessage", 200, header, body, &msg, scrub); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
