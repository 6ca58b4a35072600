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
// has been written and whose answer's first byte has not been reported yet.
// A gated request, before its check runs, looks for those whose answer is on
// this machine (bytes waiting in the kernel or, on a plain connection,
// already read and not reported), waits until each answer it found is
// reported, and looks again, until a look finds none: their answer notices
// run first, and the engine's own wait for answers begun (pkg/delivery,
// answers.go) then sees a 429 among them. A look is one epoll_wait over the
// sockets awaiting an answer (ready_linux.go; one peeking recv per
// connection where epoll is missing), and the wait is never longer than
// Options.UnreadWaitMax.
type unread struct {
	max    time.Duration
	onWait func()
	// ready watches the sockets of conns; nil where it cannot, and then
	// every connection is peeked at.
	ready *readySet

	mu    sync.Mutex
	conns map[*gateConn]struct{}
	// byFD names the connections ready watches by their descriptors.
	byFD map[int]*gateConn
	// changed is closed when a connection leaves conns; nil when nobody
	// waits.
	changed chan struct{}
	// arrived collects a scan's connections, and scans numbers the scans
	// (gateConn.noted); used under mu.
	arrived []arrival
	scans   uint64
}

// arrival is a connection whose answer was on this machine when a request
// looked, and how many answers it had reported, and how many reads of a
// TLS connection had taken bytes, then.
type arrival struct {
	c               *gateConn
	reported, taken uint64
}

// add records that c's request is written and its answer awaited.
func (u *unread) add(c *gateConn) {
	c.awaiting.Store(true)
	c.readAhead.Store(false)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conns == nil {
		u.conns = make(map[*gateConn]struct{})
		u.byFD = make(map[int]*gateConn)
	}
	u.conns[c] = struct{}{}
	// A socket joins the set at its connection's first request and stays
	// until the connection closes (forget): a look reports only the
	// connections awaiting an answer. Joining and leaving at every request
	// was two epoll_ctl calls a message, 1.8 of the worker's 8 system calls
	// a message at its ceiling.
	if !c.watched && u.ready != nil && c.peek.fd >= 0 && u.ready.watch(c.peek) {
		c.watched = true
		u.byFD[c.peek.fd] = c
	}
}

// remove forgets c's answer: it was reported, or its request is over.
func (u *unread) remove(c *gateConn) {
	if !c.awaiting.Swap(false) {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.conns, c)
	c.reported++
	if u.changed != nil {
		close(u.changed)
		u.changed = nil
	}
}

// forget forgets c, whose connection is closing: its socket leaves the set
// before it is closed, under the lock, so that a descriptor the kernel
// gives to another connection never names c.
func (u *unread) forget(c *gateConn) {
	u.remove(c)
	u.mu.Lock()
	defer u.mu.Unlock()
	if c.watched {
		c.watched = false
		u.ready.unwatch(c.peek)
		if u.byFD[c.peek.fd] == c {
			delete(u.byFD, c.peek.fd)
		}
	}
}

// took records that the reader took bytes from c, a TLS connection
// awaiting an answer, and wakes the waiting requests. The bytes a look found
// there may have been a session ticket, which the reader takes with no
// answer to report: a request waiting for c peeks at it again, and waits
// for it no longer once nothing is left in the socket. (On a plain
// connection every byte read while an answer is awaited is the answer's:
// readAhead keeps the connection waited for until its answer is reported.)
func (u *unread) took(c *gateConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c.taken++
	if u.changed != nil {
		close(u.changed)
		u.changed = nil
	}
}

// wait returns once a look finds no connection but self with an answer on
// this machine that has not been reported, or after u.max. A look notes the
// answers it finds and waits until each of them is reported, then looks
// again: the request's check runs right after a look that found nothing, as
// bug 33 needs, yet it looks once per round of answers, not once per answer
// reported anywhere. Looks run under the lock.
func (u *unread) wait(self *gateConn) {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	u.mu.Lock()
	for {
		arrived := u.arrivedLocked(self)
		if len(arrived) == 0 {
			u.mu.Unlock()
			return
		}
		began := t == nil
		if began {
			t = time.NewTimer(u.max)
		}
		for len(arrived) > 0 {
			if u.changed == nil {
				u.changed = make(chan struct{})
			}
			changed := u.changed
			u.mu.Unlock()
			if began && u.onWait != nil {
				u.onWait() // outside the lock: it is the caller's code
			}
			began = false
			select {
			case <-changed:
			case <-t.C:
				return
			}
			u.mu.Lock()
			arrived = slices.DeleteFunc(arrived, func(a arrival) bool {
				return a.c.reported != a.reported || a.c.taken != a.taken && !a.c.peek.bytesWaiting()
			})
			for i := range arrived {
				arrived[i].taken = arrived[i].c.taken
			}
		}
	}
}

// arrivedLocked returns the connections but self that have an answer on
// this machine whose first byte has not been reported: bytes wait in the
// kernel, or (on a plain connection, where every byte read is the answer's)
// were read. A socket the peer closed with nothing waiting has no answer.
// Called with u.mu held; the result is the caller's.
func (u *unread) arrivedLocked(self *gateConn) []arrival {
	u.arrived = u.arrived[:0]
	u.scans++
	note := func(c *gateConn) {
		if c != self && c.noted != u.scans {
			c.noted = u.scans
			u.arrived = append(u.arrived, arrival{c: c, reported: c.reported, taken: c.taken})
		}
	}
	watched := false
	for c := range u.conns {
		switch {
		case c.readAhead.Load():
			note(c)
		case c.watched:
			watched = true
		case c.peek.bytesWaiting():
			note(c)
		}
	}
	if watched {
		// The set holds the sockets of connections not awaiting an answer
		// too (add): each may be ready and take a place among the events,
		// so there is one for every socket in the set.
		complete := u.ready.scan(len(u.byFD), func(fd int, ended bool) {
			c := u.byFD[fd]
			if c == nil {
				return
			}
			if _, awaited := u.conns[c]; awaited && (!ended || c.readAhead.Load() || c.peek.bytesWaiting()) {
				note(c)
			}
		})
		if !complete {
			for c := range u.conns {
				if c.watched && (c.readAhead.Load() || c.peek.bytesWaiting()) {
					note(c)
				}
			}
		}
	}
	if len(u.arrived) == 0 {
		return nil
	}
	return slices.Clone(u.arrived)
}
