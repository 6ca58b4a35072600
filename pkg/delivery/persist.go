package delivery

import (
	"context"
	"log/slog"
	"time"
)

// stateWrite is a change of the shared state that the dispatcher must not
// wait for (a hold, the pause). It takes effect in this worker's view at
// once and is written to notify_chats, in order, by the persister.
type stateWrite struct {
	// hold changes, or pause when hold is nil.
	hold  *holdChange
	pause pause
}

// persister writes shared state changes in order, on its own goroutine.
type persister struct {
	state *sharedState
	log   *slog.Logger
	// connected reports whether NATS is reachable: while it is not, writes
	// wait instead of filling the reconnect buffer with retries.
	connected func() bool
	ch        chan stateWrite
	done      chan struct{}
	ctx       context.Context // ends when unwritten changes are abandoned
	stop      context.CancelFunc
	// longest is the pause that ends last of those queued (pause's caller,
	// the dispatcher, owns it).
	longest pause
	// file, when not nil, keeps each pause on the host before it is
	// queued for the bucket.
	file *pauseFile
}

func newPersister(state *sharedState, file *pauseFile, connected func() bool, log *slog.Logger) *persister {
	p := &persister{state: state, file: file, connected: connected, log: log, ch: make(chan stateWrite, 4096), done: make(chan struct{})}
	p.ctx, p.stop = context.WithCancel(context.Background())
	return p
}

// hold applies a hold change locally and queues its write.
func (p *persister) hold(c holdChange) {
	if c.clear {
		p.state.clearHoldLocal(c.recipient)
	} else {
		p.state.setHoldLocal(c.recipient, c.h)
	}
	p.queue(stateWrite{hold: &c})
}

// pause applies a pause locally and queues its write, unless a pause that
// ends later was queued already. Two 429s answered together come back in
// any order: written as they came, the shorter one, written last, replaced
// the longer one in the bucket, and a worker started after this one died
// sent inside the longer pause (found by the long chaos run: a 6 s pause
// stored as 3 s). The bucket is only ever extended here. The pause file,
// when there is one, is written first, at once: the bucket's write can
// wait seconds for a leader, and a worker killed meanwhile leaves the
// pause to the process restarted in its place only there.
func (p *persister) pause(v pause) {
	p.state.setPauseLocal(v)
	if !v.Until.After(p.longest.Until) {
		return
	}
	p.longest = v
	p.file.save(v)
	p.queue(stateWrite{pause: v})
}

// queue queues a write. If the queue is full (NATS has been unreachable for
// long) the write is dropped with a warning: the local state still holds,
// only a worker starting later would miss it.
func (p *persister) queue(w stateWrite) {
	select {
	case p.ch <- w:
	default:
		p.log.Warn("shared state write queue is full; dropping a write")
	}
}

// run writes queued changes, in order, until close.
func (p *persister) run() {
	defer close(p.done)
	for w := range p.ch {
		p.write(w)
	}
}

// write writes one change, trying again while JetStream does not answer (a
// NATS restart): a hold or a pause that is not written lets a worker
// starting later — the standby, or this one restarted — send a recipient's
// later messages first, or send inside the pause. Later changes wait behind
// it. It gives up only when the worker stops (close).
func (p *persister) write(w stateWrite) {
	failing := false
	err := retryUntil(p.ctx, 100*time.Millisecond, 2*time.Second, func() error {
		if !p.connected() {
			return ErrNotConnected
		}
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		switch {
		case w.hold != nil && w.hold.clear:
			return p.state.del(ctx, p.state.keys.hold(w.hold.recipient))
		case w.hold != nil:
			return p.state.putJSON(ctx, p.state.keys.hold(w.hold.recipient), w.hold.h)
		}
		return p.state.putJSON(ctx, p.state.keys.pause, w.pause)
	}, func(err error) {
		if !failing {
			p.log.Warn("cannot write shared state yet; retrying until JetStream answers", "err", err)
			failing = true
		}
	})
	switch {
	case err != nil:
		p.log.Warn("shared state not written before the worker stopped", "err", err)
	case failing:
		p.log.Info("shared state written after JetStream came back")
	}
}

// close flushes the queued writes, waiting at most timeout, then abandons
// what is left.
func (p *persister) close(timeout time.Duration) {
	close(p.ch)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.log.Warn("shared state writes not flushed at shutdown")
		p.stop()
		<-p.done
	}
	p.stop()
}
