package delivery

import (
	"context"
	"strconv"
	"time"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// stateOp is a write to the shared chat state that the dispatcher must not
// wait for. It takes effect in this worker's view at once and is written to
// notify_chats, in order, by the persister goroutine.
type stateOp interface {
	applyLocal(s *chatState)
	write(ctx context.Context, s *chatState) error
}

// holdOp records (or clears) a chat's hold.
type holdOp struct {
	chat  int64
	h     hold
	clear bool
}

func (o holdOp) applyLocal(s *chatState) {
	if o.clear {
		s.apply(holdKey(o.chat), nil, true)
		return
	}
	s.mu.Lock()
	s.holds[o.chat] = o.h
	s.mu.Unlock()
}

func (o holdOp) write(ctx context.Context, s *chatState) error {
	if o.clear {
		return s.clearHold(ctx, o.chat)
	}
	return s.setHold(ctx, o.chat, o.h)
}

// pauseOp records the bot-wide 429 pause.
type pauseOp struct{ p pause }

func (o pauseOp) applyLocal(s *chatState) {
	s.mu.Lock()
	if o.p.Until.After(s.pause.Until) {
		s.pause = o.p
	}
	s.mu.Unlock()
}

func (o pauseOp) write(ctx context.Context, s *chatState) error { return s.setPause(ctx, o.p) }

// persist applies op locally and queues its write. If the queue is full
// (NATS has been unreachable for long) the write is dropped with a warning:
// the local state still holds, only a worker starting later would miss it.
func (w *Worker) persist(op stateOp) {
	op.applyLocal(w.state)
	select {
	case w.persistCh <- op:
	default:
		w.log.Warn("shared state write queue is full; dropping a write", "bucket", jetstream.BucketChats)
	}
}

// runPersister writes queued state changes, in order, until the channel is
// closed.
func (w *Worker) runPersister() {
	defer close(w.persistDone)
	for op := range w.persistCh {
		w.writeState(op)
	}
}

// writeState writes one state change, trying again while JetStream does not
// answer (a NATS restart): a hold or a pause that is not written lets a
// worker starting later — the standby, or this one restarted — send a
// chat's later messages first, or send inside the pause. Later changes wait
// behind it. It gives up only when the worker stops (closePersist).
func (w *Worker) writeState(op stateOp) {
	delay := 100 * time.Millisecond
	failing := false
	for {
		ctx, cancel := context.WithTimeout(w.persistCtx, 5*time.Second)
		err := op.write(ctx, w.state)
		cancel()
		switch {
		case err == nil:
			if failing {
				w.log.Info("shared state written after JetStream came back")
			}
			return
		case w.persistCtx.Err() != nil:
			w.log.Warn("shared state not written before the worker stopped", "err", err)
			return
		case !failing:
			w.log.Warn("cannot write shared state yet; retrying until JetStream answers", "err", err)
			failing = true
		}
		t := time.NewTimer(delay)
		select {
		case <-w.persistCtx.Done():
		case <-t.C:
		}
		t.Stop()
		delay = min(2*delay, 2*time.Second)
	}
}

// closePersist flushes the queued writes, waiting at most 5 seconds, then
// abandons what is left.
func (w *Worker) closePersist() {
	close(w.persistCh)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-w.persistDone:
	case <-t.C:
		w.log.Warn("shared state writes not flushed at shutdown")
		w.stopPersist()
		<-w.persistDone
	}
	w.stopPersist()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
