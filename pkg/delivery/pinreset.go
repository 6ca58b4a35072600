package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// A pull request that carries this worker's pin id and is answered "pin ID
// mismatch" (423) says that the pin this worker held is gone. It does not
// say that another worker holds it: nats-server drops the pin whenever the
// consumer elects a leader, and then pins the first pull request without a
// pin id that it can serve a message, which is as often as not this
// worker's own next request. Handing back everything at once, as the
// worker did, cost a takeover each time: in the long cluster chaos run 45
// hand-backs of 100–300 messages, each of which came back in an order
// JetStream does not guarantee and kept their recipients waiting.
//
// So the worker doubts first. From the 423 on it writes no request
// (admission refuses: "pin in doubt") and keeps what it holds, keeping it
// alive as before, until it learns who is pinned:
//
//   - a message arrives (it was delivered after the 423, so to this
//     worker's new pin): this worker is pinned again, keeps what it held,
//     and runs the takeover check (takeover.go), which finds in one count
//     of the consumer that nobody else holds anything, or parks what another
//     worker pinned meanwhile may hold;
//   - another worker answers on the pin subject with its pin: it is pinned,
//     and this worker hands everything back, in order, as before;
//   - neither within pinDoubtMax: it hands everything back. A standby
//     unpins a pinned worker that does not answer after a second
//     (failover.go), so a worker that waited longer could hold messages
//     the next pinned worker's takeover is waiting for.
//
// Nothing is sent by two workers meanwhile: this worker sends nothing while
// it doubts, and a standby that is pinned instead treats what this worker
// holds as suspects until it is handed back (takeover.go).
const (
	pinDoubtMax  = time.Second
	pinDoubtPoll = 100 * time.Millisecond
)

// pinDoubt is the dispatcher's state between a 423 and the answer to who
// is pinned.
type pinDoubt struct {
	epoch uint64 // the pin epoch the 423 began: a message received in it proves the pin
	since time.Time
	stop  context.CancelFunc // stops asking who is pinned
}

// inPinDoubt reports whether a 423 is not settled yet: admission writes no
// request then. It reads only atomics, so the consume callback's increment
// of pinEpoch takes effect before the dispatcher has heard of the 423.
func (w *Worker) inPinDoubt() bool {
	return w.pinEpoch.Load() > w.pinSettled.Load()
}

// onPinReset starts (or, after another 423, extends) the doubt that follows
// a 423.
func (w *Worker) onPinReset() {
	epoch := w.pinEpoch.Load()
	if w.doubt != nil {
		w.doubt.epoch = epoch
		return
	}
	now := w.now()
	ctx, cancel := context.WithTimeout(w.sendCtx, pinDoubtMax)
	w.doubt = &pinDoubt{epoch: epoch, since: now, stop: cancel}
	c := w.sched.counts(w.heldFrom)
	w.log.Info("the pin was reset (pin ID mismatch): no request until it is known who is pinned", "held", c.held, "in_flight", c.inflight)
	go w.askWhoIsPinned(ctx, w.doubt)
}

// askWhoIsPinned asks on the pin subject every pinDoubtPoll until another
// worker answers with its pin, and then tells the dispatcher. An answer
// with this worker's own new pin does not count.
func (w *Worker) askWhoIsPinned(ctx context.Context, d *pinDoubt) {
	t := time.NewTicker(pinDoubtPoll)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, pinDoubtPoll)
		m, err := w.js.Conn().RequestWithContext(rctx, w.pinSubject(), nil)
		cancel()
		if err == nil {
			w.learnPause(m)
			if id := string(m.Data); id != "" && id != w.pinID() {
				select {
				case w.pinElsewhere <- d:
				case <-ctx.Done():
				}
				return
			}
		} else if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			w.log.Debug("asking who is pinned failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pinKept ends the doubt: a message arrived under a new pin of this worker.
func (w *Worker) pinKept() {
	d := w.doubt
	w.endDoubt()
	w.m.pinResets.WithLabelValues("kept").Inc()
	w.log.Info("pinned again after the pin was reset: kept the messages this worker held", "doubted", w.now().Sub(d.since))
}

// onPinElsewhere handles another worker's answer that it is pinned, unless
// the doubt it was asked for has ended.
func (w *Worker) onPinElsewhere(d *pinDoubt) {
	if w.doubt == d {
		w.pinMoved("moved")
	}
}

// pinMoved ends the doubt by handing back everything this worker holds:
// another worker is pinned (moved), or nobody told in time (timeout).
func (w *Worker) pinMoved(outcome string) {
	d := w.doubt
	w.heldFrom = d.epoch
	w.endDoubt()
	w.m.pinResets.WithLabelValues(outcome).Inc()
	eff, n := w.sched.handBackAll(w.now())
	w.apply(eff)
	w.sched.losePin()
	w.log.Warn("another worker is pinned: handed back the messages this one held", "count", n, "cause", outcome,
		"doubted", w.now().Sub(d.since))
}

func (w *Worker) endDoubt() {
	w.doubt.stop()
	w.pinSettled.Store(w.doubt.epoch)
	w.doubt = nil
	w.poke()
}

// doubtExpired reports whether the doubt lasted pinDoubtMax.
func (w *Worker) doubtExpired(now time.Time) bool {
	return w.doubt != nil && now.Sub(w.doubt.since) >= pinDoubtMax
}
