package httpgate

import (
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
// that has not been reported, or after u.max. It peeks under the lock, so
// that requests about to be written take turns at it: peeking without it
// let every sender peek at every connection at once, and the worker's
// ceiling (row 5 of BENCHMARKS.md) fell from about 3,800 to 2,200 msg/s
// side by side.
func (u *unread) wait(self *gateConn) {
	var deadline time.Time
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		u.mu.Lock()
		pending := false
		for c := range u.conns {
			if c != self && c.answerWaiting() {
				pending = true
				break
			}
		}
		if !pending {
			u.mu.Unlock()
			return
		}
		if u.changed == nil {
			u.changed = make(chan struct{})
		}
		changed := u.changed
		u.mu.Unlock()
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(u.max)
			if u.onWait != nil {
				u.onWait()
			}
		}
		if !now.Before(deadline) {
			return
		}
		if t == nil {
			t = time.NewTimer(min(unreadRecheck, deadline.Sub(now)))
		} else {
			t.Reset(min(unreadRecheck, deadline.Sub(now)))
		}
		select {
		case <-changed:
		case <-t.C:
		}
	}
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
