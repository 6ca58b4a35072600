package delivery

import (
	"container/heap"
	"context"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"
)

// parkGap separates the NAK deadlines of messages parked together, so that
// JetStream redelivers them in stream order.
const parkGap = time.Millisecond

// ReconnectSettle is how long a worker sends nothing after its connection to
// NATS comes back. Another worker that had requests in flight when NATS went
// away writes their delivery records once it reconnects, and a message it
// sent can be handed to this worker at once (a nats-server that crashed
// forgets its most recent deliveries). It covers the NATS clients' largest
// reconnect delay (jetstream.Options.MaxReconnectWait, 2s) and a record
// write.
const ReconnectSettle = 3 * time.Second

// dispatch is the dispatcher loop: the only goroutine that touches lanes.
// It returns when ctx ends.
func (w *Worker) dispatch(ctx context.Context) {
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	w.cancelSends = cancelSends
	w.sendCtx = sendCtx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	keepalive := time.NewTicker(w.cfg.AckWait / 3)
	defer keepalive.Stop()
	housekeeping := time.NewTicker(time.Second)
	defer housekeeping.Stop()
	for {
		next := w.launch()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(w.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case j := <-w.incoming:
			w.onArrival(j)
			for more := true; more; { // take what else arrived, then launch once
				select {
				case j := <-w.incoming:
					w.onArrival(j)
				default:
					more = false
				}
			}
		case r := <-w.results:
			w.onResult(r)
		case <-timer.C:
		case <-w.wake:
		case <-w.state.changed:
		case c := <-w.takeover:
			w.onTakeoverCheck(c)
		case <-w.pinLost:
			w.onPinLost()
		case <-keepalive.C:
			w.keepAlive()
		case <-housekeeping.C:
			w.housekeep()
		}
	}
}

// laneFor returns the chat's lane, creating it. A new lane honours a hold
// left by another worker (or an earlier life of this one): later messages of
// the chat wait until the parked ones come back.
func (w *Worker) laneFor(chat int64) *lane {
	if l, ok := w.lanes[chat]; ok {
		return l
	}
	var lim *rate.Limiter
	if chat < 0 {
		lim = rate.NewLimiter(rate.Limit(w.cfg.GroupPerMinute/60), 1)
	} else {
		lim = rate.NewLimiter(rate.Limit(w.cfg.ChatRate), 1)
	}
	l := &lane{chat: chat, limiter: lim, heapIdx: -1}
	if h, ok := w.state.holdFor(chat); ok && w.now().Before(h.Until.Add(w.parkGrace())) {
		l.addParked(h.First, h.Until)
		l.holdUntil = h.Until
	}
	w.lanes[chat] = l
	return l
}

// parkGrace is how long past its deadline a parked message may take to come
// back before the lane stops waiting for it.
func (w *Worker) parkGrace() time.Duration { return w.cfg.AckWait + 10*time.Second }

// onArrival places a delivered message in its chat's lane.
func (w *Worker) onArrival(j *job) {
	if j.pinEpoch < w.pinEpoch.Load() {
		// Delivered while this worker was pinned, processed after it lost
		// the pin: it goes back like the rest of what it held.
		w.handBack(w.laneFor(j.chat), []*job{j})
		return
	}
	if w.lastArrival.IsZero() || j.received.Sub(w.lastArrival) >= w.cfg.TakeoverGap || j.pinEpoch != w.arrivalEpoch {
		w.startTakeoverCheck(j.received)
	}
	w.lastArrival, w.arrivalEpoch = j.received, j.pinEpoch
	l := w.laneFor(j.chat)
	l.touched = j.received
	l.unpark(j.seq)
	switch {
	case l.mustPark(j.seq):
		// A message of this chat before it is parked: wait behind it.
		w.park(l, []*job{j}, l.lastDeadline().Sub(w.now())+parkGap)
	case len(l.queue) >= w.cfg.LaneCap:
		// A hot chat: hand the overflow back, to return when the lane has
		// worked through what it holds, instead of filling MaxAckPending.
		interval := time.Duration(float64(time.Second) / float64(l.limiter.Limit()))
		w.park(l, []*job{j}, time.Duration(len(l.queue))*interval)
	default:
		if l.insert(j) {
			w.log.Debug("duplicate delivery attached", "seq", j.seq)
		}
	}
	if len(l.parked) == 0 && !l.holdUntil.IsZero() {
		w.releaseHold(l)
	}
	w.reschedule(l)
}

// park sends jobs (in stream order) back to the stream, the first after
// delay, and records them in the lane, so that anything later of the chat
// waits behind them.
func (w *Worker) park(l *lane, jobs []*job, delay time.Duration) {
	now := w.now()
	delay = max(delay, parkGap)
	for i, j := range jobs {
		d := delay + time.Duration(i)*parkGap
		if err := j.msg.NakWithDelay(d); err != nil {
			w.log.Warn("cannot hand a message back; it will be redelivered after the ack wait", "seq", j.seq, "err", err)
			d = max(d, w.cfg.AckWait)
		}
		l.addParked(j.seq, now.Add(d))
	}
	// Persist the hold so that a worker starting later (after a crash, or
	// the standby) makes this chat's later messages wait too. Written only
	// when the deadline outgrows the recorded one; it then jumps ahead by a
	// margin, so a hot chat costs a write now and then, not one per message.
	last := l.lastDeadline()
	if last.After(l.holdUntil) || l.parked[0].seq < w.recordedFirst(l) {
		l.holdUntil = last.Add(30 * time.Second)
		w.persist(holdOp{chat: l.chat, h: hold{First: l.parked[0].seq, Until: l.holdUntil}})
	}
}

// recordedFirst is the First of the lane's persisted hold, or the maximum
// sequence when there is none.
func (w *Worker) recordedFirst(l *lane) uint64 {
	if h, ok := w.state.holdFor(l.chat); ok {
		return h.First
	}
	return ^uint64(0)
}

// releaseHold removes the persisted hold once every parked message is back.
func (w *Worker) releaseHold(l *lane) {
	l.holdUntil = time.Time{}
	w.persist(holdOp{chat: l.chat, clear: true})
}

// reschedule puts the lane in the ready heap of its head's priority, at the
// time its chat limit allows the next send, or takes it out.
func (w *Worker) reschedule(l *lane) {
	if l.heap != nil {
		heap.Remove(l.heap, l.heapIdx)
	}
	if !l.schedulable() {
		return
	}
	now := w.now()
	l.readyAt = now
	if l.notBefore.After(now) {
		l.readyAt = l.notBefore
	}
	if _, dead := w.state.deadChat(w.state.resolve(l.chat)); !dead {
		if tokens := l.limiter.TokensAt(now); tokens < 1 {
			l.readyAt = later(l.readyAt, now.Add(time.Duration((1-tokens)/float64(l.limiter.Limit())*float64(time.Second))))
		}
	}
	s := w.scheds[1]
	if l.queue[0].transactional() {
		s = w.scheds[0]
	}
	if l.readyAt.After(now) {
		heap.Push(&s.waiting, l)
	} else {
		heap.Push(&s.eligible, l)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// launch starts as many sends as the limits allow now, and returns when the
// dispatcher should look again (zero: only on an event).
func (w *Worker) launch() time.Time {
	var next time.Time
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for w.inflight < w.cfg.MaxInFlight {
		now := w.now()
		if w.halted.Load() {
			return next
		}
		if rc := w.js.Conn().Stats().Reconnects; rc != w.reconnects {
			w.reconnects = rc
			w.settleUntil = now.Add(ReconnectSettle)
			w.log.Info("reconnected to NATS: waiting for other workers' delivery records before sending", "for", ReconnectSettle)
		}
		if now.Before(w.settleUntil) {
			soonest(w.settleUntil)
			return next
		}
		if !w.quarantineUntil.IsZero() {
			if now.Before(w.quarantineUntil) {
				soonest(w.quarantineUntil)
				return next
			}
			w.log.Warn("messages held by a previous worker did not all come back in time; sending anyway",
				"waited", w.cfg.AckWait+w.parkGrace())
			w.endQuarantine()
		}
		if until := w.state.pausedUntil(); now.Before(until) {
			w.m.paused.Set(1)
			soonest(until)
			return next
		}
		w.m.paused.Set(0)
		st := w.breaker.State()
		if st == gobreaker.StateOpen {
			soonest(time.Unix(0, w.breakerOpenedAt.Load()).Add(w.cfg.BreakerOpen + time.Millisecond))
			return next
		}
		if st == gobreaker.StateHalfOpen && w.inflight > 0 {
			return next // one probe at a time
		}
		l := w.pickLane(now, soonest)
		if l == nil {
			return next
		}
		target := w.state.resolve(l.chat)
		_, dead := w.state.deadChat(target)
		var botRes *rate.Reservation
		if !dead { // a dead chat's messages cost no request, so no token
			if botRes, w.botNext = w.botNext, nil; botRes == nil {
				botRes = w.botLimit.ReserveN(now, 1)
			}
			if d := botRes.DelayFrom(now); d > 0 {
				// Keep the token for its instant: cancelling and reserving
				// again after the timer fired (a little late) would lose the
				// lateness from the rate, every time.
				w.botNext = botRes
				soonest(now.Add(d))
				return next
			}
		}
		heap.Remove(l.heap, l.heapIdx)
		j := l.queue[0]
		l.queue = l.queue[1:]
		l.inflight = j
		j.botRes = botRes
		if !dead {
			j.laneRes = l.limiter.ReserveN(l.tokenDue(now), 1)
		}
		w.inflight++
		w.sends.Add(1)
		go func() {
			defer w.sends.Done()
			w.results <- w.process(w.sendCtx, j, target)
		}()
		if st == gobreaker.StateHalfOpen {
			return next
		}
	}
	return next
}

// pickLane returns the lane to send from next: among the lanes whose chat
// limit allows a send now, transactional before bulk, then the one whose
// head message is oldest. It reports the next time a lane becomes eligible
// otherwise.
func (w *Worker) pickLane(now time.Time, soonest func(time.Time)) *lane {
	for _, s := range w.scheds {
		if t := s.promote(now); !t.IsZero() {
			soonest(t)
		}
		if s.eligible.Len() > 0 {
			return s.eligible.lanes[0]
		}
	}
	if w.botNext != nil {
		// Nothing to send at the reserved instant: give the token back.
		w.botNext.CancelAt(now)
		w.botNext = nil
	}
	return nil
}

// onResult applies a finished attempt to its lane.
func (w *Worker) onResult(r result) {
	w.inflight--
	j := r.job
	l := w.laneFor(j.chat)
	l.inflight = nil
	l.touched = r.at
	if !r.called {
		// No request was made: the tokens are given back.
		if j.botRes != nil {
			j.botRes.CancelAt(r.at)
		}
		if j.laneRes != nil {
			j.laneRes.CancelAt(r.at)
		}
	}
	j.botRes, j.laneRes = nil, nil
	switch r.kind {
	case resDone, resDeadChat:
	case resNoCall, resCanceled:
		if j.pinEpoch < w.pinEpoch.Load() {
			w.handBack(l, []*job{j}) // the pin moved while it was in flight
			break
		}
		l.queue = append([]*job{j}, l.queue...)
		if r.delay > 0 {
			l.notBefore = r.at.Add(r.delay)
		}
	case resHalt:
		l.queue = append([]*job{j}, l.queue...)
		if w.halted.CompareAndSwap(false, true) {
			w.m.halted.Set(1)
			go w.probeToken()
		}
	case resRetryAfter:
		// Telegram does not say which limit was hit, so nothing at all is
		// sent until the pause has passed; the message goes back to the
		// stream for that long, the rest of its chat behind it.
		until := r.at.Add(r.delay)
		w.persist(pauseOp{p: pause{Until: until, Reason: "429 for chat " + itoa(j.chat)}})
		w.parkLane(l, j, r.delay)
	case resBackoff:
		w.parkLane(l, j, r.delay)
	}
	w.reschedule(l)
}

// parkLane parks the failed head and every message of the chat held behind it.
func (w *Worker) parkLane(l *lane, head *job, delay time.Duration) {
	jobs := append([]*job{head}, l.queue...)
	l.queue = nil
	w.park(l, jobs, delay)
}

// probeToken checks a rejected token with getMe until it is accepted again
// (a transient 401 from Telegram, or the operator fixed the bot) or the
// worker stops.
func (w *Worker) probeToken() {
	t := time.NewTicker(w.cfg.HaltProbe)
	defer t.Stop()
	for {
		select {
		case <-w.sendCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(w.sendCtx, 30*time.Second)
		_, err := w.api.GetMe(ctx)
		cancel()
		if err == nil {
			w.log.Info("Telegram accepts the bot token again: sending resumes")
			w.halted.Store(false)
			w.m.halted.Set(0)
			w.poke()
			return
		}
		w.log.Error("bot token still rejected", "err", err)
	}
}

// keepAlive resets the ack timer of messages held longer than a third of
// the ack wait, so JetStream does not redeliver what is only waiting its turn.
func (w *Worker) keepAlive() {
	now := w.now()
	limit := w.cfg.AckWait / 3
	for _, l := range w.lanes {
		for _, j := range l.queue {
			if now.Sub(j.progress) >= limit {
				_ = j.msg.InProgress()
				j.progress = now
			}
		}
		if j := l.inflight; j != nil && now.Sub(j.progress) >= limit {
			_ = j.msg.InProgress()
			j.progress = now
		}
	}
}

// housekeep forgets parked messages that never came back, drops idle lanes
// and publishes the gauges.
func (w *Worker) housekeep() {
	now := w.now()
	var held, parked int
	for chat, l := range w.lanes {
		if n := l.expireParked(now, w.parkGrace()); n > 0 {
			w.log.Warn("parked messages did not come back; no longer waiting for them", "chat_id", chat, "count", n)
		}
		if len(l.parked) == 0 && !l.holdUntil.IsZero() {
			w.releaseHold(l)
		}
		if l.idle() && now.Sub(l.touched) > time.Minute && l.limiter.TokensAt(now) >= 1 {
			delete(w.lanes, chat)
			continue
		}
		held += len(l.queue)
		parked += len(l.parked)
		w.reschedule(l)
	}
	w.m.held.Set(float64(held))
	w.m.parked.Set(float64(parked))
	w.m.lanes.Set(float64(len(w.lanes)))
	w.m.inFlight.Set(float64(w.inflight))
	w.statsMu.Lock()
	w.held, w.parkedN, w.lanesN, w.flight = held, parked, len(w.lanes), w.inflight
	w.statsMu.Unlock()
}

// shutdown runs after the consumer stopped: requests in flight get
// ShutdownTimeout to finish, then every held message goes back to the stream
// in order (behind its chat's parked ones), and pending state writes flush.
func (w *Worker) shutdown() {
	deadline := time.NewTimer(w.cfg.ShutdownTimeout)
	defer deadline.Stop()
	for w.inflight > 0 {
		select {
		case r := <-w.results:
			w.onResult(r)
		case <-deadline.C:
			w.log.Warn("requests still in flight at the shutdown deadline; cancelling them", "in_flight", w.inflight)
			w.cancelSends()
			for w.inflight > 0 {
				w.onResult(<-w.results)
			}
		}
	}
	w.cancelSends()
	w.sends.Wait()
	for more := true; more; {
		select {
		case j := <-w.incoming:
			w.onArrival(j)
		default:
			more = false
		}
	}
	returned := w.handBackAll()
	w.closePersist()
	w.log.Info("worker stopped", "handed_back", returned)
}

// onPinLost runs when another worker was pinned: only the pinned worker
// sends, because JetStream hands it what this one was delivered as soon as
// it thinks their ack wait expired (at once after a nats-server restart),
// and two workers holding one message send it twice, or a chat out of
// order. So this worker hands back everything it holds, in order; requests
// in flight finish, and what they leave over goes back too (onResult).
// Messages already on their way to the dispatcher are handed back as they
// arrive (onArrival).
func (w *Worker) onPinLost() {
	if n := w.handBackAll(); n > 0 {
		w.log.Warn("another worker is pinned: handed back the messages this one held", "count", n)
	}
	for _, l := range w.lanes {
		w.reschedule(l)
	}
}

// handBackAll returns every queued message to the stream, lane by lane, and
// reports how many.
func (w *Worker) handBackAll() int {
	n := 0
	for _, l := range w.lanes {
		if len(l.queue) == 0 {
			continue
		}
		if l.heap != nil { // out of its heap before its queue empties: the heap orders by the head
			heap.Remove(l.heap, l.heapIdx)
		}
		n += len(l.queue)
		w.handBack(l, l.queue)
		l.queue = nil
	}
	return n
}

// handBack returns jobs of lane l (in stream order, none of them still
// queued) to the stream: behind the lane's parked messages if it has any,
// else at once, so they come back in order.
func (w *Worker) handBack(l *lane, jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	if len(l.parked) > 0 {
		w.park(l, jobs, l.lastDeadline().Sub(w.now())+parkGap)
		return
	}
	for _, j := range jobs {
		_ = j.msg.Nak()
	}
}
