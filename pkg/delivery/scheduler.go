package delivery

import (
	"container/heap"
	"slices"
	"time"

	"golang.org/x/time/rate"
)

// parkGap separates the NAK deadlines of messages parked together, so that
// JetStream redelivers them in stream order.
const parkGap = time.Millisecond

// holdMargin is how far past the last parked deadline a written hold
// reaches: a hot recipient that keeps parking costs a hold write now and
// then, not one per message.
const holdMargin = 30 * time.Second

// idleLaneAfter is how long an empty lane is kept before it is dropped (its
// limiter with it: it remembers the recipient's last send).
const idleLaneAfter = time.Minute

// scheduler decides which held message is sent next, and what goes back to
// the stream when a message must wait there. It is a plain data structure:
// no NATS, no HTTP, no goroutines, no clock. Time comes in as an argument
// and what must happen to the stream (NAKs, hold records) comes out as
// [effects], which the worker carries out. One goroutine (the worker's
// dispatcher) owns it.
//
// It keeps a lane per recipient: that recipient's messages sorted by stream
// sequence, at most one in flight, so a recipient's messages never overtake
// each other, while lanes are independent, so a recipient that must wait
// (its own limit, a retry backoff) never holds back the others. Lanes wait
// in a heap ordered by the time their recipient's limit next allows a send;
// once allowed they move to a heap ordered by the stream sequence of their
// head, and the oldest message among the recipients allowed to send goes
// first. There is a pair of heaps per priority class: transactional before
// bulk.
type scheduler struct {
	cfg   schedConfig
	view  schedView
	lanes map[string]*lane
	// classes holds the schedulable lanes by the priority of their head:
	// transactional first, then bulk.
	classes [2]*class
	bot     *botLimiter
	// botNext is a channel-wide token reserved for a future instant, kept
	// rather than cancelled so that timer lateness is not lost from the
	// rate.
	botNext  *botReservation
	inflight int
	// shedBulk keeps bulk lanes from sending (graceful degradation: a 429
	// storm or a backlog); they wait, or expire at their own deadline.
	shedBulk bool
	// During a takeover (until takeoverUntil) a lane sends only once it is
	// cleared: the worker has checked which of its recipient's messages a
	// previous worker may still hold (takeover.go). clearing holds the
	// lanes being checked; toClear the ones the worker has yet to start.
	takeoverUntil time.Time
	clearing      map[string]bool
	toClear       []string
	// toVerify are lanes with an inherited hold the worker has yet to
	// check (holdVerified).
	toVerify []holdCheck
	// pinLost is set from the moment the worker lost the pin until it is
	// pinned again: what it parks meanwhile is stale (losePin).
	pinLost bool
}

// holdCheck asks the worker which of a recipient's messages from first on a
// previous worker may still hold.
type holdCheck struct {
	recipient string
	first     uint64
	// recheck: an early check of a takeover's suspects
	// (scheduler.recheckSuspects), not of a hold or of overdue parks.
	recheck bool
}

// suspectRecheck is how long after a takeover's check of a lane that found
// suspects the lane first checks again whether they were settled, if later
// messages of its recipient wait behind them; the wait doubles after each
// check, until the suspects are overdue (housekeep). A suspect may be
// settled by the worker that held it without ever coming back: one whose
// request was in flight when the pin moved away from a live worker is
// recorded and acked by that worker a moment later. Waiting for its
// deadline (the ack wait) and the grace of an overdue park held its
// recipient back for 30 s with the defaults (50 s in the test that found
// it, TestNewPinnedWorkerSendsOnceTheFormerOneDeliveredWhatItHeld; the rare
// CI failure of TestRepinnedWorkerDoesNotCountStaleParksAsItsOwn). On a
// cluster the pin moves from a live worker at every election of the
// consumer's leader.
const suspectRecheck = time.Second

// schedConfig are the scheduler's limits.
type schedConfig struct {
	// rate is the channel-wide send rate.
	rate rate.Limit
	// strictRate keeps every second's sends at the rate, even those that
	// make good a stall (Config.StrictRate, botPeak).
	strictRate bool
	// laneRate is a recipient's send rate.
	laneRate func(recipient string) rate.Limit
	// laneCap bounds the messages of one lane held in memory; more go back
	// to the stream behind them.
	laneCap int
	// parkGrace is how long past its deadline a parked message may take to
	// come back before the worker checks whether it is still out
	// (housekeep).
	parkGrace time.Duration
	// recheck is how long a parked message found still out waits before
	// the next check: the consumer's ack wait.
	recheck time.Duration
}

// schedView is what the scheduler reads of the shared recipient state.
type schedView interface {
	// hold returns the hold another worker (or an earlier life of this
	// one) left for a recipient: its later messages wait until the parked
	// ones are back.
	hold(recipient string) (hold, bool)
	// dead reports whether messages to the recipient are dead-lettered
	// without a request, and so need no send token.
	dead(recipient string) bool
}

// class is the pair of heaps of one priority.
type class struct {
	waiting  laneHeap // by readyAt
	eligible laneHeap // by head sequence
}

// effects is what the worker must do to the stream after a scheduler call,
// in order.
type effects struct {
	// naks hand messages back to the stream: each is redelivered after its
	// delay (at once when the delay is zero).
	naks []nak
	// holds are shared hold records to write or clear.
	holds []holdChange
}

type nak struct {
	j     *job
	delay time.Duration
}

type holdChange struct {
	recipient string
	h         hold
	clear     bool
}

func (e *effects) add(o effects) {
	e.naks = append(e.naks, o.naks...)
	e.holds = append(e.holds, o.holds...)
}

func newScheduler(cfg schedConfig, view schedView) *scheduler {
	return &scheduler{
		cfg:      cfg,
		view:     view,
		lanes:    map[string]*lane{},
		clearing: map[string]bool{},
		classes:  [2]*class{{eligible: laneHeap{bySeq: true}}, {eligible: laneHeap{bySeq: true}}},
		bot:      newBotLimiter(cfg.rate, cfg.strictRate),
	}
}

// laneFor returns the recipient's lane, creating it. A new lane honours a
// hold left by another worker (or an earlier life of this one): it sends
// nothing until the worker has checked which of the parked messages are
// still out (holdVerified); its later messages wait in the lane meanwhile.
// The hold names only the first parked message, which may have come back
// and been sent long ago: trusting it blindly kept a recipient waiting for
// a message that never returns, and every worker life that inherited it
// pushed it further (found by the chaos suite).
func (s *scheduler) laneFor(recipient string, now time.Time) *lane {
	if l, ok := s.lanes[recipient]; ok {
		return l
	}
	l := &lane{key: recipient, limiter: rate.NewLimiter(s.cfg.laneRate(recipient), 1), heapIdx: -1, touched: now}
	if h, ok := s.view.hold(recipient); ok && now.Before(h.Until.Add(s.cfg.parkGrace)) {
		l.verify = &h
		l.holdUntil = h.Until
		s.toVerify = append(s.toVerify, holdCheck{recipient: recipient, first: h.First})
	}
	s.lanes[recipient] = l
	return l
}

// takeVerifies returns the inherited holds to check, and forgets them.
func (s *scheduler) takeVerifies() []holdCheck {
	out := s.toVerify
	s.toVerify = nil
	return out
}

// holdVerified applies the check of an inherited hold, or of parked
// messages overdue (housekeep): suspects are the recipient's messages from
// the hold's first to upTo (the consumer's last delivered sequence when the
// check began) that are neither settled nor held here. They join the lane
// as parked until the hold's deadline at least; a parked message in that
// range that is not a suspect is settled, and the lane no longer waits for
// it; with nothing parked, the hold is released. The hold is not extended:
// only this lane's own parking writes a later one.
func (s *scheduler) holdVerified(recipient string, suspects []uint64, upTo uint64, now time.Time) effects {
	l, ok := s.lanes[recipient]
	if !ok || l.verify == nil {
		return effects{}
	}
	h := *l.verify
	recheck := l.rechecking
	l.verify, l.rechecking = nil, false
	l.parked = slices.DeleteFunc(l.parked, func(p parkedMsg) bool {
		return p.seq >= h.First && p.seq <= upTo && !slices.Contains(suspects, p.seq)
	})
	for _, seq := range suspects {
		if p, ok := l.parkedAt(seq); ok {
			// Parked here and still out: overdue, or earlier than the
			// hold. It waits until the hold's deadline, then is checked
			// again. An early recheck of suspects changes nothing of
			// those still out: each keeps its deadline.
			if !recheck {
				p.deadline, p.stale = later(p.deadline, h.Until), p.stale && s.pinLost
			}
			continue
		}
		s.suspect(l, seq, h.Until)
	}
	var eff effects
	switch {
	case len(l.parked) == 0:
		eff.holds = append(eff.holds, s.releaseHold(l))
	case l.parked[0].seq != h.First:
		eff.holds = append(eff.holds, holdChange{recipient: l.key, h: hold{First: l.parked[0].seq, Until: later(l.holdUntil, l.lastDeadline())}})
	}
	s.reschedule(l, now)
	return eff
}

// arrive places a delivered message in its recipient's lane: in sequence
// order, behind the lane's parked messages (back to the stream, behind
// them), or back to the stream when the lane is full. A redelivery of a
// message the lane already holds is attached to it (dup).
func (s *scheduler) arrive(j *job, now time.Time) (eff effects, dup bool) {
	l := s.laneFor(j.lane, now)
	l.touched = j.received
	p, ownPark := l.unpark(j.seq)
	ownPark = ownPark && !p.stale && !p.suspect
	// A redelivery that is not this worker's own park coming back was
	// delivered before to a worker that may still settle it (returned.go).
	j.returned = j.delivered > 1 && !ownPark
	switch {
	case l.mustPark(j.seq) && (len(l.queue) >= s.cfg.laneCap || !l.queueBehind(j.seq)):
		// A message of this recipient before it is parked: wait behind it,
		// back in the stream. Behind suspects only, it waits in the queue
		// while the lane has room (queueBehind).
		eff = s.park(l, []*job{j}, l.lastDeadline().Sub(now)+parkGap, now)
	case len(l.queue) >= s.cfg.laneCap && j.seq < l.queue[len(l.queue)-1].seq:
		// A full lane gets a message earlier than its last one (one a
		// takeover check parked, coming back): it goes in, and the lane's
		// last goes back instead. Handed back itself, it would come back
		// to a lane still full of the later messages that wait for it,
		// for ever (found by TestRepinnedWorkerDoesNotCountStaleParksAsItsOwn).
		if dup = l.insert(j); !dup {
			last := l.queue[len(l.queue)-1]
			l.queue = l.queue[:len(l.queue)-1]
			eff = s.park(l, []*job{last}, time.Duration(len(l.queue))*l.interval(), now)
		}
	case len(l.queue) >= s.cfg.laneCap:
		// A hot recipient: hand the overflow back, to return when the lane
		// has worked through what it holds, instead of filling the
		// consumer's MaxAckPending.
		eff = s.park(l, []*job{j}, time.Duration(len(l.queue))*l.interval(), now)
	default:
		dup = l.insert(j)
	}
	if l.holdOver() {
		eff.holds = append(eff.holds, s.releaseHold(l))
	}
	s.reschedule(l, now)
	return eff, dup
}

// park sends jobs (in stream order) back to the stream, the first after
// delay, and records them in the lane, so that anything later of the
// recipient waits behind them. When the lane's last deadline outgrows the
// written hold, the hold is written again, holdMargin further.
func (s *scheduler) park(l *lane, jobs []*job, delay time.Duration, now time.Time) effects {
	var eff effects
	delay = max(delay, parkGap)
	for i, j := range jobs {
		d := delay + time.Duration(i)*parkGap
		eff.naks = append(eff.naks, nak{j: j, delay: d})
		l.addParked(j.seq, now.Add(d), s.pinLost, false)
	}
	if h, ok := s.holdChange(l); ok {
		eff.holds = append(eff.holds, h)
	}
	return eff
}

// holdChange returns the hold record to write when the lane's parked
// messages reach past the written one, or start before it.
func (s *scheduler) holdChange(l *lane) (holdChange, bool) {
	if len(l.parked) == 0 {
		return holdChange{}, false
	}
	recorded := ^uint64(0)
	if h, ok := s.view.hold(l.key); ok {
		recorded = h.First
	}
	last := l.lastDeadline()
	if !last.After(l.holdUntil) && l.parked[0].seq >= recorded {
		return holdChange{}, false
	}
	l.holdUntil = last.Add(holdMargin)
	return holdChange{recipient: l.key, h: hold{First: l.parked[0].seq, Until: l.holdUntil}}, true
}

// releaseHold forgets the lane's written hold; the returned change clears
// the record.
func (s *scheduler) releaseHold(l *lane) holdChange {
	l.holdUntil = time.Time{}
	return holdChange{recipient: l.key, clear: true}
}

// nakFailed records that a parked message could not be handed back: it
// returns when its ack wait expires, at the latest at deadline.
func (s *scheduler) nakFailed(j *job, deadline time.Time) effects {
	l, ok := s.lanes[j.lane]
	if !ok {
		return effects{}
	}
	l.addParked(j.seq, deadline, s.pinLost, false)
	var eff effects
	if h, ok := s.holdChange(l); ok {
		eff.holds = append(eff.holds, h)
	}
	return eff
}

// reschedule puts the lane in the heap of its head's priority, at the time
// its recipient's limit allows the next send, or takes it out.
func (s *scheduler) reschedule(l *lane, now time.Time) {
	if l.heap != nil {
		heap.Remove(l.heap, l.heapIdx)
	}
	if !l.schedulable() || l.verify != nil {
		return
	}
	if !l.cleared && now.Before(s.takeoverUntil) {
		if !s.clearing[l.key] {
			s.clearing[l.key] = true
			s.toClear = append(s.toClear, l.key)
		}
		return
	}
	l.readyAt = now
	if l.notBefore.After(now) {
		l.readyAt = l.notBefore
	}
	if !s.view.dead(l.key) {
		if tokens := l.limiter.TokensAt(now); tokens < 1 {
			l.readyAt = later(l.readyAt, now.Add(time.Duration((1-tokens)/float64(l.limiter.Limit())*float64(time.Second))))
		}
	}
	c := s.classes[1]
	if l.queue[0].transactional {
		c = s.classes[0]
	}
	l.headSeq = l.queue[0].seq
	if l.readyAt.After(now) {
		heap.Push(&c.waiting, l)
	} else {
		heap.Push(&c.eligible, l)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// next returns the message to send now, taking its send tokens, or nil and
// the time at which one may be due (zero: only after an arrival or a
// finished attempt). Among the lanes whose recipient limit allows a send,
// transactional goes before bulk, then the oldest head message. A message to
// a dead recipient takes no token: it costs no request.
func (s *scheduler) next(now time.Time) (*job, time.Time) {
	var wake time.Time
	soonest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	var l *lane
	for i, c := range s.classes {
		if i == 1 && s.shedBulk {
			break
		}
		soonest(c.promote(now))
		if l == nil && c.eligible.Len() > 0 {
			l = c.eligible.lanes[0]
		}
	}
	if l == nil {
		if s.botNext != nil {
			// Nothing to send at the reserved instant: give the token back.
			s.botNext.CancelAt(now)
			s.botNext = nil
		}
		return nil, wake
	}
	dead := s.view.dead(l.key)
	var botRes *botReservation
	if !dead {
		if botRes, s.botNext = s.botNext, nil; botRes == nil {
			botRes = s.bot.reserve(now)
		}
		if d := botRes.DelayFrom(now); d > 0 {
			// Keep the token for its instant: cancelling and reserving again
			// after the timer fired (a little late) would lose the lateness
			// from the rate, every time.
			s.botNext = botRes
			soonest(now.Add(d))
			return nil, wake
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
	s.inflight++
	return j, time.Time{}
}

// startTakeover makes every lane wait, until it is cleared or until until,
// for the messages a previous worker may still hold: after a start, a
// failover, or a pin regained.
func (s *scheduler) startTakeover(until, now time.Time) {
	s.takeoverUntil = until
	for _, l := range s.lanes {
		l.cleared = false
		s.reschedule(l, now)
	}
}

// restartTakeover begins a running takeover again (Worker.restartTakeover):
// every lane waits for a new check, those cleared and those being checked
// alike, until then or until, whichever is later.
func (s *scheduler) restartTakeover(until, now time.Time) {
	clear(s.clearing)
	s.toClear = nil
	s.startTakeover(later(s.takeoverUntil, until), now)
}

// endTakeover lets every lane send: the previous worker's messages are all
// back, or the wait is over.
func (s *scheduler) endTakeover(now time.Time) {
	s.takeoverUntil = time.Time{}
	clear(s.clearing)
	s.toClear = nil
	for _, l := range s.lanes {
		s.reschedule(l, now)
	}
}

// dropStaleParks forgets the stale parks (losePin) when a takeover's count
// found every unacknowledged message of the consumer held here: a stale
// park's message is not among them, so it is settled. Kept, it would hand
// each later message of its lane back at once, again and again, until it
// expired (its deadline has passed: nothing pushes the wait further). Not
// when a takeover merely runs out of time: a stale park's message may still
// be out then, handed back with a delay that has not passed.
func (s *scheduler) dropStaleParks() effects {
	var eff effects
	for _, l := range s.lanes {
		if len(l.parked) == 0 {
			continue
		}
		l.parked = slices.DeleteFunc(l.parked, func(p parkedMsg) bool { return p.stale })
		if l.holdOver() {
			eff.holds = append(eff.holds, s.releaseHold(l))
		}
	}
	return eff
}

// inTakeover reports whether a takeover is running at now.
func (s *scheduler) inTakeover(now time.Time) bool { return now.Before(s.takeoverUntil) }

// takeClears returns the lanes to check, and forgets them.
func (s *scheduler) takeClears() []string {
	out := s.toClear
	s.toClear = nil
	return out
}

// laneCleared applies the check of a lane: suspects are the stream
// sequences of its recipient's messages a previous worker may still hold
// (delivered, not settled, not held here). They join the lane as parked
// until deadline, so the recipient's later messages wait for them; messages
// already queued behind one wait too (schedulable). A stale park that is
// not a suspect is settled (the window starts below every unacknowledged
// message): the lane no longer waits for it. Then the lane may send.
func (s *scheduler) laneCleared(recipient string, suspects []uint64, deadline, now time.Time) effects {
	delete(s.clearing, recipient)
	l, ok := s.lanes[recipient]
	if !ok {
		if len(suspects) == 0 {
			return effects{}
		}
		l = s.laneFor(recipient, now)
	}
	l.parked = slices.DeleteFunc(l.parked, func(p parkedMsg) bool { return p.stale && !slices.Contains(suspects, p.seq) })
	for _, seq := range suspects {
		s.suspect(l, seq, deadline)
	}
	if len(suspects) > 0 {
		l.recheckGap = suspectRecheck
		l.recheckAt = now.Add(l.recheckGap)
	}
	l.cleared = true
	var eff effects
	if h, ok := s.holdChange(l); ok {
		eff.holds = append(eff.holds, h)
	} else if l.holdOver() {
		eff.holds = append(eff.holds, s.releaseHold(l))
	}
	s.reschedule(l, now)
	return eff
}

// suspect records that a check found seq of lane l not settled: a previous
// worker may hold it until deadline. A message held here (queued, in
// flight, or parked under this worker's pin) comes back here and needs
// nothing; one this worker parked before it lost the pin is no longer its
// own, and waits at least until deadline.
func (s *scheduler) suspect(l *lane, seq uint64, deadline time.Time) {
	if p, ok := l.parkedAt(seq); ok && p.stale {
		p.deadline, p.stale, p.suspect = later(p.deadline, deadline), s.pinLost, true
		return
	}
	if !l.holds(seq) {
		l.addParked(seq, deadline, s.pinLost, true)
	}
}

// losePin marks every parked message stale: the worker lost the pin and
// handed back what it held, so those messages go to the worker pinned now,
// which may settle them before they are due. Until regainPin, what the
// worker parks is stale too. Stale parks keep their lanes waiting as
// before, but a takeover does not count them as held here: they are not
// unacknowledged any more, and counting them hid as many of a dead
// worker's messages (bug 43: the takeover ended at once, and a chat's
// next message went before the one the dead worker held).
func (s *scheduler) losePin() {
	s.pinLost = true
	for _, l := range s.lanes {
		for i := range l.parked {
			l.parked[i].stale = true
		}
	}
}

// regainPin notes that the worker is pinned again: what it parks from now
// on comes back to it.
func (s *scheduler) regainPin() { s.pinLost = false }

// pausedUntil tells the scheduler of a bot-wide pause (a 429) ending at
// until: the sends after it start at the rate, without the bot-wide
// bucket's catch-up (botLimiter.quietUntil).
func (s *scheduler) pausedUntil(until time.Time) { s.bot.quietUntil(until) }

// setRate changes the channel-wide send rate from now on (graceful
// degradation).
func (s *scheduler) setRate(r rate.Limit, now time.Time) {
	s.bot.setRate(r, now)
}

// due takes out of their lanes, as in flight, the head messages that can be
// settled without a request — isDue says which: expired, past their
// fallback deadline, to a dead recipient — whatever admission and the limits
// say, so that a long pause, an open breaker or a halt does not keep them
// from moving to the next channel of their route.
//
// A lane that must wait — behind a parked message, for the check of an
// inherited hold, or for its takeover check — waits here too: its head
// moving to the next channel first would reorder the recipient there
// (found by CI's chaos run: after a takeover, a message past its
// fallback_after was handed on to email before the one the dead worker had
// held).
func (s *scheduler) due(now time.Time, isDue func(*job) bool) []*job {
	var out []*job
	for _, l := range s.lanes {
		if !l.schedulable() || l.verify != nil || (!l.cleared && now.Before(s.takeoverUntil)) || !isDue(l.queue[0]) {
			continue
		}
		if l.heap != nil {
			heap.Remove(l.heap, l.heapIdx)
		}
		j := l.queue[0]
		l.queue = l.queue[1:]
		l.inflight = j
		s.inflight++
		out = append(out, j)
	}
	return out
}

// promote moves the lanes whose limit allows a send at now from waiting to
// eligible, and returns the time the next waiting lane becomes eligible
// (zero if none waits).
func (c *class) promote(now time.Time) time.Time {
	for c.waiting.Len() > 0 {
		top := c.waiting.lanes[0]
		if top.readyAt.After(now) {
			return top.readyAt
		}
		heap.Pop(&c.waiting)
		heap.Push(&c.eligible, top)
	}
	return time.Time{}
}

// disposition is what becomes of a message after its attempt.
type disposition int

const (
	// moveOn: the message is finished (acked or dead-lettered).
	moveOn disposition = iota
	// retryHere: no request was made; the message goes back to the head of
	// its lane and is tried again, not before the given delay.
	retryHere
	// retryLater: the message goes back to the stream for the given delay,
	// the rest of its lane behind it (a 429, a transient failure).
	retryLater
	// handBack: the message goes back to the stream at once, behind its
	// lane's parked ones (another worker is pinned now).
	handBack
)

// finish applies the end of an attempt at j. When no request was made
// (called false) the send tokens are given back.
func (s *scheduler) finish(j *job, now time.Time, called bool, d disposition, delay time.Duration) effects {
	s.inflight--
	l := s.laneFor(j.lane, now)
	l.inflight = nil
	l.touched = now
	if !called {
		if j.botRes != nil {
			j.botRes.CancelAt(now)
		}
		if j.laneRes != nil {
			j.laneRes.CancelAt(now)
		}
	}
	j.botRes, j.laneRes = nil, nil
	var eff effects
	switch d {
	case retryHere:
		l.queue = append([]*job{j}, l.queue...)
		if delay > 0 {
			l.notBefore = now.Add(delay)
		}
	case retryLater:
		jobs := append([]*job{j}, l.queue...)
		l.queue = nil
		eff = s.park(l, jobs, delay, now)
	case handBack:
		// The pin moved while it was in flight. Its lane may already hold
		// later messages this worker received since (pinned again): they go
		// back behind it, and the lane waits for it, as behind a retry.
		// Handed back alone, the later ones went first (found by the chaos
		// cluster run: a consumer leader change answered "pin ID mismatch"
		// during an SMS send, and the next message of the recipient
		// overtook it).
		jobs := append([]*job{j}, l.queue...)
		l.queue = nil
		eff = s.park(l, jobs, 0, now)
	}
	s.reschedule(l, now)
	return eff
}

// handBack returns jobs of lane l (in stream order, none of them still
// queued) to the stream: behind the lane's parked messages if it has any,
// else at once, so they come back in order.
func (s *scheduler) handBack(l *lane, jobs []*job, now time.Time) effects {
	if len(jobs) == 0 {
		return effects{}
	}
	if len(l.parked) > 0 {
		return s.park(l, jobs, l.lastDeadline().Sub(now)+parkGap, now)
	}
	var eff effects
	for _, j := range jobs {
		eff.naks = append(eff.naks, nak{j: j})
	}
	return eff
}

// handBackJob returns a message that must not be held (it was delivered
// before this worker lost the pin) to the stream, in order with its lane.
func (s *scheduler) handBackJob(j *job, now time.Time) effects {
	return s.handBack(s.laneFor(j.lane, now), []*job{j}, now)
}

// handBackAll returns every queued message to the stream, lane by lane, and
// reports how many. Messages in flight stay; their attempt's end decides.
func (s *scheduler) handBackAll(now time.Time) (effects, int) {
	var eff effects
	n := 0
	for _, l := range s.lanes {
		if len(l.queue) == 0 {
			continue
		}
		if l.heap != nil { // out of its heap before its queue empties: the heap orders by the head
			heap.Remove(l.heap, l.heapIdx)
		}
		n += len(l.queue)
		eff.add(s.handBack(l, l.queue, now))
		l.queue = nil
	}
	return eff, n
}

// keepAlive returns the held and in-flight messages whose ack timer was last
// reset at least every ago, and notes now as their reset: the worker resets
// them with InProgress so JetStream does not redeliver what only waits its
// turn.
func (s *scheduler) keepAlive(now time.Time, every time.Duration) []*job {
	var out []*job
	for _, l := range s.lanes {
		for _, j := range l.queue {
			if now.Sub(j.progress) >= every {
				j.progress = now
				out = append(out, j)
			}
		}
		if j := l.inflight; j != nil && now.Sub(j.progress) >= every {
			j.progress = now
			out = append(out, j)
		}
	}
	return out
}

// expired reports a lane whose parked messages did not come back in time.
type expired struct {
	recipient string
	count     int
}

// housekeep checks parked messages that did not come back in time,
// releases holds no longer needed, drops idle lanes and reschedules the
// rest (the dead state of a recipient may have changed).
//
// A parked message overdue is not forgotten: the lane waits while the
// worker checks whether it is settled, as for an inherited hold
// (holdVerified). Forgotten after a grace, it let the recipient's later
// messages go first whenever it was still out — handed back with a delay
// while the consumer was electing a leader, or held by a worker that had
// lost the pin without knowing it (bug 45, CI's short cluster run: two
// orders of a chat came back 7 s after their parks were forgotten, and the
// next one had gone before them).
func (s *scheduler) housekeep(now time.Time) (effects, []expired) {
	var eff effects
	var gone []expired
	for key, l := range s.lanes {
		if !l.recheckAt.IsZero() && !now.Before(l.recheckAt) && l.verify == nil {
			s.recheckSuspects(l, now)
		}
		if n := l.overdue(now, s.cfg.parkGrace); n > 0 && l.verify == nil {
			l.verify = &hold{First: l.parked[0].seq, Until: now.Add(s.cfg.recheck)}
			s.toVerify = append(s.toVerify, holdCheck{recipient: key, first: l.parked[0].seq})
			gone = append(gone, expired{recipient: key, count: n})
		}
		if l.verify != nil && now.After(l.verify.Until.Add(s.cfg.parkGrace)) {
			// The check never answered (JetStream unreachable all along):
			// the hold is over anyway. Overdue parks are checked again at
			// the next round.
			l.verify, l.rechecking = nil, false
		}
		if l.holdOver() {
			eff.holds = append(eff.holds, s.releaseHold(l))
		}
		if l.idle() && now.Sub(l.touched) > idleLaneAfter && l.limiter.TokensAt(now) >= 1 {
			if l.heap != nil {
				heap.Remove(l.heap, l.heapIdx)
			}
			delete(s.lanes, key)
			continue
		}
		s.reschedule(l, now)
	}
	return eff, gone
}

// recheckSuspects asks, when the lane's later messages wait behind the
// suspects of a takeover, for the check of whether they were settled
// meanwhile (suspectRecheck), and sets the next one. It stops once the lane
// waits for nothing, or its first park is overdue: housekeep checks those.
func (s *scheduler) recheckSuspects(l *lane, now time.Time) {
	if len(l.parked) == 0 || now.After(l.parked[0].deadline.Add(s.cfg.parkGrace)) {
		l.recheckAt, l.recheckGap = time.Time{}, 0
		return
	}
	if len(l.queue) == 0 || l.inflight != nil || l.schedulable() {
		l.recheckAt = now.Add(l.recheckGap) // nothing waits behind them now
		return
	}
	l.recheckGap *= 2
	l.recheckAt = now.Add(l.recheckGap)
	l.verify = &hold{First: l.parked[0].seq, Until: now.Add(s.cfg.recheck)}
	l.rechecking = true
	s.toVerify = append(s.toVerify, holdCheck{recipient: l.key, first: l.parked[0].seq, recheck: true})
}

// suspectSeqs returns the stream sequences of the suspects parked under
// this worker's pin: what its lanes wait for another worker to settle or
// hand back (suspectcount.go).
func (s *scheduler) suspectSeqs() []uint64 {
	var out []uint64
	for _, l := range s.lanes {
		for _, p := range l.parked {
			if p.suspect && !p.stale {
				out = append(out, p.seq)
			}
		}
	}
	return out
}

// rescheduleAll re-reads the shared state for every lane (a recipient found
// dead needs no token any more).
func (s *scheduler) rescheduleAll(now time.Time) {
	for _, l := range s.lanes {
		s.reschedule(l, now)
	}
}

// counts are the scheduler's figures. ownParked are the parked messages
// this worker handed back under its current pin: not stale (losePin), and
// not suspects, which another worker may hold, or may have settled since
// the check that found them (scheduler.suspect): a takeover counting one
// settled would hide one of that worker's messages (bug 56).
//
// ownInflight are the messages in flight that the consumer surely counts
// as unacknowledged by this worker: delivered under its current pin (the
// job, or a redelivery attached to it, arrived in pin epoch heldFrom or
// later: Worker.heldFrom), and not being acked or terminated. An attempt
// begun before the worker lost the pin goes on after it (a request cannot
// be called back, a send claim is waited for), but its message is no
// longer this worker's: the consumer may have given it to the worker
// pinned meanwhile, or that worker may have settled it (bug 56). And an
// attempt whose ack has gone out is still in flight until the dispatcher
// reads its result, while the consumer no longer counts its message.
type counts struct {
	held, parked, ownParked, inflight, ownInflight, lanes int
}

// counts walks the lanes once for every figure: a takeover reads them at
// each reading of the consumer (every 50 ms), over every lane held.
func (s *scheduler) counts(heldFrom uint64) counts {
	c := counts{inflight: s.inflight, lanes: len(s.lanes)}
	for _, l := range s.lanes {
		if j := l.inflight; j != nil && j.deliveredSince(heldFrom) && !j.settling.Load() {
			c.ownInflight++
		}
		c.held += len(l.queue)
		c.parked += len(l.parked)
		for _, p := range l.parked {
			if !p.stale && !p.suspect {
				c.ownParked++
			}
		}
	}
	return c
}
