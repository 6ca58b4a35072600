package publisher

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Fast-ingest batch publishing (JetStream ADR-50, nats-server 2.14 and
// later, streams with allow_batched). A batch is not staged: the stream
// stores each message as it arrives. What the publisher relies on is the
// gap mode "fail": the stream leader accepts a message of a batch only if
// its batch sequence is the one after the last message it accepted for
// that batch; a missing message (lost in a stream leader election, with a
// connection, or rejected) ends the batch, and the final PubAck says how
// many messages, counted from the first, the stream has. So what a batch
// stored is always a prefix of it, in order, even across a leader change:
// a new leader continues from the state the replicated entries left and
// sees the gap. A message whose Nats-Msg-Id the stream already holds is
// skipped and counts as persisted, which keeps de-duplication.
//
// The protocol runs entirely in the reply subject of each message,
//
//	<inbox>.<batch id>.<flow>.fail.<batch seq>.<op>.$FI
//
// and in the replies the stream sends there: flow acks
// {"type":"ack","seq":N,"msgs":M} (messages 1..N are stored; the next ack
// comes after M more), gap and error notices, and one final PubAck per
// batch with "batch" and "count" (messages 1..count are stored).

// Fast-batch operations, the <op> token of the reply subject.
const (
	fastOpStart  = 0 // the first message of a batch
	fastOpAppend = 1 // a following message
	fastOpCommit = 2 // the last message, which ends the batch
	fastOpEOB    = 3 // end the batch without a message
	fastOpPing   = 4 // ask for the latest flow ack again
)

// fastSuffix ends the reply subject of every fast-batch message.
const fastSuffix = ".$FI"

// Flow control of a fast batch. The client asks for a flow ack at least
// every maxFastFlow messages (the server may ack more often and tells how
// often in each flow ack), and keeps at most fastOutstanding such intervals
// unacknowledged. Until the first reply arrives it assumes
// initialFastFlow, so that a short batch goes out at once.
const (
	maxFastFlow     = 500
	initialFastFlow = 16
	fastOutstanding = 2
)

// errBatchUnsupported ends a round whose first batch the stream refused
// (allow_batched is off) or did not understand (a server older than 2.14
// stores the messages as plain publishes and answers with plain PubAcks).
var errBatchUnsupported = errors.New("NOTIFY does not accept fast-ingest batches")

// batchDisabledCode is the JetStream error code of "batch publish is
// disabled" (the stream's allow_batched is off).
const batchDisabledCode = 10205

// fastBatch is one fast-ingest batch. The publish stage sends its messages
// (sent and subject are its alone); the ack router records the replies
// under mu and signals the stages waiting on them.
type fastBatch struct {
	id     string
	prefix string // <inbox>.<id>.<flow>.fail.
	flow   uint16 // the flow the client asked for

	mu sync.Mutex
	// sent is the batch sequence of the last message handed to the
	// connection; subject is the first message's, where pings and the EOB
	// go; eob is set once the batch was ended (an EOB, or a last message
	// with the commit operation), eobMsg when that was an EOB message of
	// its own. The publish stage writes them.
	sent    uint64
	subject string
	eob     bool
	eobMsg  bool
	// replied is set by the first reply. acked is the highest flow-acked
	// batch sequence: messages 1..acked are stored. serverFlow is the
	// interval the server acks at.
	replied    bool
	acked      uint64
	serverFlow uint16
	// ended is set by the final reply; then count messages (1..count) are
	// stored and endErr says why the batch ended, when not by our commit.
	ended  bool
	count  uint64
	endErr error
	// notice is the last gap or error notice, kept to explain an early end.
	notice string
	// dup is the final PubAck's duplicate flag (a one-message batch whose
	// message the stream already had).
	dup bool
	// streamSeq is the final PubAck's stream sequence: that of the last
	// message of the batch the stream stored, 0 when it stored none (every
	// message was a duplicate). Only a final PubAck with a stream sequence
	// proves the batch stored (verified).
	streamSeq uint64
	// proven is the ack stage's verdict on a batch that ended unverified
	// (round.proveStored), set before proof closes.
	proven bool

	// room wakes the publish stage when the window may have opened;
	// progress wakes the ack stage when acked or ended changed; done closes
	// when the batch ends; proof closes when the ack stage has settled the
	// batch (setProof).
	room, progress chan struct{}
	done           chan struct{}
	proof          chan struct{}
}

func newFastBatch(inbox, id string, flow uint16) *fastBatch {
	return &fastBatch{
		id:         id,
		prefix:     inbox + "." + id + "." + strconv.FormatUint(uint64(flow), 10) + ".fail.",
		flow:       flow,
		serverFlow: min(flow, initialFastFlow),
		room:       make(chan struct{}, 1),
		progress:   make(chan struct{}, 1),
		done:       make(chan struct{}),
		proof:      make(chan struct{}),
	}
}

// reply returns the reply subject of the message with batch sequence seq
// and operation op.
func (b *fastBatch) reply(seq uint64, op int) string {
	return b.prefix + strconv.FormatUint(seq, 10) + "." + strconv.Itoa(op) + fastSuffix
}

// full reports whether the window is full: the message after sent would
// leave more than fastOutstanding flow intervals unacknowledged.
func (b *fastBatch) full() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.ended && b.acked+uint64(b.serverFlow)*fastOutstanding <= b.sent
}

// state returns the acknowledged prefix and, once the batch has ended, how
// it ended.
func (b *fastBatch) state() (acked uint64, ended bool, count uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acked, b.ended, b.count, b.endErr
}

// verified reports whether the batch's final PubAck proves every message
// of it stored, and not only seen.
//
// A flow ack does not: the leader acks a message whose id it already has
// as if stored, also when that id is only proposed, not committed. A
// leader cut off from its followers (clients kept) holds a message
// proposed by an earlier attempt, the publisher sends it again in a new
// batch, the leader flow-acks it, and the message is lost when a new
// leader is elected without it (found by the long chaos run on the
// cluster: one order never reached NOTIFY). A final PubAck with a stream
// sequence does: some message of the batch was then committed after every
// one the leader had proposed before it in the same term, and a leader
// forgets the ids of its uncommitted proposals when it loses leadership.
// A final PubAck with sequence 0 says every message was a duplicate, of a
// stored message or of a proposal: it proves nothing, except for a
// one-message batch, whose duplicate PubAck carries the stored message's
// sequence and whose proposal-only duplicate is refused with an error.
func (b *fastBatch) verified() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended && b.endErr == nil && b.count >= b.sent && b.streamSeq > 0
}

// setProof records the ack stage's verdict on the ended batch: whether it
// is proven stored (verified, or by round.proveStored). The ack stage calls
// it once per batch it settles.
func (b *fastBatch) setProof(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.proof:
		return // settled already
	default:
	}
	b.proven = ok
	close(b.proof)
}

// isProven reports the ack stage's verdict, once proof has closed.
func (b *fastBatch) isProven() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.proven
}

// lastSent returns the batch sequence of the last message sent.
func (b *fastBatch) lastSent() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent
}

// firstSubject returns the subject of the batch's first message.
func (b *fastBatch) firstSubject() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.subject
}

// markSent records that the message with batch sequence seq, on subject,
// was handed to the connection.
func (b *fastBatch) markSent(seq uint64, subject string) {
	b.mu.Lock()
	b.sent = seq
	if seq == 1 {
		b.subject = subject
	}
	b.mu.Unlock()
}

// markEOB records that the batch was ended, by an EOB message of its own
// when msg is set, otherwise by its last message.
func (b *fastBatch) markEOB(msg bool) {
	b.mu.Lock()
	b.eob, b.eobMsg = true, msg
	b.mu.Unlock()
}

// endedByEOB reports whether the batch was ended by an EOB message of its
// own.
func (b *fastBatch) endedByEOB() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eobMsg
}

// owed reports whether the stream owes the batch a reply: it has ended
// already, its EOB was sent, or a flow interval's worth of messages went
// out since the last flow ack. While nothing is owed, waiting for an ack is
// not a sign of trouble: the rest of the batch has not been read yet.
func (b *fastBatch) owed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended || b.eob || b.sent >= b.acked+uint64(b.serverFlow)
}

// ended reports whether the batch has ended.
func (b *fastBatch) hasEnded() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// end records the end of the batch (at most once) and wakes everyone.
// The caller holds b.mu.
func (b *fastBatch) endLocked(count uint64, err error) {
	if b.ended {
		return
	}
	b.ended, b.count, b.endErr = true, count, err
	close(b.done)
}

// signal wakes both stages without blocking.
func (b *fastBatch) signal() {
	select {
	case b.room <- struct{}{}:
	default:
	}
	select {
	case b.progress <- struct{}{}:
	default:
	}
}

// fastReply is the union of what the stream sends to a fast batch: flow
// acks, gap and error notices, the final PubAck and error PubAcks.
type fastReply struct {
	Type string `json:"type"`
	// Seq is the acknowledged batch sequence in a flow ack, the sequence
	// of the message in a gap or error notice, and the stream sequence in
	// a PubAck.
	Seq uint64 `json:"seq"`
	// Msgs is the flow ack's interval.
	Msgs uint16 `json:"msgs"`
	// LastSeq is the gap notice's expected sequence.
	LastSeq uint64 `json:"last_seq"`

	Error     *natsjs.APIError `json:"error"`
	Stream    string           `json:"stream"`
	Duplicate bool             `json:"duplicate"`
	Batch     string           `json:"batch"`
	Count     uint64           `json:"count"`
}

// flowAckPrefix starts every flow ack the server writes.
var flowAckPrefix = []byte(`{"type":"ack","seq":`)

// scanFlowAck reads a flow ack, {"type":"ack","seq":N,"msgs":M}, without a
// JSON decoder. It reports false for anything else.
func scanFlowAck(b []byte) (seq uint64, msgs uint16, ok bool) {
	rest, found := bytes.CutPrefix(b, flowAckPrefix)
	if !found {
		return 0, 0, false
	}
	seqText, rest, found := bytes.Cut(rest, []byte(`,"msgs":`))
	if !found {
		return 0, 0, false
	}
	msgsText, found := bytes.CutSuffix(rest, []byte("}"))
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(string(seqText), 10, 64)
	m, err2 := strconv.ParseUint(string(msgsText), 10, 16)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return s, uint16(m), true
}

// handle records one reply to the batch.
func (b *fastBatch) handle(m *nats.Msg) {
	defer b.signal()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return // a late reply (a flow ack resent for a ping, say)
	}
	first := !b.replied
	b.replied = true
	if seq, msgs, ok := scanFlowAck(m.Data); ok {
		b.ack(seq, msgs)
		return
	}
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			b.endLocked(b.acked, natsjs.ErrNoStreamResponse)
			return
		}
		b.endLocked(b.acked, natsjs.ErrInvalidJSAck)
		return
	}
	var r fastReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		b.endLocked(b.acked, fmt.Errorf("%w: %v", natsjs.ErrInvalidJSAck, err))
		return
	}
	switch r.Type {
	case "ack":
		b.ack(r.Seq, r.Msgs)
	case "gap":
		b.notice = fmt.Sprintf("the stream missed messages %d to %d of the batch", r.LastSeq, r.Seq-1)
	case "err":
		b.notice = fmt.Sprintf("the stream rejected message %d of the batch: %v", r.Seq, r.Error)
	default: // a PubAck: the batch is over
		switch {
		case r.Error != nil && r.Error.ErrorCode == batchDisabledCode:
			b.endLocked(b.acked, fmt.Errorf("%w: %w", errBatchUnsupported, r.Error))
		case r.Error != nil:
			b.endLocked(b.acked, r.Error)
		case r.Stream == "":
			b.endLocked(b.acked, natsjs.ErrInvalidJSAck)
		case r.Batch == "" && first:
			// A plain PubAck: the server stored the message as an ordinary
			// publish and knows nothing of batches. Claim nothing: the
			// rows are published again, message by message, and the
			// stream drops what it already has.
			b.endLocked(0, fmt.Errorf("%w: the server answered with a plain PubAck (nats-server older than 2.14?)", errBatchUnsupported))
		case r.Batch == "":
			b.endLocked(b.acked, natsjs.ErrInvalidJSAck)
		default:
			b.dup, b.streamSeq = r.Duplicate, r.Seq
			b.acked = max(b.acked, r.Count)
			b.endLocked(r.Count, nil)
		}
	}
}

// ack records a flow ack. The caller holds b.mu.
func (b *fastBatch) ack(seq uint64, msgs uint16) {
	b.acked = max(b.acked, seq)
	if msgs > 0 {
		b.serverFlow = msgs
	}
}
