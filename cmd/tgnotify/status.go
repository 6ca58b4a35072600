package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the driver "sqlite" that -db opens

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/operator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

const statusUsage = `Usage: tgnotify status [-db PATH] [flags] KEY

Prints the whole trail of the notification KEY (an idempotency key such as
order:A1:accepted): its outbox row when -db names the application's database
(id, created, published or pending), its messages in NOTIFY (sequence,
subject, Nats-Msg-Id, fallback headers), its failed attempts, the delivery
record (channel, recipient, provider id, time), its dead letters (channel,
reason, code, description) and its events (delivered, fallback, dead).

It reads the streams from the notification's creation on, headers only, on
the subjects of its route; only when neither the outbox nor a delivery
record says where it is does it read NOTIFY's notification headers (from
-since) until the first message of the key. Exit status 1 when nothing at all
is known about KEY. Flags go before KEY.

`

// statusSettings are what the status command's flags configure.
type statusSettings struct {
	conn  connFlags
	db    string
	since string
	key   string
}

func parseStatus(args []string, s streams) (*statusSettings, error) {
	p := &statusSettings{}
	cs := config.New("tgnotify status", config.Options{EnvPrefix: "TGNOTIFY", Getenv: s.getenv, Output: s.stderr, Usage: statusUsage, AllowArgs: true})
	p.conn.register(cs, defaultTimeout)
	p.conn.registerPrefix(cs)
	config.String(cs, &p.db, "db", "", "the application's SQLite outbox `PATH`, read only; without it the outbox row is not shown")
	config.String(cs, &p.since, "since", "", "when neither the outbox nor a delivery record locates the key, read NOTIFY from this `time` (RFC 3339, or a duration ago such as 24h); default its start").
		Check(checkWhen)
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

// runStatus is `tgnotify status`.
func runStatus(ctx context.Context, s streams, args []string) error {
	p, err := parseStatus(args, s)
	if err != nil {
		return err
	}
	var db *sql.DB
	if p.db != "" {
		if db, err = openReadOnly(p.db); err != nil {
			return err
		}
		defer db.Close()
	}
	sess, err := p.conn.connect(ctx, s, "tgnotify status")
	if err != nil {
		return err
	}
	defer sess.close()
	since, _ := parseWhen(p.since, time.Now())
	t, err := operator.FindTrail(sess.ctx, sess.js, sess.names, db, p.key, since)
	if err != nil {
		return err
	}
	printTrail(s.stdout, sess.names, t, p.db != "")
	if !t.Found() {
		return fmt.Errorf("no trace of %q: %w", p.key, operator.ErrNotFound)
	}
	return nil
}

// openReadOnly opens an outbox database for reading, never creating it.
func openReadOnly(path string) (*sql.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, &config.Error{Err: fmt.Errorf("-db %s: %w", path, err)}
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(5000)")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return db, nil
}

// printTrail writes a trail, read under names, for a person.
func printTrail(w io.Writer, names jetstream.Names, t *operator.Trail, withDB bool) {
	ts := func(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }
	fmt.Fprintf(w, "%s: %s\n", t.Key, t.State())
	if n := t.Notification; n != nil {
		route := make([]string, len(n.Route))
		for i, c := range n.Route {
			route[i] = string(c)
		}
		fmt.Fprintf(w, "  notification: route %s, created %s\n", strings.Join(route, ","), ts(n.CreatedAt))
	}
	switch {
	case t.Outbox != nil:
		pub := "pending (not published yet)"
		if !t.Outbox.PublishedAt.IsZero() {
			pub = "published " + ts(t.Outbox.PublishedAt)
		}
		switch {
		case t.Outbox.Cancelled && t.Outbox.CancelResult != "":
			pub += ", cancelled (" + t.Outbox.CancelResult + ")"
		case t.Outbox.Cancelled:
			pub += ", cancelled"
		}
		fmt.Fprintf(w, "outbox: row %d, %s %s, created %s, %s\n", t.Outbox.ID, t.Outbox.Channel, t.Outbox.Recipient, ts(t.Outbox.CreatedAt), pub)
	case withDB:
		fmt.Fprintln(w, "outbox: no row (never written, or purged after publishing)")
	}
	fmt.Fprintf(w, "%s: %d message(s)\n", names.Stream, len(t.Messages))
	for _, m := range t.Messages {
		fmt.Fprintf(w, "  #%d %s %s  Nats-Msg-Id %s", m.Seq, ts(m.Stored), m.Subject, m.MsgID)
		if m.FallbackFrom != "" {
			fmt.Fprintf(w, "  fallback from %s (%s), since %s", m.FallbackFrom, m.FallbackReason, m.ChannelSince)
		}
		if m.ReplayOf != "" {
			fmt.Fprintf(w, "  replay of %s", m.ReplayOf)
		}
		fmt.Fprintln(w)
	}
	switch a := t.Attempts; {
	case a == nil:
		fmt.Fprintln(w, "attempts: none failed")
	case a.MaybeDelivered:
		fmt.Fprintf(w, "attempts: %d failed (the last may have reached the provider)\n", a.Count)
	default:
		fmt.Fprintf(w, "attempts: %d failed\n", a.Count)
	}
	if d := t.Delivery; d != nil {
		fmt.Fprintf(w, "delivered: %s %s, provider id %s, at %s (%s #%d)\n", d.Channel, d.Recipient, d.ProviderID, ts(d.DeliveredAt), names.Stream, d.StreamSeq)
	} else {
		fmt.Fprintln(w, "delivered: no delivery record")
	}
	switch m := t.Mark; {
	case m == nil:
	case m.State == delivery.StateCancelled:
		fmt.Fprintf(w, "cancelled: by %s at %s\n", m.CancelledBy, ts(m.CancelledAt))
	default:
		fmt.Fprintf(w, "sending: claimed by %s for %s at %s (NOTIFY #%d)\n", m.Channel, m.Recipient, ts(m.ClaimedAt), m.StreamSeq)
	}
	fmt.Fprintf(w, "dead letters: %d\n", len(t.DeadLetters))
	for _, d := range t.DeadLetters {
		fmt.Fprintf(w, "  #%d %s %s %s %s: %s %s\n", d.Seq, ts(d.Stored), d.Channel, d.Recipient, d.Reason, d.Code, d.Description)
	}
	fmt.Fprintf(w, "events: %d\n", len(t.Events))
	for _, e := range t.Events {
		switch e.Event {
		case "delivered":
			fmt.Fprintf(w, "  %s delivered by %s to %s, provider id %s\n", ts(e.At), e.Channel, e.Recipient, e.ProviderID)
		case "fallback":
			fmt.Fprintf(w, "  %s fallback from %s to %s: %s %d %s\n", ts(e.At), e.Channel, e.Next, e.Reason, e.Code, e.Description)
		default:
			fmt.Fprintf(w, "  %s %s on %s: %s %d %s\n", ts(e.At), e.Event, e.Channel, e.Reason, e.Code, e.Description)
		}
	}
}

// parseWhen reads a point in time: RFC 3339, or a duration meaning that
// long before now. Empty is the zero time.
func parseWhen(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, errors.New("want an RFC 3339 time (2026-11-30T12:00:00Z) or a duration ago (24h)")
	}
	return now.Add(-d), nil
}

// checkWhen is the binding check of a time flag.
func checkWhen(v string) error {
	_, err := parseWhen(v, time.Now())
	return err
}

// oneKey returns the one idempotency key a command takes after its flags,
// or an error naming what it got instead.
func oneKey(cs *config.Set) (string, error) {
	rest := cs.FlagSet().Args()
	if len(rest) != 1 {
		return "", &config.Error{Err: fmt.Errorf("want one KEY after the flags, got %q", rest)}
	}
	return rest[0], nil
}
