package delivery

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// The delivery records, send claims and events written for every message
// are encoded by hand: encoding/json's reflection was ≈ 7% of the worker's
// CPU at its ceiling. The output is byte for byte what json.Marshal writes
// for the same value (TestHandEncodingMatchesEncodingJSON and its fuzz
// test), so readers and the published contract see no difference.

// marshal returns r encoded as json.Marshal encodes it.
func (r *DeliveryRecord) marshal() ([]byte, error) {
	b := make([]byte, 0, 256)
	b = appendString(b, `{"key":`, r.Key)
	b = appendString(b, `,"channel":`, r.Channel)
	b = appendString(b, `,"recipient":`, r.Recipient)
	b = appendOmitEmpty(b, `,"provider_id":`, r.ProviderID)
	b = append(b, `,"delivered_at":`...)
	b, err := appendJSONTime(b, r.DeliveredAt)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"stream_seq":`...)
	b = strconv.AppendUint(b, r.StreamSeq, 10)
	b = appendOmitEmpty(b, `,"state":`, r.State)
	if b, err = appendOmitZero(b, `,"claimed_at":`, r.ClaimedAt); err != nil {
		return nil, err
	}
	b = appendOmitEmpty(b, `,"claimed_by":`, r.ClaimedBy)
	if b, err = appendOmitZero(b, `,"cancelled_at":`, r.CancelledAt); err != nil {
		return nil, err
	}
	b = appendOmitEmpty(b, `,"cancelled_by":`, r.CancelledBy)
	return append(b, '}'), nil
}

// marshal returns e encoded as json.Marshal encodes it.
func (e *Event) marshal() ([]byte, error) {
	b := make([]byte, 0, 256)
	b = appendString(b, `{"key":`, e.Key)
	b = appendString(b, `,"event":`, e.Event)
	b = appendString(b, `,"channel":`, e.Channel)
	b = appendOmitEmpty(b, `,"next":`, e.Next)
	b = appendOmitEmpty(b, `,"recipient":`, e.Recipient)
	b = appendOmitEmpty(b, `,"provider_id":`, e.ProviderID)
	b = appendOmitEmpty(b, `,"reason":`, e.Reason)
	if e.Code != 0 {
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(e.Code), 10)
	}
	b = appendOmitEmpty(b, `,"description":`, e.Description)
	b = append(b, `,"at":`...)
	b, err := appendJSONTime(b, e.At)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendString appends prefix (the punctuation and the field's name) and
// v as a JSON string.
func appendString(b []byte, prefix, v string) []byte {
	return appendJSONString(append(b, prefix...), v)
}

// appendOmitEmpty is appendString for a field tagged omitempty: an empty v
// appends nothing.
func appendOmitEmpty(b []byte, prefix, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(b, prefix, v)
}

// appendOmitZero appends prefix and t for a field tagged omitzero: a zero
// t appends nothing.
func appendOmitZero(b []byte, prefix string, t time.Time) ([]byte, error) {
	if t.IsZero() {
		return b, nil
	}
	return appendJSONTime(append(b, prefix...), t)
}

// appendJSONTime appends t as time.Time's MarshalJSON writes it: RFC 3339
// with nanoseconds, quoted; a time RFC 3339 cannot express (a year outside
// 0–9999) is its error.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

// appendJSONString appends s as a JSON string the way encoding/json writes
// it by default: <, > and & escaped for HTML, U+2028 and U+2029 escaped,
// other control characters as \u00XX except \b \f \n \r \t, and invalid
// UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
