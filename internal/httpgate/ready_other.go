//go:build !linux

package httpgate

// readySet is Linux's epoll (ready_linux.go); elsewhere each connection
// awaiting an answer is peeked at.
type readySet struct{}

func newReadySet() *readySet { return nil }

func (*readySet) watch(peeker) bool { return false }

func (*readySet) unwatch(peeker) {}

func (*readySet) scan(int, func(int, bool)) bool { return false }
