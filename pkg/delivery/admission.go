package delivery

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// admission is the one place that decides whether a request may start. Its
// rules, in order:
//
//   - halt: the provider rejected the credentials; nothing is sent until a
//     probe succeeds.
//   - not connected: while the connection to NATS is down nothing is sent:
//     its delivery record could not be written, and a standby taking the
//     message over would send it again (found by the chaos suite).
//   - settle: for ReconnectSettle after the NATS connection came back,
//     nothing is sent (another worker's delivery records may be on their
//     way; see docs/WORKER.md), unless the consumer shows the worker still
//     holds the pin it held before (keptPin).
//   - pause: after a 429, nothing at all is sent until retry_after has
//     passed. Telegram does not say which limit was hit, and sending into a
//     pause extends it.
//   - breaker: after a run of transient failures the circuit opens; one
//     probe goes through after the open period.
//
// It answers twice per request. The dispatcher asks [admission.gate] before
// it launches an attempt, to know when to look again. The attempt asks
// [admission.admit] as the last thing before its request is written (the
// channel calls Attempt.Admit then). admit and pause take the same lock, so a
// request cannot start after a 429 has been read, however late its goroutine
// runs: the requests that can cross a 429 are only those admitted before it
// was read — already on the wire or about to be — at most MaxInFlight-1 of
// them, and pause counts them.
type admission struct {
	breaker     *gobreaker.TwoStepCircuitBreaker[struct{}]
	breakerOpen time.Duration
	// openedAt is when the breaker last opened, unix nanoseconds. Written
	// by the breaker's state-change hook, which runs under the breaker's
	// own lock and so must not take mu.
	openedAt atomic.Int64

	// connected reports whether the worker's connection to NATS is up:
	// nothing is sent while it is down, since the delivery record of what
	// is sent could not be written, and a standby that takes the messages
	// over would send them again. Nil means always.
	connected func() bool
	// pinDoubt reports whether this worker's pin was reset and it does not
	// know yet whether it holds the pin again (pinreset.go): it sends
	// nothing meanwhile, since another worker may be handed the same
	// messages. Nil means never.
	pinDoubt func() bool

	mu     sync.Mutex
	halted bool
	// stopping is set when the worker begins to stop (stop).
	stopping    bool
	settleUntil time.Time
	// settle is the reconnect the current settle follows, and the pin the
	// worker held then (keptPin may end the settle early).
	settle settleCause
	pause  pause
	// open counts the requests admitted and not yet answered.
	open int
	// admitted counts every request admitted so far.
	admitted uint64
	// inFlight are the tickets admitted and not settled, and settled the
	// latest ones settled: pauseFor names the recipients of the requests
	// that may cross a 429 (crossing.go).
	inFlight map[*ticket]struct{}
	settled  settledTickets
	// answers are the requests whose answer has begun to arrive and whose
	// outcome is not settled yet (answers.go).
	answers answers
}

// notConnectedRecheck is how often the dispatcher looks again while NATS is
// unreachable.
const notConnectedRecheck = 100 * time.Millisecond

// errTransient is reported to the breaker for a transient failure;
// errExcluded for an attempt that says nothing about the provider's health.
var (
	errTransient = errors.New("transient failure")
	errExcluded  = errors.New("no answer")
)

// breakerSettings builds the breaker's settings; onChange runs on every
// state transition (under the breaker's lock).
func newAdmission(name string, failures uint32, open time.Duration, onChange func(from, to gobreaker.State)) *admission {
	a := &admission{breakerOpen: open}
	a.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         name,
		MaxRequests:  1,
		Timeout:      open,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsSuccessful: func(err error) bool { return !errors.Is(err, errTransient) },
		IsExcluded:   func(err error) bool { return errors.Is(err, errExcluded) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				a.openedAt.Store(time.Now().UnixNano())
			}
			if onChange != nil {
				onChange(from, to)
			}
		},
	})
	return a
}

// gate reports whether the dispatcher may launch an attempt at now, with
// inflight attempts already running. When it may not, retryAt is when to
// look again (zero: only after an event) and reason says why.
func (a *admission) gate(now time.Time, inflight int) (ok bool, retryAt time.Time, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, until, blocked := a.blockedLocked(now); blocked {
		return false, until, why
	}
	switch a.breaker.State() {
	case gobreaker.StateOpen:
		return false, time.Unix(0, a.openedAt.Load()).Add(a.breakerOpen + time.Millisecond), "breaker open"
	case gobreaker.StateHalfOpen:
		if inflight > 0 {
			return false, time.Time{}, "breaker probing" // one probe at a time
		}
	}
	return true, time.Time{}, ""
}

// blockedLocked applies every rule but the breaker.
func (a *admission) blockedLocked(now time.Time) (reason string, until time.Time, blocked bool) {
	switch {
	case a.stopping:
		return "stopping", time.Time{}, true
	case a.halted:
		return "halted", time.Time{}, true
	case a.connected != nil && !a.connected():
		return "not connected to NATS", now.Add(notConnectedRecheck), true
	case a.pinDoubt != nil && a.pinDoubt():
		return "pin in doubt", now.Add(pinDoubtPoll), true
	case now.Before(a.settleUntil):
		return "settling after a NATS reconnect", a.settleUntil, true
	case now.Before(a.pause.Until):
		return "paused", a.pause.Until, true
	}
	return "", time.Time{}, false
}

// ticket is an admitted request. Its done reports the answer.
type ticket struct {
	a       *admission
	done    func(error)
	settled bool
	// recipient is whom the request is for, as the provider knows them.
	recipient string
	// answer is the ticket's number among answers begun (answers.go),
	// zero until its answer begins to arrive; closed is set when it is
	// settled. Both are guarded by a.mu.
	answer uint64
	closed bool
	// openAtAnswer is how many other requests were admitted and not
	// settled when the answer began to arrive, and admittedAtAnswer the
	// admission's count of requests admitted then.
	openAtAnswer     int
	admittedAtAnswer uint64
	// settledAtAdmit is the admission's count of tickets settled when this
	// one was admitted.
	settledAtAdmit uint64
}

// admit decides, as the request is about to be written, whether it may be:
// every rule is checked again under the lock that pause takes. It returns a
// ticket to settle with the attempt's outcome, or a *NotAdmittedError.
func (a *admission) admit(now time.Time, recipient string) (*ticket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, until, blocked := a.blockedLocked(now); blocked {
		return nil, &NotAdmittedError{Until: until, Reason: why}
	}
	done, err := a.breaker.Allow()
	if err != nil {
		until := time.Time{}
		if errors.Is(err, gobreaker.ErrOpenState) {
			until = time.Unix(0, a.openedAt.Load()).Add(a.breakerOpen)
		}
		return nil, &NotAdmittedError{Until: until, Reason: "breaker " + a.breaker.State().String()}
	}
	a.open++
	a.admitted++
	t := &ticket{a: a, done: done, recipient: recipient, settledAtAdmit: a.settled.n}
	if a.inFlight == nil {
		a.inFlight = make(map[*ticket]struct{})
	}
	a.inFlight[t] = struct{}{}
	return t, nil
}

// settle reports the outcome of the ticket's request to the breaker and
// forgets it. Calling it twice does nothing.
func (t *ticket) settle(o Outcome) {
	if t == nil || t.settled {
		return
	}
	t.settled = true
	var err error
	switch {
	case o.Kind == NotSent || o.Kind == Canceled:
		err = errExcluded
	case !o.healthy():
		err = errTransient
	}
	t.done(err)
	t.a.mu.Lock()
	t.a.open--
	t.a.answers.settledLocked(t)
	delete(t.a.inFlight, t)
	t.a.settled.add(t.recipient)
	t.a.mu.Unlock()
}

// pauseFor starts a pause (or extends the current one) announced by the
// answer to t's request, and says which other requests may reach the
// provider inside it (t may be nil).
//
// Its count is of those admitted before the answer was read and not
// settled then. The answer was read when its first byte came (answers.go)
// when t had that reported; otherwise now. Requests admitted after the
// first byte count too, settled or not: they were admitted before the
// pause, because a request waits at most answerWaitMax for the answers
// already begun (docs/WORKER.md: a CI run saw the provider decide a request
// inside a pause that the count missed).
//
// Its recipients are wider: every request in flight at some moment
// between t's admission and now, including those settled before t's
// answer was read. The provider may have decided one of those after it
// wrote the 429 while the 429 waited unread in its socket; one settled
// before t was admitted was decided before t's request even left.
func (a *admission) pauseFor(p pause, t *ticket) crossing {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.Until.After(a.pause.Until) {
		a.pause = p
	}
	var c crossing
	c.count = max(a.open-1, 0)
	for o := range a.inFlight {
		if o != t {
			c.recipients = append(c.recipients, o.recipient)
		}
	}
	if t != nil {
		if t.answer != 0 {
			c.count = max(c.count, t.openAtAnswer+int(a.admitted-t.admittedAtAnswer))
		}
		c.recipients = a.settled.since(t.settledAtAdmit, c.recipients)
	}
	return c
}

// sharedPause applies a pause another worker wrote to the shared state.
func (a *admission) sharedPause(p pause) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.Until.After(a.pause.Until) || p.Until.IsZero() {
		a.pause = p
	}
}

// extendPause applies a pause learnt from another worker if it ends later
// than the current one, and reports whether it did.
func (a *admission) extendPause(p pause) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !p.Until.After(a.pause.Until) {
		return false
	}
	a.pause = p
	return true
}

// currentPause is the current pause (zero or past when none).
func (a *admission) currentPause() pause {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pause
}

// pausedUntil is the end of the current pause (zero or past when none).
func (a *admission) pausedUntil() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pause.Until
}

// setHalted stops (or resumes) all sending.
func (a *admission) setHalted(h bool) (changed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed, a.halted = a.halted != h, h
	return changed
}

// stop refuses every request from now on: the worker is stopping. The
// requests already admitted finish, and their delivery records are written
// within the shutdown timeout; one admitted during the stop, while
// JetStream does not answer, would end the stop with its record unwritten,
// and the next worker would send it again (the long chaos run on
// d13ccae).
func (a *admission) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopping = true
}

func (a *admission) isHalted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.halted
}

// settleCause is the NATS reconnect a settle follows: the connection's
// reconnect count, and the pin id the worker held when it noticed the
// reconnect ("" for none).
type settleCause struct {
	reconnects uint64
	pin        string
}

// settleFor stops sending until until, after the NATS reconnect c.
func (a *admission) settleFor(until time.Time, c settleCause) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settleUntil = later(a.settleUntil, until)
	a.settle = c
}

// settlingFor returns the reconnect the settle under way follows, while one
// runs at now and the worker held a pin when it began.
func (a *admission) settlingFor(now time.Time) (settleCause, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settle, now.Before(a.settleUntil) && a.settle.pin != ""
}

// keptPin ends the settle after reconnect c at now, if no later reconnect
// began another: the consumer, asked after c, still names the pin this
// worker held before it (see Worker.confirmPin). It reports whether the
// settle ended.
func (a *admission) keptPin(now time.Time, c settleCause) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.settle != c || !now.Before(a.settleUntil) {
		return false
	}
	a.settleUntil = now
	return true
}

// settledAt returns when the settle after the last NATS reconnect ends
// (zero: there was none).
func (a *admission) settledAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settleUntil
}

// breakerState returns the breaker's state.
func (a *admission) breakerState() gobreaker.State { return a.breaker.State() }
