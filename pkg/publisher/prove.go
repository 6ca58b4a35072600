package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// A batch whose every message was a duplicate ends with a final PubAck
// without a stream sequence, which proves nothing (fastBatch.verified):
// on a replicated NOTIFY the leader also takes a message id it has only
// proposed for a duplicate. It happens after every restart and leader
// change (the rows stored but not yet marked go again), so it must be
// settled in one round trip, not one per row. proveStored asks the stream
// about the batch's last row only, with a probe that the stream can never
// store:
//
//   - a non-replicated NOTIFY proposes nothing: its duplicates are stored
//     messages, and the batch is proven;
//   - on a replicated NOTIFY the probe is the last row's message again, with
//     Nats-Expected-Last-Sequence set to a sequence the stream never has.
//     The leader checks the message id before the expectation: a stored
//     message answers with its sequence (a duplicate PubAck), a proposed one
//     with "duplicate message id is in process", and an absent one fails the
//     expectation before anything is proposed.
//
// The last row stored proves the whole batch stored: what the stream holds
// of this outbox is a prefix of it in id order (a batch stores a prefix of
// itself, and a batch starts only after the one before it is proven,
// round.waitEnded).

// probeExpectedSeq is the Nats-Expected-Last-Sequence of a probe: no
// stream reaches it, so a probe that is not a duplicate is refused.
const probeExpectedSeq = "9223372036854775807"

// JetStream error codes a probe can be refused with.
const (
	dupInProcessCode = 10158 // duplicate message id is in process
	wrongLastSeqCode = 10071 // wrong last sequence
)

// errProposedOnly ends a round whose batch could not be proven because
// NOTIFY's leader has its last row proposed but not stored. The rows go
// again after the usual backoff: by then the leader has stored them, or
// lost its leadership and them with it.
var errProposedOnly = errors.New("NOTIFY's leader has the batch's last row proposed, not stored")

// Outcomes of proveStored, the label of tgnotify_publisher_unverified_batches_total.
const (
	proofStored   = "stored"
	proofProposed = "proposed"
	proofMissing  = "missing"
	proofFailed   = "failed"
)

// proveStored settles batch b, whose final PubAck had no stream sequence,
// by asking NOTIFY whether last, b's last row, is stored. It returns nil
// when it is (the batch is proven), errProposedOnly when the leader has it
// only proposed, an error wrapping errUnverifiedBatch when the stream does
// not have it (the next round publishes the rows one per batch), and any
// other error when the stream did not answer.
func (r *round) proveStored(b *fastBatch, last outbox.Row) error {
	p := r.p
	ctx, cancel := context.WithTimeout(r.finishCtx, p.opts.AckTimeout)
	defer cancel()
	outcome, err := p.probe(ctx, last)
	p.metrics.unverified.WithLabelValues(outcome).Inc()
	switch outcome {
	case proofStored:
		return nil
	case proofMissing:
		return fmt.Errorf("batch %s: its last row %d (key %q) is not in NOTIFY: %w", b.id, last.ID, last.Key, errUnverifiedBatch)
	case proofProposed:
		return fmt.Errorf("batch %s: row %d (key %q): %w", b.id, last.ID, last.Key, errProposedOnly)
	}
	return fmt.Errorf("batch %s ended with every message a duplicate, and asking NOTIFY for its last row failed: %w", b.id, err)
}

// probe asks NOTIFY whether it stores row's message and returns one of
// the proof outcomes; proofFailed comes with the error.
func (p *Publisher) probe(ctx context.Context, row outbox.Row) (string, error) {
	s, err := p.js.Stream(ctx, p.opts.Names.Stream)
	if err != nil {
		return proofFailed, fmt.Errorf("reading NOTIFY's replicas: %w", err)
	}
	if s.CachedInfo().Config.Replicas <= 1 {
		return proofStored, nil
	}
	m := nats.NewMsg(p.opts.Names.Subject(string(row.Channel), row.Recipient))
	m.Header.Set(jetstream.HeaderMsgID, row.Key)
	m.Header.Set(nats.ExpectedLastSeqHdr, probeExpectedSeq)
	reply, err := p.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return proofFailed, fmt.Errorf("probe for row %d: %w", row.ID, err)
	}
	return probeOutcome(reply.Data)
}

// probeOutcome reads the stream's answer to a probe.
func probeOutcome(data []byte) (string, error) {
	var ack struct {
		Stream    string           `json:"stream"`
		Seq       uint64           `json:"seq"`
		Duplicate bool             `json:"duplicate"`
		Error     *natsjs.APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return proofFailed, fmt.Errorf("%w: %v", natsjs.ErrInvalidJSAck, err)
	}
	switch {
	case ack.Error != nil && ack.Error.ErrorCode == dupInProcessCode:
		return proofProposed, nil
	case ack.Error != nil && ack.Error.ErrorCode == wrongLastSeqCode:
		return proofMissing, nil
	case ack.Error != nil:
		return proofFailed, ack.Error
	case ack.Duplicate && ack.Seq > 0:
		return proofStored, nil
	}
	return proofFailed, fmt.Errorf("%w: %s (want a duplicate or an error)", natsjs.ErrInvalidJSAck, strconv.Quote(string(data)))
}
