package publisher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// Atomic batches (ADR-50) are the publisher's transport for a run of new
// rows on a NOTIFY with one replica. nats-server 2.15.2 with
// sync_interval: always fsyncs each message of a fast-ingest batch on its
// own, but an atomic batch once, when it is committed (after staging it in
// a store of its own, which costs a directory, a few files and fsyncs): a
// run of minAtomicRows rows or more is stored for less than the same rows
// in a fast batch, and many times less for hundreds. An atomic batch is
// refused whole when it holds a message id the stream has already seen, so
// the publisher uses one only for rows that nobody can have published
// before (round.freshAfter); every other row, and every row after a
// failure, goes in fast-ingest batches, which de-duplicate each message.
const (
	// minAtomicRows is the fewest rows published as an atomic batch:
	// below it the batch's staging costs more fsyncs than it saves.
	minAtomicRows = 16
	// maxAtomicRows bounds one atomic batch (the server takes up to 1000
	// unless its max_batch_size says fewer): a read of BatchSize rows goes
	// in batches of at most this many.
	maxAtomicRows = 512
	// atomicRecheckInterval is how often, at most, the drain loop reads
	// NOTIFY's configuration again to learn whether it takes atomic
	// batches, after it could not read it or after NOTIFY refused one.
	atomicRecheckInterval = time.Minute
	// noFreshRows is round.freshAfter before the round has caught up.
	noFreshRows = math.MaxInt64
)

// atomicRows reports whether rows (the rest of one read) go as atomic
// batches: the publisher may use them (not Options.NoAtomicBatches, and NOTIFY
// has one replica and allow_atomic), there are enough of them, and they
// are fresh, newer than every row read before the round caught up.
func (r *round) atomicRows(rows []outbox.Row) bool {
	return len(rows) >= minAtomicRows && r.p.atomicOK.Load() && rows[0].ID > r.freshAfter.Load()
}

// publishAtomic publishes rows as atomic batches of at most maxAtomicRows,
// one after another, and hands each to the ack stage once committed: the
// commit's PubAck says that the stream stored every message of the batch,
// none of them a duplicate, so nothing is left to prove. A batch that
// fails fails the round; it stored nothing, or (its PubAck lost) all of
// it, and the next round publishes its rows again in fast-ingest batches,
// which de-duplicate them. It reports false when the stage must stop:
// after a failure, or once the round stops reading (a shutdown), as the
// fast path does after the read it is sending.
func (r *round) publishAtomic(rows []outbox.Row, out chan<- segment) bool {
	for len(rows) > 0 {
		n := min(len(rows), maxAtomicRows)
		if r.stopped() {
			return false
		}
		if err := r.commitAtomic(rows[:n]); err != nil {
			r.p.metrics.publishErrors.Add(float64(n))
			r.fail(err)
			return false
		}
		r.p.metrics.atomicBatches.Inc()
		out <- segment{rows: rows[:n], atomic: true}
		rows = rows[n:]
	}
	return r.readCtx.Err() == nil
}

// commitAtomic publishes rows as one atomic batch and waits for its
// PubAck, at most AckTimeout, and not past a lost connection or the
// shutdown bound.
func (r *round) commitAtomic(rows []outbox.Row) error {
	p := r.p
	if r.amsg == nil {
		r.amsg = newMessage()
	}
	m := r.amsg
	defer jetstream.Unbatch(&m.msg)
	bp, err := jetstreamext.NewBatchPublisher(p.js, jetstreamext.BatchFlowControl{})
	if err != nil {
		return fmt.Errorf("starting an atomic batch: %w", err)
	}
	last := len(rows) - 1
	for i, row := range rows[:last] {
		if err := r.publishable(row); err != nil {
			_ = bp.Discard()
			return err
		}
		if err := bp.AddMsg(m.set(row, p.opts.Names.Subject(string(row.Channel), row.Recipient), "")); err != nil {
			_ = bp.Discard()
			return fmt.Errorf("publishing row %d (key %q) in an atomic batch: %w", row.ID, row.Key, err)
		}
		// The client copied the body into its write buffer.
		rows[i].Payload = nil
	}
	row := rows[last]
	if err := r.publishable(row); err != nil {
		_ = bp.Discard()
		return err
	}
	ctx, cancel := context.WithTimeout(r.finishCtx, p.opts.AckTimeout)
	defer cancel()
	lostCtx, cancelLost := context.WithCancelCause(ctx)
	defer cancelLost(nil)
	go func() {
		select {
		case <-r.lost:
			cancelLost(errConnectionLost)
		case <-lostCtx.Done():
		}
	}()
	ack, err := bp.CommitMsg(lostCtx, m.set(row, p.opts.Names.Subject(string(row.Channel), row.Recipient), ""))
	rows[last].Payload = nil
	if err != nil {
		return r.atomicFailed(lostCtx, rows, err)
	}
	if ack.BatchSize != uint64(len(rows)) || ack.Sequence < uint64(len(rows)) {
		return fmt.Errorf("atomic batch of rows %d–%d: PubAck for %d messages at sequence %d, want %d", rows[0].ID, row.ID, ack.BatchSize, ack.Sequence, len(rows))
	}
	return nil
}

// atomicFailed explains why the atomic batch of rows failed. When the
// stream refused it (it no longer takes atomic batches, the batch is too
// large for the server, or it holds a duplicate, which means that another
// publisher published these rows), the publisher uses fast-ingest batches
// until the drain loop reads NOTIFY's configuration again.
func (r *round) atomicFailed(ctx context.Context, rows []outbox.Row, err error) error {
	p := r.p
	what := fmt.Sprintf("atomic batch of rows %d–%d", rows[0].ID, rows[len(rows)-1].ID)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errConnectionLost):
		return errConnectionLost
	case errors.Is(err, context.DeadlineExceeded) && r.finishCtx.Err() == nil:
		return fmt.Errorf("%s: no PubAck within %v", what, p.opts.AckTimeout)
	case r.finishCtx.Err() != nil:
		return errShutdownTimeout
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%s: %w", what, natsjs.ErrNoStreamResponse)
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) && p.atomicOK.CompareAndSwap(true, false) {
		p.atomicRefused.Store(true)
		p.log.Warn("NOTIFY refused an atomic batch; publishing in fast-ingest batches until its configuration is read again",
			"stream", p.opts.Names.Stream, "err", err, "retry_in", atomicRecheckInterval)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// learnAtomic reads whether NOTIFY takes atomic batches from this
// publisher: it has one replica (a replicated stream already syncs a
// fast-ingest batch once, when its Raft log is flushed, and its leader
// could change under a batch) and allow_atomic. It reads once, before the
// first round, and again only after it could not or after NOTIFY refused
// an atomic batch, at most every atomicRecheckInterval: a read waits up
// to a second, which must not hold back the rounds that follow a stream
// leader change. Until it can read, atomic batches stay off.
func (p *Publisher) learnAtomic(ctx context.Context) {
	if p.opts.NoAtomicBatches || (p.atomicKnown && !p.atomicRefused.Load()) {
		return
	}
	now := p.opts.Now()
	if !p.atomicChecked.IsZero() && now.Sub(p.atomicChecked) < atomicRecheckInterval {
		return
	}
	p.atomicChecked = now
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := p.js.Stream(lctx, p.opts.Names.Stream)
	if err != nil {
		p.atomicOK.Store(false)
		p.atomicKnown = false
		p.log.Debug("cannot read NOTIFY's configuration; publishing in fast-ingest batches only", "stream", p.opts.Names.Stream, "err", err)
		return
	}
	cfg := s.CachedInfo().Config
	ok := cfg.Replicas <= 1 && cfg.AllowAtomicPublish
	p.atomicKnown = true
	p.atomicRefused.Store(false)
	if p.atomicOK.Swap(ok) != ok {
		p.log.Info("read NOTIFY's configuration", "stream", p.opts.Names.Stream, "atomic_batches", ok,
			"replicas", cfg.Replicas, "allow_atomic", cfg.AllowAtomicPublish)
	}
}
