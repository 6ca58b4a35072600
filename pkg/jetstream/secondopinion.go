package jetstream

import (
	"net/url"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The second opinion of the unserved watch (unserved.go): another server
// of the list, asked over a short connection of its own whether it serves
// JetStream, and the reconnect sent to it when it does.

// moveTarget is the server the connection's next reconnect goes to. The
// watch sets it before nats.Conn.ForceReconnect; nats.go's
// ReconnectToServer callback (pick) takes it once.
type moveTarget struct {
	url atomic.Pointer[string]
}

// set makes url the next reconnect's server; "" clears it.
func (t *moveTarget) set(url string) {
	if t == nil {
		return
	}
	if url == "" {
		t.url.Store(nil)
		return
	}
	t.url.Store(&url)
}

// pick is the connection's nats.ReconnectToServerHandler: the target, once,
// without delay, when it is in the pool; otherwise nil, which leaves the
// choice (and the delays between rounds) to nats.go. It runs under the
// connection's lock and only reads the target.
func (t *moveTarget) pick(servers []nats.Server, _ nats.ServerInfo) (*nats.Server, time.Duration) {
	p := t.url.Swap(nil)
	if p == nil {
		return nil, 0
	}
	for i := range servers {
		if servers[i].URL != nil && sameServer(servers[i].URL.String(), *p) {
			return &servers[i], 0
		}
	}
	return nil, 0
}

// sameServer reports whether two server URLs name the same host and port,
// whatever credentials they carry (nats.Conn.Servers leaves them out,
// ConnectedUrl keeps them).
func sameServer(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil || ua.Host == "" || ub.Host == "" {
		return a == b
	}
	return ua.Host == ub.Host
}

// secondOpinion returns the watch's probeAt: it connects to one server
// with dial (the daemon's name, credentials and TLS, no reconnects), asks
// for the account's JetStream info and closes. A URL without credentials
// of its own (nats.Conn.Servers drops them) borrows those of the first
// configured URL that has some, as nats.go does when it reconnects.
func secondOpinion(configured []string, dial []nats.Option) func(string) error {
	var user *url.Userinfo
	for _, c := range configured {
		if u, err := url.Parse(c); err == nil && u.User != nil {
			user = u.User
			break
		}
	}
	return func(server string) error {
		if u, err := url.Parse(server); err == nil && u.User == nil && user != nil {
			u.User = user
			server = u.String()
		}
		nc, err := nats.Connect(server, dial...)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := natsjs.New(nc)
		if err != nil {
			return err
		}
		return accountInfo(js)
	}
}
