package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

const cancelUsage = `Usage: tgnotify cancel [-db PATH] [flags] KEY

Cancels the notification KEY (an idempotency key such as
order:A1:accepted) before it is sent, and says whether that was in time.

With -db, the outbox row is marked cancelled first (outbox.Cancel): a
pending row is then never published. Then, in every case, a cancel mark
is created in notify_delivered with KV Create, which succeeds only if no
worker has begun sending the notification: the worker that gets it acks
it without sending it, on every channel of its route. A worker's send
claim and the cancel mark are created on the same key, so exactly one of
them wins, and the answer here is final:

  cancelled   exit 0: no worker will send it (notify.events.cancelled)
  too late    exit 3: a worker had begun sending it, or delivered it
              (notify.events.cancel_too_late, with the channel and, when
              delivered, the provider id)

A send that was in flight and then fails without reaching the provider
releases its claim: running the command again (or the publisher carrying
the outbox row's cancel) can then still cancel it. Without -db a key that
was never published is marked all the same, so it is not sent if it is
published later (within notify_delivered's TTL). Flags go before KEY.

`

// exitTooLate is the exit status of a cancel that came too late.
const exitTooLate = 3

// exitError carries a command's exit status besides 0, 1 and 2.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// cancelSettings are what the cancel command's flags configure.
type cancelSettings struct {
	conn connFlags
	db   string
	key  string
}

func parseCancel(args []string, s streams) (*cancelSettings, error) {
	p := &cancelSettings{}
	cs := config.New("tgnotify cancel", config.Options{EnvPrefix: "TGNOTIFY", Getenv: s.getenv, Output: s.stderr, Usage: cancelUsage, AllowArgs: true})
	p.conn.register(cs, defaultTimeout)
	p.conn.registerPrefix(cs)
	config.String(cs, &p.db, "db", "", "the application's SQLite outbox `PATH`: mark the row cancelled there too, so a pending row is never published")
	if err := cs.Parse(args); err != nil {
		return nil, err
	}
	key, err := oneKey(cs)
	if err != nil {
		return nil, err
	}
	p.key = key
	return p, nil
}

// runCancel is `tgnotify cancel`.
func runCancel(ctx context.Context, s streams, args []string) error {
	p, err := parseCancel(args, s)
	if err != nil {
		return err
	}
	now := time.Now()
	if p.db != "" {
		if _, err := os.Stat(p.db); err != nil {
			return &config.Error{Err: fmt.Errorf("-db %s: %w", p.db, err)}
		}
		db, err := outbox.Open(ctx, p.db, outbox.Options{})
		if err != nil {
			return err
		}
		state, err := cancelRow(ctx, db, p.key)
		db.Close()
		switch {
		case errors.Is(err, outbox.ErrNotFound):
			fmt.Fprintf(s.stdout, "outbox: no row for %s (never enqueued, or purged)\n", p.key)
		case err != nil:
			return err
		default:
			fmt.Fprintf(s.stdout, "outbox: %s\n", state)
		}
	}
	sess, err := p.conn.connect(ctx, s, "tgnotify cancel")
	if err != nil {
		return err
	}
	defer sess.close()
	res, err := delivery.Cancel(sess.ctx, sess.js, sess.names, p.key, "tgnotify cancel", now)
	if err != nil {
		return err
	}
	r := res.Record
	switch {
	case res.Outcome == delivery.Cancelled && res.Earlier:
		fmt.Fprintf(s.stdout, "cancelled: %s was cancelled before, by %s at %s; it will not be sent\n", p.key, r.CancelledBy, r.CancelledAt.Format(time.RFC3339))
		return nil
	case res.Outcome == delivery.Cancelled:
		fmt.Fprintf(s.stdout, "cancelled: %s will not be sent\n", p.key)
		return nil
	case r.State == delivery.StateSending:
		return &exitError{code: exitTooLate, err: fmt.Errorf("too late: %s was being sent by %s to %s (claimed at %s)",
			p.key, r.Channel, r.Recipient, r.ClaimedAt.Format(time.RFC3339Nano))}
	}
	return &exitError{code: exitTooLate, err: fmt.Errorf("too late: %s was delivered by %s to %s at %s (provider id %s)",
		p.key, r.Channel, r.Recipient, r.DeliveredAt.Format(time.RFC3339Nano), r.ProviderID)}
}

// cancelRow cancels the outbox row of key in one immediate transaction.
func cancelRow(ctx context.Context, db *sql.DB, key string) (outbox.CancelState, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	state, err := outbox.Cancel(ctx, tx, key)
	if err != nil {
		return 0, err
	}
	return state, tx.Commit()
}
