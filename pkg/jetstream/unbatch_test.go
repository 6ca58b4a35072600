package jetstream_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Unbatch leaves each message with the headers it had before the batch:
// its own kept, the batch's taken off, and no map on one that had none.
func TestUnbatchTakesOffOnlyTheBatchsHeaders(t *testing.T) {
	batched := func(h nats.Header) *nats.Msg {
		if h == nil {
			h = nats.Header{}
		}
		h.Set(jetstreamext.BatchIDHeader, "b1")
		h.Set(jetstreamext.BatchSeqHeader, "2")
		h.Set(jetstreamext.BatchCommitHeader, "1")
		return &nats.Msg{Subject: "s", Header: h}
	}
	plain := batched(nil)
	own := batched(nats.Header{jetstream.HeaderMsgID: {"k"}, "X-Kept": {"a", "b"}})
	jetstream.Unbatch(plain, own)
	if plain.Header != nil {
		t.Errorf("a message that had no headers keeps a map: %v", plain.Header)
	}
	if got, want := fmt.Sprint(own.Header), fmt.Sprint(nats.Header{jetstream.HeaderMsgID: {"k"}, "X-Kept": {"a", "b"}}); got != want {
		t.Errorf("headers after Unbatch: %s, want %s", got, want)
	}
	jetstream.Unbatch() // no messages: nothing to do
}
