//go:build !unix

package system

import (
	"errors"
	"fmt"
	"net"
)

// closingListener accepts and at once closes every connection: where a
// socket cannot be bound without listening, the nearest thing to a
// refusal. nats-server retries such an implicit route without a delay (see
// refuser), so on these systems the nodes' logs show that churn.
type closingListener struct{ ln net.Listener }

// newRefuser listens on a free loopback port and closes what it accepts.
func newRefuser() (refuser, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for implicit routes: %w", err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			conn.Close()
		}
	}()
	return &closingListener{ln: ln}, nil
}

func (c *closingListener) Addr() string { return c.ln.Addr().String() }

func (c *closingListener) Close() error { return c.ln.Close() }
