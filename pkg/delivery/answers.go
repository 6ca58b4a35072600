package delivery

import "time"

// answers closes the last window in which a request could leave after a 429
// had reached the worker: between the moment the answer's first byte is
// read, in the HTTP transport's reader goroutine, and the moment the
// attempt's own goroutine has parsed it and paused admission. That takes a
// second goroutine to be scheduled, the body to be read and the outcome to
// be classified: on a loaded machine, milliseconds. In the CI chaos run a
// request reached Telegram 7 ms after Telegram had written a 429 to the same
// worker (the emulator counts a request later than 5 ms as sent by a sender
// that knew).
//
// So an attempt reports when its answer begins to arrive
// ([Attempt.Answered], from the transport's reader), and a request about to
// be written first waits until every answer that began before it is
// settled: if one was a 429, the pause is in force by then and the request
// is refused. The wait is the time one goroutine needs to classify an
// answer, normally microseconds, and never longer than answerWaitMax: an
// answer that is not settled by then (a channel that reads its body slowly)
// no longer holds anything up. Only answers that began before the request
// asked are waited for, so a steady stream of answers cannot starve it.
//
// An answer that has reached the worker's socket but whose reader goroutine
// has not run yet is not begun here: the channels' transport waits for
// those to be noticed before it asks (internal/httpgate, unread.go).
type answers struct {
	// last is the number of the latest answer begun.
	last uint64
	// pending are the answers begun and not settled, by number.
	pending map[uint64]struct{}
	// changed is closed when an answer is settled; nil when nobody waits.
	changed chan struct{}
}

// answerWaitMax bounds how long a request waits for the answers that began
// before it to be settled.
const answerWaitMax = 50 * time.Millisecond

// answering records that the first byte of t's answer has been read. It is
// called from the HTTP transport's reader goroutine; on a nil, settled or
// already answering ticket it does nothing.
func (t *ticket) answering() {
	if t == nil {
		return
	}
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.answer != 0 || t.closed {
		return
	}
	s := &a.answers
	s.last++
	t.answer = s.last
	t.openAtAnswer = max(a.open-1, 0)
	t.admittedAtAnswer = a.admitted
	if s.pending == nil {
		s.pending = make(map[uint64]struct{})
	}
	s.pending[t.answer] = struct{}{}
}

// settledLocked forgets t's answer and wakes the requests waiting for it.
// a.mu is held.
func (s *answers) settledLocked(t *ticket) {
	t.closed = true
	if t.answer == 0 {
		return
	}
	delete(s.pending, t.answer)
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// unsettledUpTo reports whether an answer numbered last or lower is not
// settled yet.
func (s *answers) unsettledUpTo(last uint64) bool {
	for n := range s.pending {
		if n <= last {
			return true
		}
	}
	return false
}

// answerWait is how a request's wait for earlier answers ended.
type answerWait uint8

const (
	answersNone     answerWait = iota // none was pending: no wait
	answersSettled                    // waited until they were settled
	answersTimedOut                   // gave up after answerWaitMax
)

// awaitAnswers waits until every answer begun before the call is settled,
// or answerWaitMax has passed, and says which.
func (a *admission) awaitAnswers() answerWait {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.answers
	last := s.last
	if !s.unsettledUpTo(last) {
		return answersNone
	}
	timer := time.NewTimer(answerWaitMax)
	defer timer.Stop()
	for s.unsettledUpTo(last) {
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		a.mu.Unlock()
		select {
		case <-changed:
			a.mu.Lock()
		case <-timer.C:
			a.mu.Lock()
			return answersTimedOut
		}
	}
	return answersSettled
}

func (w answerWait) String() string {
	switch w {
	case answersSettled:
		return "settled"
	case answersTimedOut:
		return "timeout"
	}
	return "none"
}
