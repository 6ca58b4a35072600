package delivery

import (
	"reflect"
	"strings"
	"testing"
	"time"

	segjson "github.com/segmentio/encoding/json"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// payloadBodies are payloads of every version and field, and JSON that
// decoders are known to read differently: keys in another case, repeated
// keys, numbers in every form, escapes, invalid UTF-8, nulls, wrong types,
// times segmentio/encoding's own parser reads differently, trailing data,
// deep nesting.
func payloadBodies(t testing.TB) []string {
	t.Helper()
	created := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	simple := notify.Notification{Key: "order:A1:accepted", ChatID: 100, Text: "Order A1 accepted", CreatedAt: created}
	rich := simple
	rich.Email, rich.Phone, rich.MaxUserID = "ann@example.com", "+79991234567", 42
	rich.ParseMode, rich.Text = notify.ParseModeHTML, "<b>Order A1 accepted</b> &amp; \u00e9\u2028"
	rich.Buttons = [][]notify.Button{{{Text: "Track", URL: "https://shop.example/orders/A1"}}, {{Text: "Help", URL: "http://shop.example/help"}}}
	rich.MessageThreadID = 7
	rich.LinkPreview = notify.LinkPreview{URL: "https://shop.example/orders/A1", PreferLargeMedia: true}
	rich.Bodies = notify.Bodies{
		Max:   &notify.MaxBody{Text: "<b>Order A1</b>", Format: notify.MaxFormatHTML},
		Email: &notify.EmailBody{HTML: "<p>Order A1</p>", Text: "Order A1"},
		SMS:   &notify.SMSBody{Text: "Order A1"},
	}
	rich.Priority, rich.ExpiresAt, rich.FallbackAfter, rich.Subject = notify.PriorityTransactional, created.Add(time.Hour), 90*time.Second, "Order A1"
	scheduled := simple
	scheduled.NotBefore, scheduled.FallbackAfter = created.Add(time.Minute), notify.FallbackNever
	var bodies []string
	for _, n := range []notify.Notification{simple, rich, scheduled} {
		b, err := n.MarshalPayload()
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b))
	}
	const head = `{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z"`
	return append(bodies,
		head+`}`,
		head+`} `,
		head+`}}`,
		head+`} {"v":1}`,
		"\ufeff"+head+`}`,
		`{"V":1,"KEY":"k","Chat_ID":1,"TEXT":"x","Created_At":"2026-12-07T06:00:00Z"}`,
		head+`,"chat_id":2}`,
		head+`,"text":"y","text":"z"}`,
		`{"v":3,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","bodies":{"sms":{"text":"a"}},"bodies":{"email":{"text":"b"}}}`,
		`{"v":3,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","buttons":[[{"text":"a","url":"https://a.example"}]],"buttons":[]}`,
		`{"v":3,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","bodies":{"sms":{"text":"a"},"sms":{"text":"b"}}}`,
		`{"v":1.0,"key":"k","chat_id":1e3,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":-0,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":9223372036854775808,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1.5,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":"1","text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":01,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"\u00e9\ud800\udc00\ud800 \"\\\/\b\f\n\r\t","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"`+"\xff\xfe"+`x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"`+"\x01"+`x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"k\u0065y":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":null,"chat_id":null,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00+03:00"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07 06:00:00"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":null}`,
		`{"CreAted_At":"0000-01-01T00>00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06>00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00,5Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00+24:00"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T24:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07t06:00:00z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"\u0032026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06>00:00Z","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","expires_at":"2026-12-07T07>00:00Z"}`,
		`{"v":4,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","not_before":"2026-12-07T07>00:00Z"}`,
		`{"v":4,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","not_before":null,"expires_at":"2026-12-08T06:00:00.999999999-01:30"}`,
		`{"v":2,"key":"k","route":["telegram","sms"],"chat_id":1,"phone":"+79991234567","text":"x","fallback_after":"90s","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":2,"key":"k","route":"telegram","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z"}`,
		`{"v":3,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","buttons":[{"text":"a"}]}`,
		`{"v":3,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","link_preview":{"is_disabled":true},"disable_notification":true,"protect_content":false}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","unknown":{"a":[1,2,{"b":null}],"c":"\u0000"}}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z","deep":`+strings.Repeat("[", 4000)+strings.Repeat("]", 4000)+`}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z",}`,
		`{"v":1,"key":"k","chat_id":1,"text":"x","created_at":"2026-12-07T06:00:00Z"`,
		`{"v":1,'key':"k"}`,
		`[{"v":1}]`, `null`, `{}`, `""`, `{"v":-1}`, `{"v":99}`, ``,
	)
}

// checkDecodePayload compares decodePayload with notify.DecodePayload on
// one payload: the same error, or the same notification.
func checkDecodePayload(t *testing.T, b []byte) {
	t.Helper()
	got, gotErr := decodePayload(b)
	want, wantErr := notify.DecodePayload(b)
	if g, w := errText(gotErr), errText(wantErr); g != w {
		t.Fatalf("payload %q:\ndecodePayload:        %s\nnotify.DecodePayload: %s", b, g, w)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("payload %q:\ndecodePayload:        %#v\nnotify.DecodePayload: %#v", b, got, want)
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestDecodePayloadMatchesNotify checks that the worker's faster decoding
// of payloads decodes each of payloadBodies as notify.DecodePayload does,
// and that it is the faster decoder that took the valid ones.
func TestDecodePayloadMatchesNotify(t *testing.T) {
	bodies := payloadBodies(t)
	for _, b := range bodies {
		checkDecodePayload(t, []byte(b))
	}
	for _, b := range bodies[:3] {
		fast := func(b []byte, v any) error {
			err := segjson.Unmarshal(b, v)
			if err != nil {
				t.Errorf("segmentio/encoding refused payload %s: %v", b, err)
			}
			return err
		}
		if _, err := notify.DecodePayloadWith([]byte(b), fast); err != nil {
			t.Fatalf("payload %s: %v", b, err)
		}
		if _, err := notify.DecodePayloadWith([]byte(b), func([]byte, any) error { panic("a decoder that panics") }); err != nil {
			t.Fatalf("a panicking decoder lost payload %s: %v", b, err)
		}
	}
}

// TestDecodedPayloadOwnsItsStrings checks that a notification the worker
// decoded does not share memory with its payload, which is the pulled
// message's buffer: a decoder that makes strings point into its input
// (segmentio/encoding's ZeroCopy) would change a notification waiting in
// its lane when the buffer is reused.
func TestDecodedPayloadOwnsItsStrings(t *testing.T) {
	b := []byte(payloadBodies(t)[1])
	n, err := decodePayload(b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := notify.DecodePayload(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'x'
	}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("overwriting the payload changed the notification decoded from it:\n%#v\nwant\n%#v", n, want)
	}
}

// FuzzDecodePayloadMatchesNotify is TestDecodePayloadMatchesNotify for
// arbitrary payloads.
func FuzzDecodePayloadMatchesNotify(f *testing.F) {
	for _, b := range payloadBodies(f) {
		f.Add([]byte(b))
	}
	f.Fuzz(checkDecodePayload)
}

// BenchmarkDecodePayload decodes the payload of a notification with a
// Telegram text, as notify.DecodePayload does and as the worker does.
func BenchmarkDecodePayload(b *testing.B) {
	p := []byte(payloadBodies(b)[0])
	for _, bc := range []struct {
		name   string
		decode func([]byte) (notify.Notification, error)
	}{{"encoding_json", notify.DecodePayload}, {"worker", decodePayload}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.decode(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
