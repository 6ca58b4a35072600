package notify

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzUnmarshalDecodesAsTheStream checks the fast path of DecodePayload:
// whatever json.Unmarshal takes, the Decoder the payload was first decoded
// with takes too, into the same notification.
func FuzzUnmarshalDecodesAsTheStream(f *testing.F) {
	f.Add([]byte(`{"v":3,"key":"order:1:accepted","chat_id":42,"text":"<b>x</b>","parse_mode":"HTML","created_at":"2026-12-06T21:00:00Z","buttons":[[{"text":"a","url":"https://example.com"}]]}`))
	f.Add([]byte(`{"v":2,"key":"k","route":["telegram","email"],"email":"a@example.com","fallback_after":"90s","created_at":"2026-12-06T21:00:00Z"} `))
	f.Add([]byte(`{"v":1,"key":"k","chat_id":1,"created_at":"2026-12-06T21:00:00Z"}}`))
	f.Add([]byte(`{"v":1} {"v":2}`))
	f.Add([]byte(`{"v":"1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast Notification
		pf := payload{Notification: &fast}
		if json.Unmarshal(b, &pf) != nil {
			return
		}
		var slow Notification
		ps := payload{Notification: &slow}
		if err := decodeStream(b, &ps); err != nil {
			t.Fatalf("json.Unmarshal took %q, the stream refused it: %v", b, err)
		}
		pf.Notification, ps.Notification = nil, nil
		if !reflect.DeepEqual(pf, ps) || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q decoded differently: %+v %+v against %+v %+v", b, pf, fast, ps, slow)
		}
	})
}
