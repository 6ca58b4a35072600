package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A cluster node cut off from the other nodes (a network partition that
// leaves its clients' side working) loses its quorum: JetStream answers
// nothing there until the partition heals, while the node still answers
// the clients' pings, so nats.go never moves them. Every daemon connected
// to it stalled for as long as the partition lasted, which could be hours.
//
// So Connect watches what the connected server says of JetStream: once a
// second it asks for the account's JetStream info, which only the meta
// leader answers, and which a node without one answers at once with "JetStream
// system temporarily unavailable". When that request has failed for
// Options.LeaveUnservedAfter without a break (longer than an election: a
// meta leader's election takes 4-9 s, and a cut-off node that was the meta
// leader steps down only after 10 s without quorum), the connection
// reconnects to another server of its list. If the next one does not
// serve either (the whole cluster lost its quorum), the wait before the
// next move doubles, up to maxUnservedHoldOff.

// jsClusterNotAvailable is nats-server's error code for a request to a node
// that knows no JetStream meta leader.
const jsClusterNotAvailable natsjs.ErrorCode = 10008

// Bounds of the watch.
const (
	unservedProbe      = time.Second
	maxUnservedHoldOff = 2 * time.Minute
)

// watchedConn is what the watch reads of the connection (*nats.Conn).
type watchedConn interface {
	IsConnected() bool
	ConnectedUrl() string
	Servers() []string
	ForceReconnect() error
	LastError() error
}

// unservedWatch moves a connection off a server that does not serve
// JetStream.
type unservedWatch struct {
	nc    watchedConn
	log   *slog.Logger
	after time.Duration
	// probe asks the connected server about JetStream (accountInfo).
	probe func() error
}

// newUnservedWatch watches nc, which js uses.
func newUnservedWatch(nc *nats.Conn, js natsjs.JetStream, log *slog.Logger, after time.Duration) *unservedWatch {
	return &unservedWatch{nc: nc, log: log, after: after, probe: func() error { return accountInfo(js) }}
}

// run probes every unservedProbe until closed is closed.
func (w *unservedWatch) run(closed <-chan struct{}) {
	t := time.NewTicker(unservedProbe)
	defer t.Stop()
	var since time.Time
	var server string
	holdOff := w.after
	for {
		select {
		case <-closed:
			return
		case <-t.C:
		}
		if !w.nc.IsConnected() {
			since = time.Time{}
			continue
		}
		err := w.probe()
		if refused(w.nc, err) {
			w.log.Warn("cannot watch whether this NATS server serves JetStream: the user may not publish to "+infoSubject+
				"; add it to its permissions (docs/RUNBOOK.md#permissions), or the daemon stays on a node cut off from its cluster",
				"err", err)
			return
		}
		url := w.nc.ConnectedUrl()
		if !unserved(err) {
			since, holdOff = time.Time{}, w.after
			continue
		}
		now := time.Now()
		if since.IsZero() || url != server {
			since, server = now, url
			continue
		}
		if now.Sub(since) < holdOff || len(w.nc.Servers()) < 2 {
			continue
		}
		w.log.Warn("JetStream has not answered on this NATS server for a while (the server is cut off from its cluster?): moving to another",
			"server", RedactURL(url), "for", now.Sub(since).Round(time.Second), "err", err)
		if err := w.nc.ForceReconnect(); err != nil {
			w.log.Warn("cannot move to another NATS server", "err", err)
		}
		since, holdOff = time.Time{}, min(holdOff*2, maxUnservedHoldOff)
	}
}

// infoSubject is the request accountInfo makes.
const infoSubject = "$JS.API.INFO"

// refused reports whether the probe's error is the server refusing the
// user the info request (an older permissions file): the watch stops then.
func refused(nc watchedConn, err error) bool {
	if err == nil || !timedOut(err) && !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	v, ok := parseViolation(nc.LastError())
	return ok && v.subject == infoSubject
}

// accountInfo asks for the account's JetStream info, which only the meta
// leader answers.
func accountInfo(js natsjs.JetStream) error {
	ctx, cancel := context.WithTimeout(context.Background(), unservedProbe)
	defer cancel()
	_, err := js.AccountInfo(ctx)
	return err
}

// unserved reports whether err says the connected server cannot serve
// JetStream: no meta leader known there, nobody answering (nats.go reports
// "no responders" to a JetStream request as JetStream not enabled), or no
// answer in time. Other errors (JetStream not enabled for the account,
// permissions) would be the same on every server. No answer is what
// permissions.go's timedOut takes it to be.
func unserved(err error) bool {
	var apiErr *natsjs.APIError
	switch {
	case err == nil:
		return false
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == jsClusterNotAvailable || apiErr.ErrorCode == natsjs.JSErrCodeJetStreamNotEnabled
	}
	return timedOut(err)
}
