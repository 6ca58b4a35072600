package procs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// PollInterval is how often WaitReady asks the readiness URL.
const PollInterval = 50 * time.Millisecond

// pollHTTP GETs url every PollInterval until it answers 2xx (nil), done is
// closed or ctx ends. It returns a description of the last answer.
func pollHTTP(ctx context.Context, url string, done <-chan struct{}) (string, error) {
	// Short timeouts and no keep-alive: a poll never outlives its deadline
	// or holds a connection to a process about to be stopped.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	last := "no answer yet"
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return last, fmt.Errorf("readiness URL %q: %w", url, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return "", nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-done:
			return last, fmt.Errorf("process exited")
		case <-t.C:
		}
	}
}

// WaitHTTP polls url until it answers 2xx, ctx ends or timeout passes; for
// services this package did not start.
func WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last, err := pollHTTP(ctx, url, nil)
	if err != nil {
		return fmt.Errorf("%s not ready within %v (%s): %w", url, timeout, last, err)
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another
// program may take it before it is used; a caller that cannot tolerate that
// starts its process again on a new port when it fails to listen (see
// [AddrInUse]).
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// FreePorts returns n distinct ports as FreePort does.
func FreePorts(n int) ([]int, error) {
	r, err := ReservePorts(n)
	if err != nil {
		return nil, err
	}
	r.Release()
	return r.Ports, nil
}

// Reservation holds free ports open until Release, so that listeners this
// process opens meanwhile on port 0 cannot be given one of them.
type Reservation struct {
	Ports []int
	lns   []net.Listener
}

// ReservePorts finds n distinct free ports on 127.0.0.1 and keeps them
// until Release. A caller that opens listeners of its own on port 0 after
// choosing ports for its child processes (the cluster's proxies) does so
// before Release: the kernel handed a proxy the route port just chosen for
// a node, and the node failed to start ("address already in use").
func ReservePorts(n int) (*Reservation, error) {
	r := &Reservation{}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			r.Release()
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		r.lns = append(r.lns, ln)
		r.Ports = append(r.Ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return r, nil
}

// Release frees the ports for the processes that will listen on them.
// Calling it again does nothing.
func (r *Reservation) Release() {
	for _, ln := range r.lns {
		ln.Close()
	}
	r.lns = nil
}

// Addr returns "127.0.0.1:<port>".
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// AddrInUse reports whether the process's log, since its last start, says
// that a listen failed because the address was taken: the process lost a
// race for a port from FreePort and may be started again on another.
func (p *Process) AddrInUse() bool {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return false
	}
	if i := bytes.LastIndex(b, []byte(startMarker)); i >= 0 {
		b = b[i:]
	}
	return bytes.Contains(b, []byte("address already in use"))
}

// TailFile returns the last n lines of the file at path, or a note saying why
// it cannot.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	const maxTail = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	off := max(0, st.Size()-maxTail)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
