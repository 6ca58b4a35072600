package delivery

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// fillEveryField sets every field of the struct v points to a value that
// json.Marshal writes (none is omitted as empty), so that a field added to
// the type and forgotten by its hand encoder fails the comparison.
func fillEveryField(t *testing.T, v any, s string, n int64, at time.Time) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString(s)
		case int, int64:
			f.SetInt(n)
		case uint64:
			f.SetUint(uint64(n))
		case time.Time:
			f.Set(reflect.ValueOf(at))
		default:
			t.Fatalf("%s.%s is a %s: teach fillEveryField and the hand encoder", rv.Type().Name(), rv.Type().Field(i).Name, f.Type())
		}
	}
}

func sameAsEncodingJSON(t *testing.T, v any, marshal func() ([]byte, error)) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, err := marshal()
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("hand encoding of %+v:\n got %s (%v)\nwant %s (%v)", v, got, err, want, wantErr)
	}
}

// The hand encoders of the values written per message write exactly what
// encoding/json writes: every field set, every optional field left empty,
// the strings JSON must escape, and a time RFC 3339 cannot express.
func TestHandEncodingMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 456789000, time.FixedZone("MSK", 3*3600))
	for _, s := range []string{"order:1:accepted", "", `a "quoted" \ back`, "<b>&amp;</b>", "tab\tnl\ncr\r\b\f\x00\x1f\x7f",
		"привет ✓ 🎉", "bad \xff utf-8 \xe2\x82", "line\u2028para\u2029end"} {
		var r DeliveryRecord
		fillEveryField(t, &r, s, 42, at)
		sameAsEncodingJSON(t, &r, r.marshal)
		var e Event
		fillEveryField(t, &e, s, -7, at)
		sameAsEncodingJSON(t, &e, e.marshal)
	}
	for _, r := range []DeliveryRecord{{}, {Key: "k", State: StateSending, ClaimedAt: at, ClaimedBy: "w1"}} {
		sameAsEncodingJSON(t, &r, r.marshal)
	}
	for _, e := range []Event{{}, {Key: "k", Event: EventDelivered, Channel: "telegram", At: at.UTC()}} {
		sameAsEncodingJSON(t, &e, e.marshal)
	}
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	r := DeliveryRecord{DeliveredAt: far}
	sameAsEncodingJSON(t, &r, r.marshal)
	e := Event{At: far}
	sameAsEncodingJSON(t, &e, e.marshal)
}

func FuzzHandEncodingMatchesEncodingJSON(f *testing.F) {
	f.Add("order:1:accepted", "telegram", "5", "", int64(3), int64(1765000000123456789))
	f.Add("a\"<>&\u2028", "\xff", "\x00", "x", int64(-1), int64(0))
	f.Fuzz(func(t *testing.T, a, b, c, d string, n, ns int64) {
		at := time.Unix(0, ns).UTC()
		r := DeliveryRecord{Key: a, Channel: b, Recipient: c, ProviderID: d, DeliveredAt: at, StreamSeq: uint64(n),
			State: d, ClaimedAt: at, ClaimedBy: a, CancelledBy: c}
		sameAsEncodingJSON(t, &r, r.marshal)
		e := Event{Key: a, Event: b, Channel: c, Next: d, Recipient: a, Reason: b, Code: int(n), Description: c, At: at}
		sameAsEncodingJSON(t, &e, e.marshal)
	})
}

func BenchmarkMarshalRecord(b *testing.B) {
	r := DeliveryRecord{Key: "order:B123:accepted", Channel: "telegram", Recipient: "20001234", State: StateSending,
		StreamSeq: 123456, ClaimedAt: time.Now().UTC(), ClaimedBy: "telegram-worker-1-3f2a"}
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(r)
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.marshal()
		}
	})
}
