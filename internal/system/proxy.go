package system

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// CutMode is how a cut [Proxy] treats its connections.
type CutMode int

const (
	// Blackhole holds every connection open and passes nothing either
	// way, as a network partition does: neither end learns of it until
	// its own timeouts fire. A connection made while cut is accepted and
	// held the same way, never reaching the target.
	Blackhole CutMode = iota + 1
	// Refuse closes every connection and every new one at once, as an
	// unreachable host that answers with resets does: both ends learn of
	// it immediately.
	Refuse
)

// String names the mode in logs.
func (m CutMode) String() string {
	switch m {
	case Blackhole:
		return "blackhole"
	case Refuse:
		return "refuse"
	}
	return fmt.Sprintf("CutMode(%d)", int(m))
}

// Proxy forwards TCP connections from a loopback port to a target address,
// byte for byte, and can cut them to simulate a network partition between
// the two sides ([Proxy.Cut]) and heal it ([Proxy.Heal]). The chaos harness
// puts one on each route between two nats-server nodes and one in front of
// each node's client port. The zero value is not usable: use [NewProxy].
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    CutMode // 0 while passing
	healed chan struct{}
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// proxyConn is one accepted connection and its way to the target.
type proxyConn struct {
	mu     sync.Mutex
	client net.Conn
	server net.Conn // nil until dialled; never, while held by a black hole
	closed bool
}

// close closes both sides; later calls do nothing.
func (c *proxyConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// attach sets the connection to the target, reporting false (and leaving
// it to the caller to close) when c was closed meanwhile.
func (c *proxyConn) attach(server net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.server = server
	return true
}

// NewProxy listens on addr (host:port; port 0 chooses a free one) and
// forwards each connection to target.
func NewProxy(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}, healed: make(chan struct{})}
	close(p.healed) // passing: nothing waits
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// IsCut reports how the proxy is cut, 0 when it passes traffic.
func (p *Proxy) IsCut() CutMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Cut stops the traffic in mode until Heal. Cutting a cut proxy again
// changes its mode; a Refuse closes every connection at once.
func (p *Proxy) Cut(mode CutMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut == 0 {
		p.healed = make(chan struct{})
	}
	p.cut = mode
	if mode == Refuse {
		for c := range p.conns {
			c.close()
		}
	}
}

// Heal lets traffic pass again. Connections that lived through the cut are
// closed (bytes were held back or lost: the stream cannot resume), so both
// ends reconnect through the healed proxy at once.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut == 0 {
		return
	}
	p.cut = 0
	for c := range p.conns {
		c.close()
	}
	close(p.healed)
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. Calling it twice is safe.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.close()
	}
	if p.cut != 0 {
		close(p.healed)
		p.cut = 0
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// dialTimeout bounds the connection to the target.
const dialTimeout = 2 * time.Second

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error (a reset before accept)
		}
		c := &proxyConn{client: client}
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			client.Close()
			return
		case p.cut == Refuse:
			p.mu.Unlock()
			client.Close()
			continue
		}
		p.conns[c] = struct{}{}
		cut, healed := p.cut, p.healed
		p.mu.Unlock()
		p.wg.Go(func() {
			defer p.forget(c)
			if cut == Blackhole {
				// Held open, never dialled: the client waits for an
				// answer that does not come, until the heal closes it.
				<-healed
				return
			}
			p.serve(c)
		})
	}
}

// forget closes c and drops it from the proxy's set.
func (p *Proxy) forget(c *proxyConn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// serve connects c to the target and copies both ways until either side
// closes or the proxy closes it.
func (p *Proxy) serve(c *proxyConn) {
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		return // the target is down: the client sees its connection closed
	}
	if !c.attach(server) { // cut with Refuse, healed or closed meanwhile
		server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(server, c.client); c.close() })
	wg.Go(func() { p.copy(c.client, server); c.close() })
	wg.Wait()
}

// copy moves bytes from src to dst. While the proxy is cut it reads
// nothing more (the sender's buffers fill, as behind a partition) and
// drops what it had read: the connection is closed at the heal.
func (p *Proxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		p.mu.Lock()
		cut, healed := p.cut, p.healed
		p.mu.Unlock()
		if cut != 0 {
			<-healed // the heal or the close closes this connection
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut = p.cut
			p.mu.Unlock()
			if cut != 0 {
				continue // read as the cut began: lost in the partition
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
