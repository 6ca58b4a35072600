package httpgate

import (
	"slices"
	"sync"
	"time"
)

// unread closes the window between an answer reaching this machine and the
// HTTP transport's reader goroutine reading its first byte. Until that
// goroutine runs, nothing in the process knows the answer is there: on a
// loaded machine it can wait for the scheduler for tens of milliseconds,
// and a request admitted meanwhile on another connection reaches the
// provider after the provider answered a 429 (the long chaos run on the
// cluster saw two, 13 and 21 ms after the 429 was written to the same
// worker).
//
// So a transport made by [NewTransport] keeps the connections whose request
// has been written and whose answer's first byte has not been reported yet,
// and a gated request, before its check runs, waits while any of them has
// bytes waiting in the kernel (or, on a plain connection, already read and
// not reported): their answer notices run first, and the engine's own wait
// for answers begun (pkg/delivery, answers.go) then sees a 429 among them.
// The wait is normally nothing (one peeking recv per connection awaiting
// an answer) and never longer than Options.UnreadWaitMax.
type unread struct {
	max    time.Duration
	onWait func()

	mu    sync.Mutex
	conns map[*gateConn]struct{}
	// changed is closed when a connection leaves conns; nil when nobody
	// waits.
	changed chan struct{}
}

// unreadRecheck is how often a waiting request looks at the kernel's
// buffers again when no answer was reported meanwhile.
const unreadRecheck = 200 * time.Microsecond

// add records that c's request is written and its answer awaited.
func (u *unread) add(c *gateConn) {
	c.awaiting.Store(true)
	c.readAhead.Store(false)
	u.mu.Lock()
	if u.conns == nil {
		u.conns = make(map[*gateConn]struct{})
	}
	u.conns[c] = struct{}{}
	u.mu.Unlock()
}

// remove forgets c: its answer was reported, or its request is over.
func (u *unread) remove(c *gateConn) {
	if !c.awaiting.Swap(false) {
		return
	}
	u.mu.Lock()
	delete(u.conns, c)
	if u.changed != nil {
		close(u.changed)
		u.changed = nil
	}
	u.mu.Unlock()
}

// wait returns once no connection but self has an answer on this machine
// that has not been reported, or after u.max. It peeks at every connection
// awaiting an answer with the lock released (a reader reporting an answer
// takes it), then waits for the ones that had bytes waiting, looking only
// at them at each report or recheck, and once they are reported looks at
// every connection again: answers that arrived meanwhile are waited for
// too. Before, every wakeup peeked at every connection, under the lock.
func (u *unread) wait(self *gateConn) {
	var buf [64]*gateConn
	var deadline time.Time
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		pending := u.waiting(self, buf[:0])
		if len(pending) == 0 {
			return
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(u.max)
			if u.onWait != nil {
				u.onWait()
			}
		}
		for {
			// The channel first, then the look: a report in between
			// closes the channel taken.
			u.mu.Lock()
			if u.changed == nil {
				u.changed = make(chan struct{})
			}
			changed := u.changed
			u.mu.Unlock()
			pending = slices.DeleteFunc(pending, func(c *gateConn) bool {
				return !c.awaiting.Load() || !c.answerWaiting()
			})
			if len(pending) == 0 {
				break
			}
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			if t == nil {
				t = time.NewTimer(min(unreadRecheck, left))
			} else {
				t.Reset(min(unreadRecheck, left))
			}
			select {
			case <-changed:
			case <-t.C:
			}
		}
	}
}

// waiting appends to out the connections but self whose answer is on this
// machine and not reported, peeking with the lock released.
func (u *unread) waiting(self *gateConn, out []*gateConn) []*gateConn {
	u.mu.Lock()
	for c := range u.conns {
		if c != self {
			out = append(out, c)
		}
	}
	u.mu.Unlock()
	return slices.DeleteFunc(out, func(c *gateConn) bool { return !c.answerWaiting() })
}

// answerWaiting reports whether c's answer has reached this machine and
// its first byte has not been reported: bytes wait in the kernel, or (on a
// plain connection, where every byte read is the answer's) were read.
func (c *gateConn) answerWaiting() bool {
	if c.readAhead.Load() {
		return true
	}
	return c.peek.bytesWaiting()
}
