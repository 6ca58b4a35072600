package publisher

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestScanFlowAck(t *testing.T) {
	for _, tc := range []struct {
		data string
		seq  uint64
		msgs uint16
		ok   bool
	}{
		{data: `{"type":"ack","seq":0,"msgs":500}`, seq: 0, msgs: 500, ok: true},
		{data: `{"type":"ack","seq":1500,"msgs":250}`, seq: 1500, msgs: 250, ok: true},
		{data: `{"type":"ack","seq":1,"msgs":70000}`},
		{data: `{"type":"gap","last_seq":2,"seq":3}`},
		{data: `{"stream":"NOTIFY","seq":4,"batch":"b","count":4}`},
	} {
		seq, msgs, ok := scanFlowAck([]byte(tc.data))
		if ok != tc.ok || seq != tc.seq || msgs != tc.msgs {
			t.Errorf("%s: got %d %d %v, want %d %d %v", tc.data, seq, msgs, ok, tc.seq, tc.msgs, tc.ok)
		}
	}
}

// TestFastBatchReplies feeds a batch the replies the stream sends (the
// shapes nats-server 2.15 writes) and checks what it concludes.
func TestFastBatchReplies(t *testing.T) {
	msg := func(data string) *nats.Msg { return &nats.Msg{Data: []byte(data)} }
	for _, tc := range []struct {
		name    string
		sent    uint64
		replies []*nats.Msg
		acked   uint64
		ended   bool
		count   uint64
		err     error
		full    bool
	}{
		{name: "flow acks", sent: 40, replies: []*nats.Msg{msg(`{"type":"ack","seq":0,"msgs":10}`), msg(`{"type":"ack","seq":20,"msgs":10}`)},
			acked: 20, full: true},
		{name: "window open", sent: 39, replies: []*nats.Msg{msg(`{"type":"ack","seq":20,"msgs":10}`)}, acked: 20},
		{name: "a lost flow ack is covered by the next", sent: 50, replies: []*nats.Msg{msg(`{"type":"ack","seq":40,"msgs":10}`), msg(`{"type":"ack","seq":20,"msgs":10}`)},
			acked: 40},
		{name: "committed", sent: 5, replies: []*nats.Msg{msg(`{"type":"ack","seq":0,"msgs":10}`), msg(`{"stream":"NOTIFY","seq":4,"batch":"b","count":5}`)},
			acked: 5, ended: true, count: 5},
		{name: "gap ends the batch short", sent: 5, replies: []*nats.Msg{msg(`{"type":"ack","seq":0,"msgs":10}`),
			msg(`{"type":"gap","last_seq":2,"seq":3}`), msg(`{"stream":"NOTIFY","seq":6,"batch":"b","count":1}`)},
			acked: 1, ended: true, count: 1},
		{name: "allow_batched off", sent: 2, replies: []*nats.Msg{msg(`{"error":{"code":400,"err_code":10205,"description":"batch publish is disabled"},"stream":"NOTIFY","seq":0}`)},
			ended: true, err: errBatchUnsupported},
		{name: "server without batches", sent: 2, replies: []*nats.Msg{msg(`{"stream":"NOTIFY","seq":9}`)},
			ended: true, err: errBatchUnsupported},
		{name: "no stream", sent: 1, replies: []*nats.Msg{{Header: nats.Header{"Status": {"503"}}}},
			ended: true, err: natsjs.ErrNoStreamResponse},
		{name: "unknown batch", sent: 3, replies: []*nats.Msg{msg(`{"type":"ack","seq":0,"msgs":10}`),
			msg(`{"error":{"code":400,"err_code":10208,"description":"batch publish ID unknown"},"stream":"NOTIFY","seq":0}`)},
			ended: true, err: &natsjs.APIError{ErrorCode: 10208}},
		{name: "replies after the end are ignored", sent: 3, replies: []*nats.Msg{msg(`{"stream":"NOTIFY","seq":3,"batch":"b","count":3}`),
			msg(`{"type":"ack","seq":9,"msgs":10}`)}, acked: 3, ended: true, count: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFastBatch("_INBOX.x", "b", 10)
			b.markSent(tc.sent, "notify.telegram.1")
			for _, m := range tc.replies {
				b.handle(m)
			}
			acked, ended, count, err := b.state()
			if acked != tc.acked || ended != tc.ended || count != tc.count {
				t.Errorf("acked %d ended %v count %d, want %d %v %d", acked, ended, count, tc.acked, tc.ended, tc.count)
			}
			if (err == nil) != (tc.err == nil) || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("err %v, want %v", err, tc.err)
			}
			if got := b.full(); got != tc.full {
				t.Errorf("full = %v, want %v", got, tc.full)
			}
		})
	}
}

func TestFastBatchReplySubject(t *testing.T) {
	b := newFastBatch("_INBOX.abc", "abcx1", 500)
	if got, want := b.reply(1, fastOpStart), "_INBOX.abc.abcx1.500.fail.1.0.$FI"; got != want {
		t.Errorf("reply = %q, want %q", got, want)
	}
	if got, want := b.reply(7, fastOpEOB), "_INBOX.abc.abcx1.500.fail.7.3.$FI"; got != want {
		t.Errorf("reply = %q, want %q", got, want)
	}
}
