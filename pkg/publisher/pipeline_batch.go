package publisher

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// segment is a run of rows published in one fast batch, handed from the
// publish stage to the ack stage: rows[i] has batch sequence first+i. A
// segment with eob set carries no rows: it says the batch was ended (after
// the segments before it).
type segment struct {
	fb    *fastBatch
	rows  []outbox.Row
	first uint64
	eob   bool
	// atomic is set on the rows of a committed atomic batch
	// (atomicbatch.go): fb is nil, and they are stored.
	atomic bool
}

// fastFlow is the flow a batch asks for: at most maxFastFlow, and small
// enough that fastOutstanding intervals fit in MaxInFlight.
func (o Options) fastFlow() uint16 {
	return uint16(max(1, min(maxFastFlow, o.MaxInFlight/fastOutstanding)))
}

// publishBatches is the publish stage of the batch transport. It sends
// the rows in fast-ingest batches (fastbatch.go), one batch at a time: a
// batch stays open while rows keep coming, and ends when the rows run out:
// with its last row when a read came back short and nothing else waits
// (the commit operation, so that a lone row is acknowledged in one round
// trip), or with an EOB when the read stage reports that it caught up (an
// empty slice), when the round stops, or when its input closes. A new batch
// starts only after the previous one has ended and its final PubAck has
// arrived, and the round fails if that PubAck says the stream stored less
// than was sent. So at any time at most one batch of this publisher is
// open, and every batch starts after the previous one is wholly stored: the
// rows in the stream are a prefix of what was read, in id order.
func (r *round) publishBatches(in <-chan []outbox.Row, out chan<- segment) {
	defer close(out)
	p := r.p
	var open, prev *fastBatch
	end := func() {
		if open == nil {
			return
		}
		b := open
		open = nil
		if b.lastSent() == 0 {
			p.acks.forgetFast(b) // nothing was sent: the stream never saw it
			return
		}
		prev = b
		if r.lostConnection() {
			return // nothing can be sent; the ack stage settles the batch
		}
		if err := p.nc.PublishMsg(eobMsg(b)); err != nil {
			r.fail(fmt.Errorf("ending batch %s: %w", b.id, err))
			return
		}
		b.markEOB(true)
		out <- segment{fb: b, eob: true}
	}
	defer end()
	// send publishes rows in the open batch (opening one after the previous
	// one has ended), ending it with the last row when commit is set. It
	// reports false when the stage must stop.
	send := func(rows []outbox.Row, commit bool) bool {
		if open == nil {
			if prev != nil {
				if err := r.waitEnded(prev); err != nil {
					r.fail(err)
					return false
				}
			}
			if r.stopped() {
				return false
			}
			open, prev = p.acks.openFast(p.opts.fastFlow()), nil
		}
		b := open
		first := b.lastSent() + 1
		n, err := r.sendRows(b, rows, commit)
		if n > 0 {
			out <- segment{fb: b, rows: rows[:n], first: first} // the ack stage drains this channel until it closes
		}
		if n == len(rows) && commit {
			open, prev = nil, b
			out <- segment{fb: b, eob: true}
		}
		if err != nil {
			p.metrics.publishErrors.Inc()
			r.fail(err)
			return false
		}
		return n == len(rows) && r.readCtx.Err() == nil // else the deferred end commits the batch
	}
	for rows := range in {
		if len(rows) == 0 {
			end() // caught up: end the batch, so that its last rows are acknowledged now
			continue
		}
		// Rows of a batch that ended unverified go one per batch, each
		// answered for itself (fastBatch.verified).
		for len(rows) > 0 && rows[0].ID <= p.verifyUpto.Load() {
			end()
			if !send(rows[:1], true) {
				return
			}
			rows = rows[1:]
		}
		if len(rows) == 0 {
			continue
		}
		if r.atomicRows(rows) {
			// The open fast batch ends first, and the atomic batch waits
			// until it is wholly stored, as the next fast batch would.
			end()
			if prev != nil {
				if err := r.waitEnded(prev); err != nil {
					r.fail(err)
					return
				}
				prev = nil
			}
			if !r.publishAtomic(rows, out) {
				return
			}
			continue
		}
		// A short read with nothing queued behind it: the reader has caught
		// up, so the last row ends the batch. So does a batch that reached
		// maxBatchRows: its rows are marked only once it ends.
		commit := len(rows) < p.opts.BatchSize && len(in) == 0
		if open != nil && open.lastSent()+uint64(len(rows)) >= p.opts.maxBatchRows() {
			commit = true
		}
		if !send(rows, commit) {
			return
		}
	}
}

// maxBatchRows bounds a fast batch, to sixteen reads: its rows are marked
// published only once its final PubAck arrives (ackBatches), so a batch
// that stayed open through a long backlog would leave them all to be
// published again after a crash. Ending one costs a round trip before the
// next starts.
func (o Options) maxBatchRows() uint64 { return 16 * uint64(o.BatchSize) }

// message is one reusable notification message: nats.Conn.PublishMsg has
// copied a message into its buffer when it returns, so the publish stage
// fills the same message, header map and header values for every row
// instead of allocating them per row (jetstream.Msg builds the same
// message).
type message struct {
	msg  nats.Msg
	vals [4]string
}

func newMessage() *message {
	m := &message{}
	m.msg.Header = nats.Header{
		jetstream.HeaderMsgID:       m.vals[0:1:1],
		jetstream.HeaderKey:         m.vals[1:2:2],
		jetstream.HeaderCreatedAt:   m.vals[2:3:3],
		jetstream.HeaderContentType: m.vals[3:4:4],
	}
	m.vals[3] = notify.PayloadContentType
	return m
}

// set fills the message for row, to subject, with reply subject reply.
func (m *message) set(row outbox.Row, subject, reply string) *nats.Msg {
	m.vals[0], m.vals[1], m.vals[2] = row.Key, row.Key, row.CreatedAt.UTC().Format(time.RFC3339Nano)
	m.msg.Subject, m.msg.Reply, m.msg.Data = subject, reply, row.Payload
	return &m.msg
}

// sendRows publishes rows in batch b and returns how many it sent, and why
// it stopped early. It stops without an error when the round stops. With
// commit, the last row ends the batch.
func (r *round) sendRows(b *fastBatch, rows []outbox.Row, commit bool) (int, error) {
	p := r.p
	if r.msg == nil {
		r.msg = newMessage()
	}
	for i, row := range rows {
		if err := r.publishable(row); err != nil {
			return i, err
		}
		if err := r.waitRoom(b); err != nil {
			return i, err
		}
		if r.stopped() {
			return i, nil
		}
		if b.hasEnded() {
			_, _, count, err := b.state()
			return i, endedEarly(b, count, err)
		}
		seq := b.lastSent() + 1
		op := fastOpAppend
		switch {
		case commit && i == len(rows)-1:
			op = fastOpCommit
		case seq == 1:
			op = fastOpStart
		}
		subject := p.opts.Names.Subject(string(row.Channel), row.Recipient)
		if err := p.nc.PublishMsg(r.msg.set(row, subject, b.reply(seq, op))); err != nil {
			return i, fmt.Errorf("publishing row %d (key %q): %w", row.ID, row.Key, err)
		}
		b.markSent(seq, subject)
		if op == fastOpCommit {
			b.markEOB(false)
		}
		// The client copied the body into its write buffer: release the
		// payload now rather than when the row is marked.
		rows[i].Payload = nil
	}
	return len(rows), nil
}

// waitRoom waits until batch b may take one more message: until the flow
// acks leave fewer than fastOutstanding intervals unacknowledged. While it
// waits it pings the batch on a pingSchedule (a flow ack may have been
// lost, or the leader that had the batch), and it gives up after
// AckTimeout without an ack, when the batch ends, or when the round stops.
func (r *round) waitRoom(b *fastBatch) error {
	if !b.full() {
		return nil
	}
	timeout := r.p.opts.AckTimeout
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	pings := newPingSchedule(timeout)
	ping := time.NewTimer(pings.after())
	defer ping.Stop()
	acked, _, _, _ := b.state()
	for b.full() {
		select {
		case <-b.room:
			if now, _, _, _ := b.state(); now > acked {
				acked = now
				deadline.Reset(timeout)
				pings.restart()
				ping.Reset(pings.after())
			}
		case <-b.done:
			return nil // the ack stage reports how it ended
		case <-ping.C:
			r.ping(b)
			ping.Reset(pings.after())
		case <-deadline.C:
			return fmt.Errorf("batch %s: no flow ack within %v (%d messages sent, %d acknowledged)", b.id, timeout, b.lastSent(), acked)
		case <-r.stop:
			return nil
		case <-r.lost:
			return errConnectionLost
		}
	}
	return nil
}

// waitEnded waits until batch b has ended (its final PubAck arrived) and
// checks that the stream stored all of it, and when the final PubAck does
// not prove that (every message a duplicate), until the ack stage has
// proven it (round.proveStored): the next batch must not be stored while
// rows of this one might still be lost with a leader. It returns nil
// without a check when the round stops first: nothing more is published
// then.
func (r *round) waitEnded(b *fastBatch) error {
	select {
	case <-b.done:
	case <-r.stop:
		return nil
	}
	_, _, count, err := b.state()
	if err != nil || count < b.lastSent() {
		return endedEarly(b, count, err)
	}
	if b.verified() {
		return nil
	}
	select {
	case <-b.proof:
		if b.isProven() {
			return nil
		}
		return fmt.Errorf("batch %s (%d messages): %w", b.id, count, errUnverifiedBatch)
	case <-r.stop:
		return nil
	}
}

// eobMsg is the EOB message of batch b: it ends the batch after its last
// message sent.
func eobMsg(b *fastBatch) *nats.Msg {
	m := nats.NewMsg(b.firstSubject())
	m.Reply = b.reply(b.lastSent()+1, fastOpEOB)
	return m
}

// ping asks the stream to send batch b's latest flow ack again. Its batch
// sequence is the last one sent, so it never looks like a gap to the
// stream. Any goroutine may ping: a ping sent after a message reaches the
// stream after it.
func (r *round) ping(b *fastBatch) {
	subject := b.firstSubject()
	if subject == "" || r.lostConnection() {
		return
	}
	m := nats.NewMsg(subject)
	m.Reply = b.reply(b.lastSent(), fastOpPing)
	_ = r.p.nc.PublishMsg(m) // best effort: the deadline decides
}

// lostConnection reports whether the round saw the connection leave
// CONNECTED.
func (r *round) lostConnection() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

// ackBatches is the ack stage of the batch transport. It holds each
// batch's rows until the batch's final PubAck proves them stored
// (fastBatch.verified), then forwards them to the mark stage, in order:
// flow acks only pace the batch (a flow ack can cover a message the leader
// has only proposed). When a batch ends before all its messages are
// stored, or unverified, or no ack comes within AckTimeout, or the
// connection is lost, it fails the round; the rows of that batch are never
// forwarded (the next round publishes them again and the stream drops what
// it has), and it waits for the open batch to end so that the next round
// does not publish beside it.
func (r *round) ackBatches(in <-chan segment, out *ackedQueue) {
	defer out.close()
	p := r.p
	failed := false
	var last *fastBatch
	// held are the rows of last not forwarded yet, as the segments that
	// carried them: concatenating them would copy each row again and grow
	// a slice of a whole batch, garbage after every batch.
	var held [][]outbox.Row
	for seg := range in {
		if seg.atomic {
			// The batch before it has been forwarded (the publish stage
			// waited for its proof), and these rows are stored.
			if last != nil {
				p.acks.forgetFast(last)
			}
			last, held = nil, nil
			if !failed {
				r.forward([][]outbox.Row{seg.rows}, out)
			}
			continue
		}
		b := seg.fb
		if last != b {
			if last != nil {
				p.acks.forgetFast(last)
			}
			last, held = b, nil
		}
		if failed {
			r.settle(b)
			continue
		}
		if seg.eob {
			err := r.awaitEnd(b)
			if errors.Is(err, errUnverifiedBatch) && len(held) > 0 {
				lastRow := lastOf(held)
				err = r.proveStored(b, lastRow)
				if errors.Is(err, errUnverifiedBatch) {
					p.verifyUpto.Store(max(p.verifyUpto.Load(), lastRow.ID))
				}
			}
			b.setProof(err == nil)
			if err == nil {
				r.forward(held, out)
				held = nil
				continue
			}
			failed = true
			r.fail(err)
			continue
		}
		// Wait for the flow acks as the messages go out: a batch that
		// stops being acknowledged fails the round within AckTimeout,
		// not only at its end.
		if _, err := r.awaitAck(b, seg.first+uint64(len(seg.rows))-1); err != nil {
			failed = true
			p.metrics.publishErrors.Add(float64(countRows(held) + len(seg.rows)))
			r.fail(err)
			r.settle(b)
			continue
		}
		held = append(held, seg.rows)
	}
	if last != nil {
		p.acks.forgetFast(last)
	}
}

// forward observes the latency of acknowledged rows and hands them to the
// mark stage, in order. The chunks go out back to back, so that the mark
// stage finds them queued together and marks them in one transaction
// (the queue holds 4 × MaxInFlight rows, more than a batch has).
func (r *round) forward(chunks [][]outbox.Row, out *ackedQueue) {
	now := r.p.opts.Now()
	for _, rows := range chunks {
		for _, row := range rows {
			r.p.metrics.latency.Observe(now.Sub(row.CreatedAt).Seconds())
		}
	}
	for _, rows := range chunks {
		out.put(rows)
	}
}

// lastOf returns the last row of chunks, none of which is empty.
func lastOf(chunks [][]outbox.Row) outbox.Row {
	c := chunks[len(chunks)-1]
	return c[len(c)-1]
}

// countRows returns the number of rows in chunks.
func countRows(chunks [][]outbox.Row) int {
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	return n
}

// awaitAck waits until batch b has acknowledged message seq, and returns
// the acknowledged prefix. It returns an error with the prefix when the
// batch ended before seq was stored, when the stream owes a reply and
// neither a flow ack nor the end arrives within AckTimeout (it pings on a
// pingSchedule meanwhile), when the connection is lost, or when the
// shutdown bound passes.
func (r *round) awaitAck(b *fastBatch, seq uint64) (uint64, error) {
	timeout := r.p.opts.AckTimeout
	pings := newPingSchedule(timeout)
	var deadline, ping *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
			ping.Stop()
		}
	}()
	var last uint64
	for {
		acked, ended, count, err := b.state()
		switch {
		case acked >= seq:
			return acked, nil
		case ended && count >= seq:
			return count, nil
		case ended:
			return count, endedEarly(b, count, err)
		}
		if deadline == nil {
			deadline, ping = time.NewTimer(timeout), time.NewTimer(pings.after())
			last = acked
		}
		if acked > last || !b.owed() {
			// Progress, or nothing due yet (the rest of the batch is still
			// being read): the deadline and the pings start again.
			last = acked
			deadline.Reset(timeout)
			pings.restart()
			ping.Reset(pings.after())
		}
		select {
		case <-b.progress:
		case <-ping.C:
			if b.owed() {
				r.ping(b)
			}
			ping.Reset(pings.after())
		case <-deadline.C:
			if b.owed() {
				return acked, fmt.Errorf("batch %s: message %d not acknowledged within %v", b.id, seq, timeout)
			}
			deadline.Reset(timeout)
		case <-r.lost:
			return acked, errConnectionLost
		case <-r.finishCtx.Done():
			return acked, errShutdownTimeout
		}
	}
}

// awaitEnd waits for the final PubAck of batch b after its EOB and checks
// that the stream stored every message sent. On a pingSchedule meanwhile it
// sends a batch ended by an EOB message of its own that EOB again, and
// pings one ended by its last message: the end or its final PubAck lost
// with a leader that stepped down would otherwise hold the next batch back
// for AckTimeout. The new leader knows the batch's stored messages from
// the replicas, so a ping only made it send a flow ack again, and the
// batch stayed open there until an EOB came (found by BENCHMARKS row 7c:
// "no final PubAck within 10s" after a step-down). A repeated EOB commits
// it; the leader that is committing it already ignores one; a leader that
// does not know it answers "unknown batch id", and the next round
// publishes again from the first row not acknowledged.
func (r *round) awaitEnd(b *fastBatch) error {
	timer := time.NewTimer(r.p.opts.AckTimeout)
	defer timer.Stop()
	pings := newPingSchedule(r.p.opts.AckTimeout)
	ping := time.NewTimer(pings.after())
	defer ping.Stop()
wait:
	for {
		select {
		case <-b.done:
			break wait
		case <-ping.C:
			if b.endedByEOB() && !r.lostConnection() {
				_ = r.p.nc.PublishMsg(eobMsg(b)) // best effort: the deadline decides
			} else {
				r.ping(b)
			}
			ping.Reset(pings.after())
		case <-timer.C:
			return fmt.Errorf("batch %s: no final PubAck within %v", b.id, r.p.opts.AckTimeout)
		case <-r.lost:
			return errConnectionLost
		case <-r.finishCtx.Done():
			return errShutdownTimeout
		}
	}
	_, _, count, err := b.state()
	if err != nil || count < b.lastSent() {
		return endedEarly(b, count, err)
	}
	if b.dup {
		r.p.metrics.duplicates.Inc()
	}
	if !b.verified() {
		return fmt.Errorf("batch %s (%d messages): %w", b.id, count, errUnverifiedBatch)
	}
	return nil
}

// endedEarly explains why batch b ended with only count of its messages
// stored.
func endedEarly(b *fastBatch, count uint64, err error) error {
	b.mu.Lock()
	notice := b.notice
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("batch %s ended after %d of %d messages: %w", b.id, count, b.lastSent(), err)
	}
	if notice == "" {
		notice = "the stream ended it"
	}
	return fmt.Errorf("batch %s ended after %d of %d messages: %s", b.id, count, b.lastSent(), notice)
}

// settle waits, after a failure, until batch b has ended or the ack
// deadline passes, so that the next round does not publish the same rows
// beside messages of b still on their way. It asks for the end itself when
// the publish stage could not.
func (r *round) settle(b *fastBatch) {
	select {
	case <-b.done:
		return
	default:
	}
	timer := time.NewTimer(r.p.opts.AckTimeout)
	defer timer.Stop()
	select {
	case <-b.done:
	case <-timer.C:
	case <-r.lost:
	case <-r.finishCtx.Done():
	}
}
