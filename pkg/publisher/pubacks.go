package publisher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ackResult is the outcome of one publish.
type ackResult struct {
	// done is set once the outcome is known.
	done bool
	// dup is the PubAck's duplicate flag: the stream already had the
	// message id. seq is the stream sequence.
	dup bool
	seq uint64
	// err is the publish error: a JetStream error, no stream, a missing
	// PubAck, a lost connection.
	err error
}

// ackRouter publishes to JetStream with the plain NATS protocol and routes
// the PubAcks back to the batches waiting for them.
//
// A JetStream publish is a core NATS publish with a reply subject; the
// stream answers on that subject with a PubAck (JSON) or an error. nats.go's
// PublishMsgAsync keeps a future per message (an allocation, a random reply
// token in a map under a lock shared with the ack handler, a retry timer);
// at tens of thousands of messages per second that bookkeeping costs as much
// CPU as the outbox's own SQLite work. The router instead gives every
// message the reply subject <inbox>.<batch>.<index>, with one subscription
// on <inbox>.>, and finds the batch in a small map keyed by batch number.
//
// The same subscription receives the replies of fast-ingest batches
// (fastbatch.go), whose reply subjects end in .$FI; they are routed by
// batch id.
//
// A reply for a batch no longer registered (it timed out, or its round
// ended) is ignored: the row is published again and de-duplicated.
type ackRouter struct {
	inbox string
	sub   *nats.Subscription

	mu      sync.Mutex
	next    uint64
	batches map[uint64]*batch
	fast    map[string]*fastBatch
}

// newAckRouter subscribes to a fresh inbox on nc. The subscription is
// registered with the server before any publish on the same connection, and
// nats.go restores it after a reconnect.
func newAckRouter(nc *nats.Conn) (*ackRouter, error) {
	r := &ackRouter{inbox: nc.NewInbox(), batches: make(map[uint64]*batch), fast: make(map[string]*fastBatch)}
	sub, err := nc.Subscribe(r.inbox+".>", r.handle)
	if err != nil {
		return nil, fmt.Errorf("subscribing to PubAcks: %w", err)
	}
	// PubAcks are tiny and handled at once; never drop one as a slow
	// consumer.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("subscribing to PubAcks: %w", err)
	}
	r.sub = sub
	return r, nil
}

// close unsubscribes.
func (r *ackRouter) close() error { return r.sub.Unsubscribe() }

// register numbers b and makes it receive its PubAcks. It returns the reply
// subject prefix of b's messages: <inbox>.<batch>.
func (r *ackRouter) register(b *batch) string {
	r.mu.Lock()
	r.next++
	b.seq = r.next
	r.batches[b.seq] = b
	r.mu.Unlock()
	return r.inbox + "." + strconv.FormatUint(b.seq, 10) + "."
}

// forget stops routing PubAcks to b and returns how many of its published
// messages never got an outcome. After forget, b's results no longer change.
func (r *ackRouter) forget(b *batch) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.batches[b.seq] != b {
		return 0
	}
	delete(r.batches, b.seq)
	return b.published - b.resolved
}

// openFast registers a new fast-ingest batch that asks for a flow ack at
// least every flow messages. Its id is unique: the inbox's own unique token
// and a counter.
func (r *ackRouter) openFast(flow uint16) *fastBatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	token := r.inbox[strings.LastIndexByte(r.inbox, '.')+1:]
	b := newFastBatch(r.inbox, token+"x"+strconv.FormatUint(r.next, 36), flow)
	r.fast[b.id] = b
	return b
}

// forgetFast stops routing replies to b.
func (r *ackRouter) forgetFast(b *fastBatch) {
	r.mu.Lock()
	if r.fast[b.id] == b {
		delete(r.fast, b.id)
	}
	r.mu.Unlock()
}

// handle is the subscription's handler: it parses the reply subject and the
// PubAck and records the outcome.
func (r *ackRouter) handle(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, r.inbox+".")
	if !ok {
		return
	}
	if strings.HasSuffix(rest, fastSuffix) {
		id, _, _ := strings.Cut(rest, ".")
		r.mu.Lock()
		b := r.fast[id]
		r.mu.Unlock()
		if b != nil {
			b.handle(m)
		}
		return
	}
	seqText, idxText, ok := strings.Cut(rest, ".")
	if !ok {
		return
	}
	seq, err1 := strconv.ParseUint(seqText, 10, 64)
	idx, err2 := strconv.Atoi(idxText)
	if err1 != nil || err2 != nil {
		return
	}
	res := parsePubAck(m)
	r.mu.Lock()
	b := r.batches[seq]
	if b == nil || idx < 0 || idx >= len(b.results) || b.results[idx].done {
		r.mu.Unlock()
		return
	}
	res.done = true
	b.results[idx] = res
	b.resolved++
	r.mu.Unlock()
	b.settle(1)
}

// pubAckReply is the JSON a stream answers a publish with.
type pubAckReply struct {
	Error     *natsjs.APIError `json:"error"`
	Stream    string           `json:"stream"`
	Sequence  uint64           `json:"seq"`
	Duplicate bool             `json:"duplicate"`
}

// parsePubAck turns a reply into an outcome. An empty reply with status 503
// means no stream listens on the subject.
func parsePubAck(m *nats.Msg) ackResult {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return ackResult{err: natsjs.ErrNoStreamResponse}
		}
		return ackResult{err: natsjs.ErrInvalidJSAck}
	}
	if seq, dup, ok := scanPubAck(m.Data); ok {
		return ackResult{dup: dup, seq: seq}
	}
	var pa pubAckReply
	if err := json.Unmarshal(m.Data, &pa); err != nil {
		return ackResult{err: fmt.Errorf("%w: %v", natsjs.ErrInvalidJSAck, err)}
	}
	switch {
	case pa.Error != nil:
		return ackResult{err: pa.Error}
	case pa.Stream == "":
		return ackResult{err: natsjs.ErrInvalidJSAck}
	}
	return ackResult{dup: pa.Duplicate, seq: pa.Sequence}
}

// PubAck shapes the server writes (nats-server builds them from a template,
// not with a JSON encoder): {"stream":"S","seq":N} or with ,"domain":"D"
// before seq, and ,"duplicate": true after it.
var (
	pubAckStart = []byte(`{"stream":"`)
	pubAckSeq   = []byte(`"seq":`)
)

// scanPubAck reads a successful PubAck without a JSON decoder, which costs a
// microsecond per message. It reports false for anything but the shapes
// above (errors, batch or counter acks, other spacing), which parsePubAck
// then decodes properly. Stream and domain names are written with %q, so an
// unescaped "seq": can only be the field itself.
func scanPubAck(b []byte) (seq uint64, dup, ok bool) {
	if !bytes.HasPrefix(b, pubAckStart) {
		return 0, false, false
	}
	i := bytes.Index(b, pubAckSeq)
	if i < 0 {
		return 0, false, false
	}
	j := i + len(pubAckSeq)
	k := j
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		k++
	}
	if k == j || k-j > 20 {
		return 0, false, false
	}
	seq, err := strconv.ParseUint(string(b[j:k]), 10, 64)
	if err != nil {
		return 0, false, false
	}
	switch string(b[k:]) {
	case "}":
		return seq, false, true
	case `,"duplicate": true}`, `,"duplicate":true}`:
		return seq, true, true
	}
	return 0, false, false
}
