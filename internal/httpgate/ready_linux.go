package httpgate

import (
	"errors"
	"runtime"

	"golang.org/x/sys/unix"
)

// readySet is an epoll instance watching the sockets of the transport's
// connections, each from its first request until it closes (unread.add,
// unread.forget). One epoll_wait tells a request about to be written
// whether any of those awaiting an answer has bytes waiting; peeking at each took one recv per
// connection awaiting an answer, for every request written: with 256
// requests in flight, 6% of the worker's CPU at its ceiling, and the
// transport's lock held meanwhile (BENCHMARKS.md, row 5). The events buffer
// holds every watched socket, so that one call returns all the ready ones.
//
// A readySet is used under unread's lock only.
type readySet struct {
	epfd   int
	events []unix.EpollEvent
}

// newReadySet returns a readySet, or nil when the kernel refuses one: each
// connection is then peeked at.
func newReadySet() *readySet {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	r := &readySet{epfd: fd}
	runtime.AddCleanup(r, func(fd int) { _ = unix.Close(fd) }, fd)
	return r
}

// watch adds p's socket; false if it could not (the connection is then
// peeked at).
func (r *readySet) watch(p peeker) bool {
	if p.raw == nil {
		return false
	}
	ok := false
	_ = p.raw.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
		err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
		if errors.Is(err, unix.EEXIST) {
			err = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
		}
		ok = err == nil
	})
	return ok
}

// unwatch removes p's socket. A closed socket left the set when it was
// closed, and Control then refuses: its descriptor may name another
// connection's socket by now.
func (r *readySet) unwatch(p peeker) {
	_ = p.raw.Control(func(fd uintptr) {
		_ = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// scan asks the kernel, without waiting, which of the watched sockets can
// be read, and calls visit for each with its descriptor and whether the peer
// ended the connection (then the bytes waiting may be none). watched is how
// many sockets are watched, so that one call returns every ready one. It reports false when the kernel could not be
// asked: the caller must then peek at each connection.
func (r *readySet) scan(watched int, visit func(fd int, ended bool)) bool {
	if cap(r.events) < watched {
		r.events = make([]unix.EpollEvent, watched)
	}
	events := r.events[:watched]
	n, err := unix.EpollWait(r.epfd, events, 0)
	for errors.Is(err, unix.EINTR) {
		n, err = unix.EpollWait(r.epfd, events, 0)
	}
	if err != nil {
		return false
	}
	for _, ev := range events[:n] {
		visit(int(ev.Fd), ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0)
	}
	return true
}
