package publisher

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	for _, tc := range []struct {
		data   string
		header nats.Header
		seq    uint64
		dup    bool
		err    error
	}{
		{data: `{"stream":"NOTIFY","seq":42}`, seq: 42},
		{data: `{"stream":"NOTIFY","seq":7,"duplicate": true}`, seq: 7, dup: true},
		{data: `{"stream":"NOTIFY","seq":7,"duplicate":true}`, seq: 7, dup: true},
		{data: `{"stream":"NOTIFY","domain":"hub","seq":9}`, seq: 9},
		{data: `{"stream": "NOTIFY", "seq": 11, "duplicate": false}`, seq: 11},
		{data: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"NOTIFY","seq":0}`, err: &natsjs.APIError{ErrorCode: 10077}},
		{header: nats.Header{"Status": {"503"}}, err: natsjs.ErrNoStreamResponse},
		{data: `garbage`, err: natsjs.ErrInvalidJSAck},
		{data: `{"seq":1}`, err: natsjs.ErrInvalidJSAck},
	} {
		got := parsePubAck(&nats.Msg{Data: []byte(tc.data), Header: tc.header})
		if tc.err != nil {
			if !errors.Is(got.err, tc.err) {
				t.Errorf("%q: err %v, want %v", tc.data, got.err, tc.err)
			}
			continue
		}
		if got.err != nil || got.seq != tc.seq || got.dup != tc.dup {
			t.Errorf("%q: got %+v, want seq %d dup %v", tc.data, got, tc.seq, tc.dup)
		}
	}
}
