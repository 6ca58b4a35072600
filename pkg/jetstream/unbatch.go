package jetstream

import (
	"github.com/nats-io/nats.go"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Unbatch takes off msgs what jetstreamext's batch publisher put on them:
// the batch's id, sequence and commit headers, and the header map it made
// for a message that had none. A message can then go into another batch,
// or be published on its own, as it was before the batch: a commit header
// left on would commit the next batch at that message, and the server
// takes a message with a batch id for a part of a batch. (With no flow
// control the batch publisher sets no reply subject.) Call it once the
// batch's AddMsg and CommitMsg have returned: each message has been
// written to the connection by then.
func Unbatch(msgs ...*nats.Msg) {
	for _, m := range msgs {
		delete(m.Header, jetstreamext.BatchIDHeader)
		delete(m.Header, jetstreamext.BatchSeqHeader)
		delete(m.Header, jetstreamext.BatchCommitHeader)
		if len(m.Header) == 0 {
			m.Header = nil
		}
	}
}
