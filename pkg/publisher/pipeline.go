package publisher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// busyRetry is the pause before a statement that failed with SQLITE_BUSY is
// tried again (busy_timeout has already waited inside SQLite).
const busyRetry = 10 * time.Millisecond

// batch is a slice of rows on its way through the pipeline.
type batch struct {
	rows []outbox.Row
	// seq numbers the batch for the ack router.
	seq uint64
	// results[i] is the outcome of rows[i]'s publish, written by the ack
	// router under its lock until the batch is forgotten; resolved counts
	// the outcomes written.
	results  []ackResult
	resolved int
	// published counts the rows sent: rows[:published]. err says why
	// rows[published] was not, when it was not.
	published int
	err       error
	// sentAt is when the last message was sent; the PubAck deadline runs
	// from it.
	sentAt time.Time
	// pending counts outcomes still expected; done closes when it reaches
	// zero.
	pending atomic.Int64
	done    chan struct{}
}

func newBatch(rows []outbox.Row) *batch {
	b := &batch{
		rows:    rows,
		results: make([]ackResult, len(rows)),
		done:    make(chan struct{}),
	}
	b.pending.Store(int64(len(rows)))
	return b
}

// settle accounts for n outcomes (or rows given up on).
func (b *batch) settle(n int) {
	if n > 0 && b.pending.Add(-int64(n)) == 0 {
		close(b.done)
	}
}

// roundResult is what a round leaves behind.
type roundResult struct {
	// cursor is the id up to which every row is marked published: the next
	// round reads after it.
	cursor int64
	// marked counts rows this round marked published.
	marked int64
	// err is the first failure that stopped the round; nil when it stopped
	// because ctx ended.
	err error
	// fatal is an error Run must return (the AfterAck hook failed).
	fatal error
	// watcherBroken tells the caller to replace the commit watcher.
	watcherBroken bool
}

// round is one run of the pipeline, from a cursor to the first failure or
// the end of ctx. Its stages run in their own goroutines, connected by
// bounded channels:
//
//	read --rows--> publish --batches--> ack --acknowledged rows--> mark
//
// A failure (fail) halts reading and publishing; the ack stage then lets
// every in-flight publish settle and forwards only the acknowledged prefix;
// the mark stage marks it.
type round struct {
	p       *Publisher
	watcher *outbox.CommitWatcher
	start   int64
	// batched selects the transport: fast-ingest batches (pipeline_batch.go),
	// or message by message with a PubAck each (the fallback for a stream
	// that does not accept batches).
	batched bool
	// msg is the publish stage's reusable message (batches), amsg the one
	// for atomic batches.
	msg, amsg *message
	// freshAfter is the last id read when the round first caught up
	// (noFreshRows until then): every row after it was committed after
	// every row this publisher, or one before it, read or published, so
	// it may go in an atomic batch (atomicbatch.go). The read stage sets
	// it, once.
	freshAfter atomic.Int64
	// onFirstMark, when set, is called once the round has marked its first
	// rows, on the goroutine that called Publisher.round.
	onFirstMark func()

	// readCtx ends when the round fails or ctx ends: it bounds reading and
	// waiting for commits.
	readCtx    context.Context
	cancelRead context.CancelFunc
	// finishCtx outlives ctx by up to ShutdownTimeout: it bounds waiting for
	// PubAcks and the final marking.
	finishCtx context.Context

	stop     chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	err      error
	fatal    error
	broken   bool

	// connLost receives the connection leaving CONNECTED; lost closes when
	// either stage sees that.
	connLost chan nats.Status
	lost     chan struct{}
	lostOnce sync.Once
}

// connectionLost fails the round because the connection left CONNECTED.
func (r *round) connectionLost(s nats.Status) {
	r.lostOnce.Do(func() {
		close(r.lost)
		r.fail(fmt.Errorf("%w (%s)", errConnectionLost, s))
	})
}

// fail records the round's first error and halts reading and publishing.
func (r *round) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.stopOnce.Do(func() {
		close(r.stop)
		r.cancelRead()
	})
}

func (r *round) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// round runs the pipeline once from cursor and returns when every stage has
// finished.
func (p *Publisher) round(ctx context.Context, watcher *outbox.CommitWatcher, cursor int64, batched bool, onFirstMark func()) roundResult {
	r := &round{p: p, watcher: watcher, start: cursor, batched: batched, onFirstMark: onFirstMark,
		stop: make(chan struct{}), lost: make(chan struct{})}
	r.freshAfter.Store(noFreshRows)
	r.readCtx, r.cancelRead = context.WithCancel(ctx)
	defer r.cancelRead()
	finishCtx, cancelFinish := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFinish()
	r.finishCtx = finishCtx
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(p.opts.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			cancelFinish()
		}
	}()

	// Register for status changes before checking the status, so that a
	// disconnect between the two is not missed.
	r.connLost = p.nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer p.nc.RemoveStatusListener(r.connLost)
	if !p.nc.IsConnected() {
		return roundResult{cursor: cursor, err: errConnectionLost}
	}
	go func() {
		select {
		case s, ok := <-r.connLost:
			if ok { // closed when the listener is removed at the end
				r.connectionLost(s)
			}
		case <-done:
		}
	}()

	rowsCh := make(chan []outbox.Row, 1)
	acked := newAckedQueue(p.opts.markQueue())
	var wg sync.WaitGroup
	wg.Go(func() { r.read(rowsCh) })
	if r.batched {
		segments := make(chan segment, p.opts.inFlightBatches()+1)
		wg.Go(func() { r.publishBatches(rowsCh, segments) })
		wg.Go(func() { r.ackBatches(segments, acked) })
	} else {
		batches := make(chan *batch, p.opts.inFlightBatches())
		wg.Go(func() { r.publish(rowsCh, batches) })
		wg.Go(func() { r.ack(batches, acked) })
	}
	marked, last := r.mark(acked)
	wg.Wait()

	res := roundResult{cursor: cursor, marked: marked, watcherBroken: r.broken}
	if marked > 0 {
		res.cursor = last
	}
	r.mu.Lock()
	res.err, res.fatal = r.err, r.fatal
	r.mu.Unlock()
	if res.fatal == nil && ctx.Err() != nil &&
		(errors.Is(res.err, context.Canceled) || errors.Is(res.err, errShutdownTimeout)) {
		res.err = nil // a consequence of the shutdown, not a failure
	}
	return res
}

// read is the first stage: it reads batches of pending rows after the
// cursor, in id order, and waits for a commit when caught up. Its cursor is
// the last id read, so reading runs ahead of marking.
func (r *round) read(out chan<- []outbox.Row) {
	defer close(out)
	p := r.p
	ctx := r.readCtx
	cursor := r.start
	full := false
	// sentRows is set while rows went out since the last caught-up marker.
	sentRows := false
	for {
		// Poll data_version before a query that may come back empty, so
		// that a commit racing with the query is noticed by the wait below.
		// After a full batch the next query is not expected to be empty and
		// the poll is skipped: a stale baseline can only cause one extra
		// query, never a missed commit.
		if !full {
			if _, err := r.watcher.Changed(ctx); err != nil {
				if ctx.Err() == nil {
					r.broken = true
					r.fail(fmt.Errorf("polling for commits: %w", err))
				}
				return
			}
		}
		rows, err := p.reader.Pending(ctx, cursor, p.opts.BatchSize)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && outbox.IsBusy(err):
			if !sleepCtx(ctx, busyRetry) {
				return
			}
			continue
		case err != nil:
			r.fail(err)
			return
		}
		full = len(rows) == p.opts.BatchSize
		if len(rows) == 0 {
			if r.freshAfter.Load() == noFreshRows {
				// Nothing is pending after cursor: every row read or
				// published before, by this round, an earlier one or
				// another publisher, has an id up to cursor.
				r.freshAfter.Store(cursor)
			}
			if sentRows {
				// Caught up: an empty slice tells the publish stage, which
				// ends its open batch.
				select {
				case out <- nil:
				case <-ctx.Done():
					return
				}
				sentRows = false
			}
			if !r.batched && p.batchRetryDue() {
				r.fail(errRetryBatches)
				return
			}
			if _, err := r.watcher.Wait(ctx, p.opts.PollInterval, p.opts.FallbackInterval); err != nil {
				if ctx.Err() == nil {
					r.broken = true
					r.fail(fmt.Errorf("waiting for commits: %w", err))
				}
				return
			}
			continue
		}
		p.metrics.batchSize.Observe(float64(len(rows)))
		select {
		case out <- rows:
		case <-ctx.Done():
			return
		}
		sentRows = true
		cursor = rows[len(rows)-1].ID
	}
}

// publish is the second stage: it publishes every row of each batch
// asynchronously and hands the batch to the ack stage. It stops before the
// next row once the round has failed or the connection has left CONNECTED,
// and after the current batch once ctx ends.
func (r *round) publish(in <-chan []outbox.Row, out chan<- *batch) {
	defer close(out)
	p := r.p
	for rows := range in {
		if len(rows) == 0 {
			continue // the caught-up marker is for batches
		}
		b := newBatch(rows)
		reply := p.acks.register(b)
		for i, row := range rows {
			if b.err = r.publishable(row); b.err != nil || r.stopped() {
				break
			}
			msg := jetstream.Msg(p.opts.Names.Subject(string(row.Channel), row.Recipient), row.Key, row.CreatedAt, notify.PayloadContentType, row.Payload)
			msg.Reply = reply + strconv.Itoa(i)
			if err := p.nc.PublishMsg(msg); err != nil {
				b.err = fmt.Errorf("publishing row %d (key %q): %w", row.ID, row.Key, err)
				break
			}
			// The client copied the body into its write buffer: release
			// the payload now rather than when the row is marked, which
			// keeps the heap (and the garbage collector's work) small.
			rows[i].Payload = nil
			b.published++
		}
		b.sentAt = time.Now()
		b.settle(len(rows) - b.published)
		if b.err != nil {
			p.metrics.publishErrors.Inc()
			r.fail(b.err)
		}
		if b.published > 0 {
			out <- b // the ack stage drains this channel until it closes
		} else {
			p.acks.forget(b)
		}
		if b.published < len(rows) || r.readCtx.Err() != nil {
			return
		}
	}
}

// publishable reports why row must not be published now: the connection
// left CONNECTED since the round started (a publish now could reach the
// server on a new connection, ahead of earlier rows lost with the old one),
// or the row's channel is unknown.
func (r *round) publishable(row outbox.Row) error {
	select {
	case <-r.lost:
		return errConnectionLost
	case s, ok := <-r.connLost:
		if ok {
			// Seen here first: stop before publishing, not after.
			r.connectionLost(s)
			return errConnectionLost
		}
	default:
	}
	if !row.Channel.Known() {
		return fmt.Errorf("row %d has channel %q, which this publisher does not know", row.ID, row.Channel)
	}
	if !jetstream.ValidToken(row.Recipient) {
		return fmt.Errorf("row %d has recipient %q, which is not a subject token", row.ID, row.Recipient)
	}
	return nil
}

// settled is the outcome of one publish after the round failed.
type settled struct {
	row outbox.Row
	ok  bool
}

// ack is the third stage: it waits for the outcomes of each batch in publish
// order and forwards acknowledged rows to the mark stage, up to the first
// failure. After that it keeps waiting, so in-flight publishes settle before
// the next round republishes them, but forwards nothing more.
func (r *round) ack(in <-chan *batch, out *ackedQueue) {
	defer out.close()
	p := r.p
	failed := false
	var after []settled // outcomes from the first failure on
	for b := range in {
		r.await(b)
		r.p.acks.forget(b)
		okCount := 0
		for i, row := range b.rows[:b.published] {
			res := b.results[i]
			if res.err == nil {
				r.noteAck(row, res)
				if failed {
					after = append(after, settled{row, true})
				} else {
					okCount++
				}
				continue
			}
			p.metrics.publishErrors.Inc()
			if !failed {
				failed = true
				r.fail(fmt.Errorf("publishing row %d (key %q): %w", row.ID, row.Key, res.err))
			}
			after = append(after, settled{row, false})
		}
		if okCount > 0 {
			now := p.opts.Now()
			for _, row := range b.rows[:okCount] {
				p.metrics.latency.Observe(now.Sub(row.CreatedAt).Seconds())
			}
			out.put(b.rows[:okCount])
		}
		if b.published < len(b.rows) {
			// The rest of this batch was never published: nothing after it
			// may be forwarded either.
			failed = true
		}
	}
	r.noteAtRisk(after)
}

// await waits until every published message of b has an outcome, the PubAck
// deadline (AckTimeout after the batch was sent) passes, the connection is
// lost, or the shutdown bound passes. Messages still without an outcome then
// get the corresponding error; a late PubAck for them is ignored.
func (r *round) await(b *batch) {
	select {
	case <-b.done:
		return
	default:
	}
	timer := time.NewTimer(time.Until(b.sentAt.Add(r.p.opts.AckTimeout)))
	defer timer.Stop()
	var cause error
	select {
	case <-b.done:
		return
	case <-timer.C:
		cause = fmt.Errorf("no PubAck within %v: %w", r.p.opts.AckTimeout, natsjs.ErrAsyncPublishTimeout)
	case <-r.lost:
		cause = errConnectionLost
	case <-r.finishCtx.Done():
		cause = errShutdownTimeout
	}
	b.settle(r.p.acks.forget(b))
	for i := range b.results[:b.published] {
		if !b.results[i].done {
			b.results[i].err = cause
		}
	}
}

// noteAck counts a duplicate PubAck, and a reorder when a row at risk was
// stored for the first time after a later row of its chat.
func (r *round) noteAck(row outbox.Row, res ackResult) {
	p := r.p
	if res.dup {
		p.metrics.duplicates.Inc()
	}
	if _, risky := p.atRisk[row.ID]; risky {
		delete(p.atRisk, row.ID)
		if !res.dup {
			p.metrics.reordered.Inc()
			p.log.Warn("notification stored after a later notification of the same recipient",
				"row", row.ID, "key", row.Key, "channel", string(row.Channel), "recipient", row.Recipient, "stream_seq", res.seq)
		}
	}
}

// noteAtRisk records the failed publishes that a later row of the same
// recipient (the same subject) overtook: the later row is stored, the failed
// one will be published again and, unless the stream turns out to have it
// after all (a duplicate), will be stored after it.
func (r *round) noteAtRisk(after []settled) {
	type recipient struct{ channel, token string }
	later := make(map[recipient]bool)
	for i := len(after) - 1; i >= 0; i-- {
		s := after[i]
		to := recipient{string(s.row.Channel), s.row.Recipient}
		switch {
		case s.ok:
			later[to] = true
		case later[to]:
			r.p.atRisk[s.row.ID] = struct{}{}
		}
	}
}

// mark is the last stage: it marks acknowledged rows published, merging
// everything queued into one transaction. It returns how many rows it marked
// and the last id of the marked prefix.
func (r *round) mark(in *ackedQueue) (marked, last int64) {
	p := r.p
	broken := false
	var chunks [][]outbox.Row
	for {
		var ok bool
		if chunks, ok = in.take(chunks); !ok {
			break
		}
		if broken {
			continue // drain: nothing is marked after a failure
		}
		if err := r.afterAck(chunks); err != nil {
			broken = true
			err = fmt.Errorf("after-ack hook: %w", err)
			r.mu.Lock()
			r.fatal = err
			r.mu.Unlock()
			r.fail(err)
			continue
		}
		// The chunks are consecutive pieces of the acknowledged prefix of
		// the round, which starts after the last row marked: every row up
		// to the last id of the last chunk is published (no pending row
		// lies between two chunks, as each read continued from the previous
		// one's last id, and ids commit in order). One marking covers them.
		n := countRows(chunks)
		upto := lastOf(chunks).ID
		if err := r.markUpTo(upto); err != nil {
			broken = true
			r.fail(err)
			continue
		}
		if marked == 0 && r.onFirstMark != nil {
			r.onFirstMark()
		}
		marked += int64(n)
		last = upto
		p.metrics.published.Add(float64(n))
	}
	return marked, last
}

// afterAck calls the AfterAck hook, when set, with each chunk in order
// (one call per chunk: joining them would copy every row), and returns the
// first error.
func (r *round) afterAck(chunks [][]outbox.Row) error {
	if r.p.opts.AfterAck == nil {
		return nil
	}
	for _, rows := range chunks {
		if err := r.p.opts.AfterAck(rows); err != nil {
			return err
		}
	}
	return nil
}

// markUpTo marks every row up to id upto published in one transaction,
// retrying while SQLite is busy, until finishCtx ends.
func (r *round) markUpTo(upto int64) error {
	p := r.p
	for {
		err := p.reader.MarkPublished(r.finishCtx, p.opts.Now(), upto)
		if err == nil {
			return nil
		}
		if !outbox.IsBusy(err) || !sleepCtx(r.finishCtx, busyRetry) {
			return fmt.Errorf("marking rows up to %d published: %w", upto, err)
		}
	}
}

// sleepCtx waits d and reports true, or reports false as soon as ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
