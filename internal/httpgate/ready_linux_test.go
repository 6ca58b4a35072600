package httpgate

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketPair returns the two ends of a loopback TCP connection: ours, as
// the transport would dial it, and the peer's.
func socketPair(t *testing.T, ln net.Listener) (ours, peer net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	ours, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer = <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = ours.Close(); _ = peer.Close() })
	return ours, peer
}

// waitSocket waits until a peeking recv on c reports what want says: bytes
// (want true) or the peer's end with nothing before it (want false).
func waitSocket(t *testing.T, c net.Conn, want bool) {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		var rerr error
		_ = raw.Control(func(fd uintptr) {
			var b [1]byte
			n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		})
		if rerr == nil && (n > 0) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket never showed %v (n=%d, err=%v)", want, n, rerr)
		}
		time.Sleep(time.Millisecond) // polling the kernel's state, which nothing signals
	}
}

// watchedPairs returns n connections awaiting an answer, each watched by
// u's readySet, and their peers.
func watchedPairs(t *testing.T, u *unread, n int) ([]*gateConn, []net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var conns []*gateConn
	var peers []net.Conn
	for range n {
		ours, peer := socketPair(t, ln)
		gc := &gateConn{Conn: ours, unread: u, peek: newPeeker(ours)}
		u.add(gc)
		if !gc.watched {
			t.Fatal("connection not watched")
		}
		conns = append(conns, gc)
		peers = append(peers, peer)
	}
	return conns, peers
}

// answer writes the first bytes of an answer to c from its peer and waits
// until they are on c's socket.
func answer(t *testing.T, c *gateConn, peer net.Conn) {
	t.Helper()
	if _, err := peer.Write([]byte("HTTP/1.1 429 Too Many Requests\r\n")); err != nil {
		t.Fatal(err)
	}
	waitSocket(t, c.Conn, true)
}

func arrivedNow(u *unread, self *gateConn) map[*gateConn]bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	got := map[*gateConn]bool{}
	for _, a := range u.arrivedLocked(self) {
		got[a.c] = true
	}
	return got
}

// A request notes every answer on this machine, however many sockets are
// ready, and none of the connections the peer ended with nothing sent, nor
// its own.
func TestArrivedNotesEveryAnswerAndNoEndedConnection(t *testing.T) {
	u := &unread{max: time.Second, ready: newReadySet()}
	if u.ready == nil {
		t.Fatal("no epoll instance")
	}
	const ended, answered = 20, 3
	conns, peers := watchedPairs(t, u, ended+answered)
	for i := range ended {
		_ = peers[i].Close()
		waitSocket(t, conns[i].Conn, false)
	}
	if got := arrivedNow(u, nil); len(got) != 0 {
		t.Fatalf("%d connections the peer ended with nothing sent count as answers", len(got))
	}
	for i := ended; i < ended+answered; i++ {
		answer(t, conns[i], peers[i])
	}
	got := arrivedNow(u, nil)
	if len(got) != answered {
		t.Fatalf("%d answers noted, want %d", len(got), answered)
	}
	for i := ended; i < ended+answered; i++ {
		if !got[conns[i]] {
			t.Fatalf("the answer on connection %d not noted", i)
		}
	}
	if got := arrivedNow(u, conns[ended]); len(got) != answered-1 || got[conns[ended]] {
		t.Fatalf("noted %d answers with the connection about to be written among them: %v", len(got), got[conns[ended]])
	}
	u.remove(conns[ended])
	if got := arrivedNow(u, nil); len(got) != answered-1 || got[conns[ended]] {
		t.Fatalf("an answer already reported is still noted (%d noted)", len(got))
	}
}

// A request waits for the answers it found, then looks again before its
// check runs, and waits for the answers that arrived meanwhile: a 429
// among them must stop it (bug 33). It looks again once per round of
// answers, not at every answer reported.
func TestWaitLooksAgainOnceTheAnswersFoundAreReported(t *testing.T) {
	waits := make(chan struct{}, 1)
	u := &unread{max: time.Hour, ready: newReadySet(), onWait: func() { waits <- struct{}{} }}
	conns, peers := watchedPairs(t, u, 2)
	answer(t, conns[0], peers[0])
	done := startWait(t, u, waits)
	answer(t, conns[1], peers[1])
	u.mu.Lock()
	looks := u.scans
	u.mu.Unlock()
	u.remove(conns[0])
	deadline := time.Now().Add(30 * time.Second)
	for {
		u.mu.Lock()
		again := u.scans > looks
		u.mu.Unlock()
		if again {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the wait never looked again after the answer it found was reported")
		}
		time.Sleep(time.Millisecond) // polling the waiter's state, which nothing signals
	}
	select {
	case <-done:
		t.Fatal("the wait ended with an answer that arrived during it still unreported")
	default:
	}
	u.remove(conns[1])
	within(t, done, "the wait to end once every answer found is reported")
}

// Over TLS the bytes a request found may be a session ticket, which the
// reader takes with no answer to report: once they are gone from the
// socket, the request waits for that connection no longer.
func TestWaitForgetsBytesTakenWithoutAnAnswer(t *testing.T) {
	waits := make(chan struct{}, 1)
	u := &unread{max: time.Hour, ready: newReadySet(), onWait: func() { waits <- struct{}{} }}
	conns, peers := watchedPairs(t, u, 1)
	conns[0].secure.Store(true)
	answer(t, conns[0], peers[0])
	done := startWait(t, u, waits)
	buf := make([]byte, 64)
	if _, err := conns[0].Read(buf); err != nil {
		t.Fatal(err)
	}
	within(t, done, "the wait to end once the bytes it found were taken")
}

// startWait runs u.wait for a request on no connection and returns once
// it waits (u's onWait sent on waits); the channel closes when it ends.
func startWait(t *testing.T, u *unread, waits <-chan struct{}) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		u.wait(nil)
		close(done)
	}()
	within(t, waits, "the wait to begin")
	return done
}

func within[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// A socket stays in the set from its connection's first request until the
// connection closes, and a look notes only the connections awaiting an
// answer: bytes left on a connection whose answer was reported (its
// reader has not taken the rest yet) are not an answer, however many such
// sockets are ready.
func TestTheSetKeepsSocketsAndNotesOnlyAwaitedOnes(t *testing.T) {
	u := &unread{max: time.Second, ready: newReadySet()}
	if u.ready == nil {
		t.Fatal("no epoll instance")
	}
	const reported = 20
	conns, peers := watchedPairs(t, u, reported+1)
	for i := range conns {
		answer(t, conns[i], peers[i])
	}
	for i := range reported {
		u.remove(conns[i])
		if !conns[i].watched || u.byFD[conns[i].peek.fd] != conns[i] {
			t.Fatalf("connection %d left the set when its answer was reported", i)
		}
	}
	got := arrivedNow(u, nil)
	if len(got) != 1 || !got[conns[reported]] {
		t.Fatalf("noted %d answers, want only the one still awaited", len(got))
	}

	// The next request on a connection in the set: its socket is not
	// added again, and its answer is noted.
	buf := make([]byte, 64)
	if _, err := conns[0].Conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	u.add(conns[0])
	answer(t, conns[0], peers[0])
	if got := arrivedNow(u, nil); len(got) != 2 || !got[conns[0]] {
		t.Fatalf("the answer to a connection's second request not noted (%d noted)", len(got))
	}

	// Closing takes the socket out of the set first.
	for i, c := range conns {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if c.watched || u.byFD[c.peek.fd] != nil {
			t.Fatalf("connection %d is still in the set after it closed", i)
		}
	}
	if len(u.conns) != 0 || len(u.byFD) != 0 {
		t.Fatalf("%d connections awaited and %d sockets watched after every connection closed", len(u.conns), len(u.byFD))
	}
	if got := arrivedNow(u, nil); len(got) != 0 {
		t.Fatalf("%d answers noted with every connection closed", len(got))
	}
}
