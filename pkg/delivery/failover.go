package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Fast failover. JetStream moves the pin of a priority group to a standby
// only when the pinned client has sent no pull request for the consumer's
// pinned TTL — seconds after a worker died. So the workers watch each other:
// the pinned worker answers on a core subject, tgnotify.worker.<channel>.pinned,
// with its pin id, for as long as it lives (a process that dies loses its
// subscription with its connection, at once); a standby asks every
// failoverPing, and when the consumer has a pin that nobody answers for,
// failoverMisses times in a row, it unpins the consumer. JetStream then
// pins the standby's waiting pull request; the dead worker's messages come
// back to it when their ack wait expires, and takeover.go decides which
// recipients must wait for them.

// failoverPing is how often a standby checks that the pinned worker lives.
const failoverPing = 250 * time.Millisecond

// failoverMisses is how many checks in a row must find the same pin
// unanswered before the standby unpins it: a second. A newly pinned worker
// learns its pin only from the first message delivered to it, so it gets
// that long to process it, even on a busy machine, before a standby doubts
// it.
const failoverMisses = 4

// failoverAfterReconnect is how long a standby does not doubt the pinned
// worker after its own connection came back: the pinned worker's reconnect
// (nats.go waits two seconds between attempts to a server, with jitter)
// plus the settle of its records.
const failoverAfterReconnect = 3*time.Second + ReconnectSettle

// pinSubject is the core NATS subject on which the pinned worker of a
// channel answers (jetstream.Names.PinSubject). It lies outside the work
// stream's subjects, so the stream never stores these requests.
func (w *Worker) pinSubject() string { return w.names.PinSubject(w.name) }

// pinState is this worker's pin: the id JetStream gave it, as the last
// message delivered to it said, and the responder subscription while it
// holds it.
type pinState struct {
	mu  sync.Mutex
	id  string
	sub *nats.Subscription
	// learned is the connection's reconnect count when id was first seen.
	// nats.go counts a reconnect before it reads anything from the new
	// connection, so an id learned at a count below r came with a message
	// of a connection older than reconnect r (pinHeldBefore).
	learned uint64
}

// pinnedAs records that a message arrived with pin id id: this worker is
// the pinned one. It answers the standbys from now on. Becoming pinned, it
// first asks the worker it takes over from (askFormerPinned), before the
// message that told it reaches the dispatcher. It reports whether id is a
// pin this worker did not hold before the message: the worker has just
// been pinned, and takes over (onArrival).
func (w *Worker) pinnedAs(ctx context.Context, id string) (newPin bool) {
	if id == "" {
		return false
	}
	w.pin.mu.Lock()
	becoming := w.pin.sub == nil && w.pin.id != id
	w.pin.mu.Unlock()
	if becoming {
		w.askFormerPinned(ctx)
	}
	w.pin.mu.Lock()
	defer w.pin.mu.Unlock()
	if w.pin.id == id && w.pin.sub != nil {
		return false
	}
	if w.pin.id != id {
		w.pin.id, w.pin.learned = id, w.js.Conn().Stats().Reconnects
		newPin = true
	}
	if w.pin.sub != nil {
		return newPin
	}
	sub, err := w.js.Conn().Subscribe(w.pinSubject(), func(m *nats.Msg) {
		w.pin.mu.Lock()
		id := w.pin.id
		w.pin.mu.Unlock()
		if id != "" {
			_ = m.RespondMsg(w.pinAnswer(id))
		}
	})
	if err != nil {
		w.log.Warn("cannot answer the standbys; they will take over after the pinned TTL only", "err", err)
		return newPin
	}
	w.pin.sub = sub
	return newPin
}

// askFormerPinned asks whoever still answers on the pin subject, as this
// worker becomes pinned and before it answers there itself: the worker the
// pin was taken from, if it lives. JetStream moves the pin also from a live
// worker (the consumer's leader changed), and that worker's 429 pause may
// be younger than this one's last question as a standby, and not yet in
// the shared state (found by the long chaos run on the cluster: a 3 s 429
// read 0.35 s before a consumer leader change moved the pin, and the new
// pinned worker sent two requests inside it). Its answer carries the
// pause, which this worker keeps. A former worker that is gone answers
// "no responders" at once; a slow one is waited for failoverPing at most.
func (w *Worker) askFormerPinned(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, failoverPing)
	defer cancel()
	m, err := w.js.Conn().RequestWithContext(rctx, w.pinSubject(), nil)
	if err != nil {
		return // nobody answers: the former pinned worker is gone
	}
	w.learnPause(m)
}

// Headers of the pinned worker's answer that carry its 429 pause.
const (
	pauseUntilHeader  = "Tgnotify-Pause-Until"
	pauseReasonHeader = "Tgnotify-Pause-Reason"
)

// pinAnswer is the pinned worker's answer to a standby: its pin id and, while
// a 429 pause runs, the pause. A standby learns the pause this way even when
// the shared state cannot be written (its bucket has no leader during a
// cluster election), so that, taking over after this worker died, it does
// not send inside the pause (found by the chaos cluster run: a pause the
// dying worker could not write was broken by the standby).
func (w *Worker) pinAnswer(id string) *nats.Msg {
	m := &nats.Msg{Data: []byte(id)}
	if p := w.adm.currentPause(); p.Until.After(w.now()) {
		m.Header = nats.Header{}
		setPauseHeaders(m.Header, p)
	}
	return m
}

// setPauseHeaders writes pause p into h, the form learnPause reads.
func setPauseHeaders(h nats.Header, p pause) {
	h.Set(pauseUntilHeader, p.Until.UTC().Format(time.RFC3339Nano))
	h.Set(pauseReasonHeader, p.Reason)
}

// pauseFromHeader is the header of a pause broadcast that names the worker
// that read the 429 (its own broadcasts come back to it).
const pauseFromHeader = "Tgnotify-Pause-From"

// broadcastPause tells the other workers of the channel, at once, of the
// 429 pause p this worker has just read. The answer to a standby's
// question (pinAnswer) carries the pause too, but a standby asks every
// failoverPing, and the shared state may take seconds to write in an
// election: a worker killed within that time took the pause with it, and
// the standby that took over sent inside it (found by the long chaos run
// on the cluster: a 3 s 429 read 204 ms before a SIGKILL, while a node
// was being killed, and 2 requests inside it). A core NATS publish leaves
// in the time of a write to the socket.
func (w *Worker) broadcastPause(p pause) {
	m := nats.NewMsg(w.names.PauseSubject(w.name))
	setPauseHeaders(m.Header, p)
	m.Header.Set(pauseFromHeader, w.id)
	if err := w.js.Conn().PublishMsg(m); err != nil {
		w.log.Debug("cannot tell the other workers of a 429 pause; they learn it from the shared state", "err", err)
	}
}

// hearPauses subscribes to the pauses the other workers of the channel
// broadcast (broadcastPause) and applies them.
func (w *Worker) hearPauses() (*nats.Subscription, error) {
	return w.js.Conn().Subscribe(w.names.PauseSubject(w.name), func(m *nats.Msg) {
		if m.Header.Get(pauseFromHeader) == w.id {
			return
		}
		w.learnPause(m)
	})
}

// learnPause applies the pause a message of another worker carries, if
// any: the pinned worker's answer (pinAnswer) or a broadcast
// (broadcastPause).
func (w *Worker) learnPause(m *nats.Msg) {
	v := m.Header.Get(pauseUntilHeader)
	if v == "" {
		return
	}
	until, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		w.log.Warn("the pinned worker's answer carries an unreadable pause", "value", v, "err", err)
		return
	}
	if w.adm.extendPause(pause{Until: until, Reason: m.Header.Get(pauseReasonHeader)}) {
		w.log.Info("another worker of this channel is paused by a 429: so is this one", "until", until)
	}
}

// unpinned stops answering: another worker is pinned now, or this one
// stops.
func (w *Worker) unpinned() {
	w.pin.mu.Lock()
	defer w.pin.mu.Unlock()
	w.pin.id = ""
	if w.pin.sub != nil {
		_ = w.pin.sub.Unsubscribe()
		w.pin.sub = nil
	}
}

// pinID is this worker's pin id, "" when it holds none as far as it knows.
func (w *Worker) pinID() string {
	w.pin.mu.Lock()
	defer w.pin.mu.Unlock()
	return w.pin.id
}

// pinHeldBefore returns this worker's pin id if it learned it before the
// connection's reconnect count reached reconnects, "" otherwise: the pin it
// held before that reconnect, if it still holds it. A pin learned from a
// message of the new connection (one JetStream may have given it after
// another worker held the pin meanwhile) does not count.
func (w *Worker) pinHeldBefore(reconnects uint64) string {
	w.pin.mu.Lock()
	defer w.pin.mu.Unlock()
	if w.pin.id == "" || w.pin.learned >= reconnects {
		return ""
	}
	return w.pin.id
}

// isPinned reports whether this worker holds the pin as far as it knows.
func (w *Worker) isPinned() bool {
	w.pin.mu.Lock()
	defer w.pin.mu.Unlock()
	return w.pin.id != ""
}

// watchPin runs on every worker: while it is not pinned, it checks every
// failoverPing that the pinned worker answers, and unpins the consumer when
// it does not.
func (w *Worker) watchPin(ctx context.Context) {
	t := time.NewTicker(failoverPing)
	defer t.Stop()
	missed, suspect := 0, ""
	nc := w.js.Conn()
	reconnects, quietUntil := nc.Stats().Reconnects, time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r := nc.Stats().Reconnects; r != reconnects {
			// After a NATS restart every worker reconnects, the pinned one
			// maybe seconds after this one: it is not gone, and must get
			// the time to reconnect and write the records of what it sent.
			reconnects, quietUntil = r, time.Now().Add(failoverAfterReconnect)
		}
		if w.isPinned() {
			w.confirmPin(ctx)
		}
		if w.isPinned() || !nc.IsConnected() || time.Now().Before(quietUntil) {
			missed, suspect = 0, ""
			continue
		}
		pinned := w.pinnedClient(ctx)
		if pinned == "" {
			// Nobody pinned, or the consumer cannot be read (its leader is
			// being elected): there is nobody to doubt, but the pinned
			// worker, if any, still tells its 429 pause, which this one
			// must keep if it is pinned next (found by the chaos cluster
			// runs: a standby that read no consumer during an election
			// never asked, and broke the pause of the worker it replaced).
			w.pinAnswered(ctx, "")
			missed, suspect = 0, ""
			continue
		}
		w.m.pinChecks.Inc()
		if w.pinAnswered(ctx, pinned) {
			missed, suspect = 0, ""
			continue
		}
		if pinned != suspect {
			missed, suspect = 0, pinned
		}
		if missed++; missed < failoverMisses {
			continue
		}
		if pinned != w.pinnedClient(ctx) {
			continue // the pin moved meanwhile
		}
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := w.unpin(uctx)
		cancel()
		if err != nil {
			w.log.Warn("the pinned worker does not answer, and unpinning it failed", "pin", pinned, "err", err)
			continue
		}
		w.m.failovers.Inc()
		w.log.Warn("the pinned worker does not answer: unpinned it, this worker takes over", "pin", pinned)
		missed, suspect = 0, ""
	}
}

// confirmPin ends the settle after a NATS reconnect early when this worker
// was pinned before the reconnect (pinHeldBefore), still is, and the
// consumer, asked now, names the same pin. JetStream gives a new pin id whenever it pins a
// worker, so the same id means the pin never moved while this worker was
// away: no other worker was handed messages meanwhile, and none can have
// sent one whose delivery record it is still writing — what the settle
// waits for. (What another worker sent before this one was pinned is the
// takeover's to guard, takeover.go, settle or not.) A pin moved to a
// standby and back has another id, a nats-server restart forgets the pin,
// and a consumer that cannot be read proves nothing: the settle then runs
// its full ReconnectSettle. It ended after a kill of a node the pinned
// worker was connected to and that led nothing (BENCHMARKS.md row 7d): 3 s
// without a send, for nothing.
func (w *Worker) confirmPin(ctx context.Context) {
	c, settling := w.adm.settlingFor(w.now())
	if !settling || w.pinID() != c.pin || !w.js.Conn().IsConnected() {
		return
	}
	if w.pinnedClient(ctx) != c.pin || w.pinID() != c.pin {
		return
	}
	if w.adm.keptPin(w.now(), c) {
		w.m.settlesShortened.Inc()
		w.log.Info("still pinned after the NATS reconnect, so nobody else sent meanwhile: sending again")
		w.poke()
	}
}

// pinnedClient returns the pin id of the consumer's priority group, or ""
// when nobody is pinned or the consumer cannot be read.
func (w *Worker) pinnedClient(ctx context.Context) string {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := w.res.Consumer.Info(qctx)
	if err != nil {
		return ""
	}
	group := w.priorityGroup()
	for _, g := range info.PriorityGroups {
		if g.Group == group {
			return g.PinnedClientID
		}
	}
	return ""
}

// pinAnswered asks the pinned worker whether it lives and holds pin.
// Anything but "no responders", or an answer with another pin, counts as an
// answer: only a worker that is gone (or holds a stale pin) makes the
// standby take over.
func (w *Worker) pinAnswered(ctx context.Context, pin string) bool {
	rctx, cancel := context.WithTimeout(ctx, failoverPing)
	defer cancel()
	m, err := w.js.Conn().RequestWithContext(rctx, w.pinSubject(), nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return false
	case err != nil:
		return true // slow or unknown: do not take over on doubt
	}
	w.learnPause(m)
	return string(m.Data) == pin
}

// unpin clears the consumer's pin.
func (w *Worker) unpin(ctx context.Context) error {
	s, err := w.js.Stream(ctx, w.streamOf(w.res.Consumer))
	if err != nil {
		return err
	}
	return s.UnpinConsumer(ctx, consumerName(w.res.Consumer), w.priorityGroup())
}

func (w *Worker) streamOf(c natsjs.Consumer) string {
	if info := c.CachedInfo(); info != nil && info.Stream != "" {
		return info.Stream
	}
	return w.names.Stream
}

func consumerName(c natsjs.Consumer) string {
	if info := c.CachedInfo(); info != nil {
		return info.Name
	}
	return ""
}
