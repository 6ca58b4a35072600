package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// A worker that starts receiving (after a crash, a deploy, or as the
// standby taking over) can get new messages of a recipient before older
// ones another worker held: those come back only when their ack wait
// expires, or, for messages handed back, in an order JetStream does not
// guarantee. Sending the new one first would break the recipient's order.
// The same holds when this worker is pinned again after it lost the pin,
// however short the gap.
//
// The handover is per recipient, so that a takeover costs seconds, not the
// ack wait of everything the other worker held. When messages start
// arriving after a quiet period or a lost pin, the worker reads the
// consumer's ack floor F and last delivered sequence D: everything another
// worker may still hold lies in (F, D]. Each lane then sends only once it is
// cleared: the worker reads its recipient's messages in (F, D] (a direct
// batch get on the recipient's subject) and takes as suspects those that
// are neither settled — delivered on any channel, or given up on by this
// one (notify_delivered, notify_attempts) — nor held here. The suspects join
// the lane as parked until the ack wait has passed, so its later messages
// wait for them (and a parked one written as a hold by the other worker
// keeps its own deadline); every other lane sends at once. The takeover ends
// when the consumer's unacknowledged messages are all accounted for by this
// worker, or after the ack wait plus a grace.

// maxClearing bounds the lane checks running at once.
const maxClearing = 16

// Bounds of the pause after a lane check failed. JetStream answers none
// while the consumer or the stream elects a leader (a few seconds in a
// cluster): retrying at once only loads the servers that are electing.
const (
	minClearsBackoff = 250 * time.Millisecond
	maxClearsBackoff = 2 * time.Second
)

// ackCount is the consumer's count of delivered, unacknowledged messages,
// with this worker's arrival count taken just before the request, and the
// takeover it was read for (Worker.takeoverGen).
type ackCount struct {
	pending  int
	received uint64
	gen      uint64
	// floor and delivered bound what another worker may hold, in stream
	// sequences; floorC and deliveredC are the same bounds in consumer
	// sequences (arrivalRun).
	floor, delivered   uint64
	floorC, deliveredC uint64
	// last is the stream's last sequence, read from its leader with the
	// consumer when the dispatcher asked for it (Worker.wantStreamLast);
	// 0 when not read.
	last uint64
}

// cleared is the result of one lane's check: a takeover's, or (verify)
// an inherited hold's.
type cleared struct {
	recipient string
	suspects  []uint64
	keys      []string // the suspects' keys (a takeover's check)
	err       error
	verify    bool
	recheck   bool // an early check of a takeover's suspects (suspectRecheck)
	first     uint64
	upTo      uint64 // a hold check's last sequence read
	gen       uint64 // a takeover's check: the takeover it was made for
}

// startTakeoverCheck begins a takeover: lanes wait until cleared. One
// already running begins again (restartTakeover).
func (w *Worker) startTakeoverCheck(now time.Time) {
	if w.stopCheck != nil {
		w.restartTakeover(now)
		return
	}
	until := now.Add(w.cfg.AckWait + w.parkGrace())
	w.sched.startTakeover(until, now)
	w.takeoverBounds, w.clearWindow, w.takeoverDoubted, w.takeoverSince = nil, nil, false, now
	w.wantStreamLast.Store(false)
	clear(w.suspectKeys)
	w.takeoverGen.Add(1)
	ctx, cancel := context.WithCancel(w.sendCtx)
	w.stopCheck = cancel
	w.m.takeovers.Inc()
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			// Arrivals counted before the request: the server's count
			// includes them, and what arrives after is subtracted again.
			received, gen := w.received.Load(), w.takeoverGen.Load()
			qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
			info, err := w.res.Consumer.Info(qctx)
			qcancel()
			if err == nil {
				c := ackCount{pending: info.NumAckPending, received: received, gen: gen,
					floor: info.AckFloor.Stream, delivered: info.Delivered.Stream,
					floorC: info.AckFloor.Consumer, deliveredC: info.Delivered.Consumer}
				if w.wantStreamLast.Load() {
					c.last = w.streamLast(ctx)
				}
				select {
				case w.takeover <- c:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// restartTakeover begins a running takeover again, at an arrival that
// would have begun one (onArrival): this worker was just pinned, or pinned
// again, or received nothing for TakeoverGap. The running takeover's window
// (F, D] was read before, and the messages of the worker this one takes
// over from now may lie beyond it: its lane checks, some already done,
// would let a recipient's new message go before an older one the other
// worker still holds. Found by the long cluster chaos run on fb2e19c: a
// worker that had just lost the pin and handed back what it held received
// one more message 20 ms later and began a takeover on it, which ran on,
// since the pinned worker held what this one did not; 10 s later it
// unpinned that worker, which had not answered for a second after two NATS
// reconnects, and was pinned. Its lanes, cleared against the old window,
// sent a chat's newer message while the older one was still out with the
// worker it took over from: order 2438 before 2437 (bug 55). So every lane
// waits for a check again, in a window read from now on; the readings and
// checks of the takeover as it was are ignored (takeoverGen).
func (w *Worker) restartTakeover(now time.Time) {
	w.takeoverGen.Add(1)
	w.sched.restartTakeover(now.Add(w.cfg.AckWait+w.parkGrace()), now)
	w.takeoverBounds, w.clearWindow, w.takeoverDoubted, w.clearQueue = nil, nil, false, nil
	w.wantStreamLast.Store(false)
	clear(w.suspectKeys)
	w.m.takeovers.Inc()
	w.log.Info("a takeover was running: beginning it again, its window read from now on")
}

// onTakeoverCheck runs on every reading of the consumer during a takeover.
// The first that could be right fixes the window (F, D] the lane checks
// look at, unless doubted ones fixed one before (doubted.go). Each ends the
// takeover once the server's unacknowledged messages are all accounted for
// by this worker: what this worker holds now is compared with the server's
// count of a moment ago, so messages that arrived in between are not
// counted as ours (they would hide as many of the other worker's: found by
// TestRepinnedWorkerWaitsForTheOthersMessages), nor are the stale parks of a
// pin this worker lost (scheduler.losePin), nor the attempts it began under
// that pin and that still run (scheduler.ownInflight): their messages may
// be held by the worker pinned meanwhile as well, or settled by it.
// Counted, they hid as many of another worker's messages: in the long
// cluster chaos run on 1075ee7 a consumer leader change gave a worker's 16
// messages in flight, waiting for their send claims, to the other worker;
// the first, pinned again a second later, counted them as its own, ended
// its takeover with 33 lanes unchecked, and sent a chat's order 08163
// while 08162 was still with the other worker (bug 56). Messages acked in
// between make the wait longer, never shorter.
func (w *Worker) onTakeoverCheck(c ackCount) {
	if w.stopCheck == nil || c.gen != w.takeoverGen.Load() {
		return // over, or read before the takeover began again
	}
	own := w.ownCountSince(c)
	ours := own.total()
	if !plausibleReading(c, ours, w.takeoverBounds) {
		// Not this consumer as it is: its leader cannot count fewer
		// unacknowledged messages than this worker holds, nor have
		// delivered or acked less than a reading before said. A consumer
		// leader elected a moment before answered so in the long cluster
		// chaos run on 5b7773a (0 unacknowledged while the worker held 28):
		// the takeover ended on it, and two chats' new messages went out
		// before the ones a killed worker had held (bug 50). The next
		// reading decides. Readings come every 50 ms: the first of a
		// takeover is logged at info, the rest at debug.
		level := slog.LevelDebug
		if !w.takeoverDoubted {
			w.takeoverDoubted, level = true, slog.LevelInfo
		}
		w.log.Log(context.Background(), level, "a reading of the consumer cannot be right (a leader just elected?); waiting for the next",
			append([]any{"ack_floor", c.floor, "delivered", c.delivered, "unacked", c.pending, "ours", ours}, own.logValues()...)...)
		w.windowWhileDoubted(c)
		return
	}
	w.wantStreamLast.Store(false)
	if w.takeoverBounds == nil {
		w.takeoverBounds = &c
	}
	if b := w.takeoverBounds; w.arrivals.covers(b.floorC, b.deliveredC) {
		// Every delivery the consumer may still count unacknowledged came
		// to this worker, under its pin: no other worker holds anything,
		// and no lane needs a check (arrivalRun). Parks stay as they are:
		// a message this worker handed back comes back to it.
		w.log.Info("takeover over: every delivery since the consumer's ack floor came to this worker",
			"ack_floor_consumer", b.floorC, "delivered_consumer", b.deliveredC,
			"lanes_unchecked", len(w.clearQueue)+w.clearsRunning, "took", w.now().Sub(w.takeoverSince))
		w.endQuarantine(takeoverDelivered)
		return
	}
	if w.clearWindow == nil {
		w.clearWindow = &c
		// What a takeover decides from, so that a recipient's order can be
		// traced after the fact: the window its lane checks read and the
		// counts it ends on.
		w.log.Info("taking over: checking each recipient's messages a previous worker may hold",
			"ack_floor", c.floor, "delivered", c.delivered, "unacked", c.pending)
		w.startClears()
	}
	if foreign := c.pending - ours; foreign > 0 {
		w.verifySuspects(c, ours, foreign, nil)
		return
	}
	if returned := w.sched.returnedHeld(w.heldFrom); len(returned) > 0 {
		// Some of ours may be settled by another worker already, and no
		// longer the consumer's: the verification decides (returned.go).
		w.verifySuspects(c, ours, 0, returned)
		return
	}
	w.endOnCount("takeover over: every unacknowledged message is this worker's",
		"unacked", c.pending, "ours", ours)
}

// endOnCount ends the takeover on the consumer's count (onTakeoverCheck,
// onSuspectsVerified), logging why with the figures it ended on.
func (w *Worker) endOnCount(why string, figures ...any) {
	w.log.Info(why, append(figures, "lanes_unchecked", len(w.clearQueue)+w.clearsRunning,
		"took", w.now().Sub(w.takeoverSince))...)
	w.apply(w.sched.dropStaleParks())
	w.endQuarantine(takeoverCounted)
}

// plausibleReading reports whether a reading c of the consumer, taken while
// this worker held ours of its unacknowledged messages, can be the
// consumer as it is: it counts at least those, and it has delivered and
// acked at least as much as the takeover's first reading (first, nil
// before one was taken).
func plausibleReading(c ackCount, ours int, first *ackCount) bool {
	if c.pending < ours {
		return false
	}
	return first == nil || (c.delivered >= first.delivered && c.floor >= first.floor)
}

// ownCount is the consumer's unacknowledged messages this worker surely
// holds, as of a reading, part by part (total adds them up): logged with a
// doubted reading, so that an over-count can be traced to what was counted.
type ownCount struct {
	incoming, held, ownParked, ownInflight, arrivedSince int
}

func (o ownCount) total() int {
	return o.incoming + o.held + o.ownParked + o.ownInflight - o.arrivedSince
}

// logValues are the parts as log attributes.
func (o ownCount) logValues() []any {
	return []any{"incoming", o.incoming, "held", o.held, "own_parked", o.ownParked,
		"own_inflight", o.ownInflight, "arrived_since", o.arrivedSince}
}

// ownCountSince counts the consumer's unacknowledged messages this worker
// surely holds, as of reading c: what it holds now, less what arrived since
// c was taken (scheduler.counts).
func (w *Worker) ownCountSince(c ackCount) ownCount {
	n := w.sched.counts(w.heldFrom)
	return ownCount{incoming: len(w.incoming), held: n.held, ownParked: n.ownParked,
		ownInflight: n.ownInflight, arrivedSince: int(w.received.Load() - c.received)}
}

// startClears starts the checks of the lanes that wait for one, at most
// maxClearing at a time: inherited holds at once, a takeover's lanes once
// their window is known (Worker.clearWindow). After a check failed it
// starts none until clearsRetryAt, which it returns while checks wait for
// it.
func (w *Worker) startClears() time.Time {
	w.verifyQueue = append(w.verifyQueue, w.sched.takeVerifies()...)
	if w.clearWindow != nil {
		w.clearQueue = append(w.clearQueue, w.sched.takeClears()...)
	}
	if w.now().Before(w.clearsRetryAt) {
		if len(w.verifyQueue) > 0 || (w.clearWindow != nil && len(w.clearQueue) > 0) {
			return w.clearsRetryAt
		}
		return time.Time{}
	}
	for w.clearsRunning < maxClearing && len(w.verifyQueue) > 0 {
		c := w.verifyQueue[0]
		w.verifyQueue = w.verifyQueue[1:]
		w.clearsRunning++
		ctx := w.sendCtx
		go func() {
			suspects, upTo, err := w.holdSuspects(ctx, c)
			select {
			case w.clears <- cleared{recipient: c.recipient, suspects: suspects, err: err, verify: true, recheck: c.recheck, first: c.first, upTo: upTo}:
			case <-ctx.Done():
			}
		}()
	}
	if w.clearWindow == nil {
		return time.Time{}
	}
	b, gen := *w.clearWindow, w.takeoverGen.Load()
	for w.clearsRunning < maxClearing && len(w.clearQueue) > 0 {
		r := w.clearQueue[0]
		w.clearQueue = w.clearQueue[1:]
		w.clearsRunning++
		ctx := w.sendCtx
		go func() {
			suspects, keys, err := w.suspects(ctx, r, b.floor, b.delivered)
			select {
			case w.clears <- cleared{recipient: r, suspects: suspects, keys: keys, err: err, gen: gen}:
			case <-ctx.Done():
			}
		}()
	}
	return time.Time{}
}

// onCleared applies a lane's check; a check that failed (JetStream did not
// answer) is tried again.
func (w *Worker) onCleared(c cleared) {
	w.clearsRunning--
	if c.err != nil {
		w.clearFailed()
	} else {
		w.clearsBackoff = 0
	}
	if c.verify {
		if c.err != nil {
			w.log.Warn("cannot check a recipient's hold; retrying", "recipient", c.recipient, "err", c.err)
			w.verifyQueue = append(w.verifyQueue, holdCheck{recipient: c.recipient, first: c.first, recheck: c.recheck})
			return
		}
		switch {
		case c.recheck:
			w.m.suspectRechecks.Inc()
			w.log.Debug("rechecked the messages a recipient waits for after a takeover", "recipient", c.recipient, "still_out", len(c.suspects))
		case len(c.suspects) == 0:
			w.log.Debug("a hold is over: its messages are all settled", "recipient", c.recipient)
		default:
			w.log.Info("messages a recipient waits for are still out; waiting for them", "recipient", c.recipient, "count", len(c.suspects))
		}
		w.apply(w.sched.holdVerified(c.recipient, c.suspects, c.upTo, w.now()))
		return
	}
	if w.stopCheck == nil || c.gen != w.takeoverGen.Load() {
		// The takeover ended meanwhile, or began again: its lanes are
		// checked anew, in its new window.
		return
	}
	if c.err != nil {
		w.log.Warn("cannot check a recipient's messages after a takeover; retrying", "recipient", c.recipient, "err", c.err)
		w.clearQueue = append(w.clearQueue, c.recipient)
		return
	}
	if len(c.suspects) > 0 {
		w.log.Info("waiting for messages a previous worker held", "recipient", c.recipient, "suspects", c.suspects)
	}
	if w.suspectKeys == nil {
		w.suspectKeys = make(map[uint64]string)
	}
	for i, seq := range c.suspects {
		if i < len(c.keys) {
			w.suspectKeys[seq] = c.keys[i]
		}
	}
	now := w.now()
	w.apply(w.sched.laneCleared(c.recipient, c.suspects, now.Add(w.cfg.AckWait), now))
}

// clearFailed holds the queued checks back after one failed: for
// minClearsBackoff, twice as long after each failure since, up to
// maxClearsBackoff. Checks already running when the first failed do not
// lengthen the pause.
func (w *Worker) clearFailed() {
	now := w.now()
	if now.Before(w.clearsRetryAt) {
		return
	}
	w.clearsBackoff = min(max(w.clearsBackoff*2, minClearsBackoff), maxClearsBackoff)
	w.clearsRetryAt = now.Add(w.clearsBackoff)
}

// holdSuspects reads the consumer's last delivered sequence, then the
// recipient's messages from the hold's first up to it, and returns those
// not settled, and the last sequence read.
func (w *Worker) holdSuspects(ctx context.Context, c holdCheck) ([]uint64, uint64, error) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	info, err := jetstream.Hedge(qctx, jetstream.HedgeEvery, w.res.Consumer.Info)
	cancel()
	if err != nil {
		return nil, 0, err
	}
	// Below the consumer's ack floor everything is acked or terminated,
	// settled whatever the records say (a message terminated without its
	// give-up mark would otherwise look out for ever: bug 46).
	out, _, err := w.suspects(ctx, c.recipient, max(c.first-1, info.AckFloor.Stream), info.Delivered.Stream)
	return out, info.Delivered.Stream, err
}

// suspects reads the recipient's messages in (floor, delivered] and
// returns the sequences of those not settled, and their keys: a previous
// worker may hold them. It reads them from the stream's leader (jetstream.NextMsg), one
// request per message: a direct get may be answered by a replica that is
// behind, and a message missing from the read would let the recipient's
// later one go first.
func (w *Worker) suspects(ctx context.Context, recipient string, floor, delivered uint64) ([]uint64, []string, error) {
	if delivered <= floor {
		return nil, nil, nil
	}
	subject := w.names.Subject(w.name, recipient)
	stream := w.streamOf(w.res.Consumer)
	var out, seqs []uint64
	var outKeys, keys []string
	// settle adds the unsettled ones of what was read to out, in one
	// batched read of their records instead of two reads per message.
	settle := func() error {
		if len(keys) == 0 {
			return nil
		}
		settled, err := w.store.settledKeys(ctx, keys)
		if err != nil {
			return err
		}
		for i, k := range keys {
			if !settled[k] {
				out, outKeys = append(out, seqs[i]), append(outKeys, k)
			}
		}
		keys, seqs = keys[:0], seqs[:0]
		return nil
	}
	for seq := floor + 1; seq <= delivered; {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := w.store.nextMsg(gctx, stream, subject, seq)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		if m == nil || m.Seq > delivered {
			break
		}
		seq = m.Seq + 1
		n, _, perr := w.parse(m.Subject, m.Header, m.Data)
		switch {
		case perr != nil:
			// Poison: dead-lettered when it arrives, never sent;
			// nothing of the recipient waits for it.
			continue
		case n.Scheduled(w.now()):
			// Scheduled: handed back until its not_before, and it
			// holds back nothing of the recipient.
			continue
		}
		keys, seqs = append(keys, n.Key), append(seqs, m.Seq)
		if len(keys) == maxLookupBatch {
			if err := settle(); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := settle(); err != nil {
		return nil, nil, err
	}
	return out, outKeys, nil
}

// quarantineExpired reports whether a takeover runs past its deadline: the
// other worker's messages should have come back by then.
func (w *Worker) quarantineExpired(now time.Time) bool {
	return w.stopCheck != nil && !w.sched.inTakeover(now)
}

// How a takeover ended, the label of takeover_duration_seconds.
const (
	takeoverCounted   = "count"      // every unacknowledged message was this worker's
	takeoverDelivered = "deliveries" // every delivery in the window came to this worker (arrivalRun)
	takeoverDeadline  = "deadline"   // the ack wait and a grace passed
)

// endQuarantine ends the takeover, as end says (takeoverCounted,
// takeoverDeadline): every lane may send.
func (w *Worker) endQuarantine(end string) {
	if w.stopCheck != nil {
		w.stopCheck()
		w.stopCheck = nil
		w.m.takeoverSeconds.WithLabelValues(end).Observe(w.now().Sub(w.takeoverSince).Seconds())
	}
	w.takeoverBounds, w.clearWindow = nil, nil
	w.wantStreamLast.Store(false)
	w.clearQueue = nil
	clear(w.suspectKeys)
	w.sched.endTakeover(w.now())
}
