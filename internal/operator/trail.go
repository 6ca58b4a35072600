package operator

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// clockSkew is how much earlier than a notification's created_at (the
// application's clock) the streams are read for its messages, dead letters
// and events (stored by the NATS server's clock).
const clockSkew = 10 * time.Minute

// Trail is everything tgnotify keeps about one notification.
type Trail struct {
	Key string
	// Outbox is its row in the application's outbox; nil when no database
	// was given or the row is not there (never written, or purged).
	Outbox *OutboxRow
	// Notification is its payload, decoded (from the outbox row or the
	// stream); nil when neither has it.
	Notification *notify.Notification
	// Messages are its messages in NOTIFY, in stream order: the original,
	// the copies handed to the next channels of its route, replays.
	Messages []Message
	// Attempts is the count of failed attempts on the current channel; nil
	// when there is none.
	Attempts *Attempts
	// Delivery is the delivery record; nil until a channel delivered it.
	Delivery *delivery.DeliveryRecord
	// Mark is the notify_delivered entry when it is not a delivery: a
	// send claim (a send began) or a cancel mark.
	Mark *delivery.DeliveryRecord
	// DeadLetters are the dead letters of the key, in the order they died.
	DeadLetters []DeadLetter
	// Events are the delivered, fallback and dead events of the key.
	Events []delivery.Event

	// names are the names the trail is read under.
	names jetstream.Names
}

// OutboxRow is a notification's row in the outbox.
type OutboxRow struct {
	ID int64
	// Channel and Recipient are where the publisher sends it.
	Channel, Recipient string
	CreatedAt          time.Time
	// PublishedAt is zero while the row is pending.
	PublishedAt time.Time
	Payload     []byte
	// Cancelled: the application cancelled the row (outbox.Cancel);
	// CancelResult is what the publisher's cancel mark found ("cancelled",
	// "too_late"; empty until it was written).
	Cancelled    bool
	CancelResult string
}

// Message is one message of a notification in NOTIFY, from its headers.
type Message struct {
	Seq     uint64
	Stored  time.Time
	Subject string
	// Channel and Recipient are read from the subject.
	Channel, Recipient string
	// MsgID is Nats-Msg-Id: the key for the original, <key>/<channel> for a
	// fallback, <key>:replay:<seq> for a replay.
	MsgID string
	// FallbackFrom and FallbackReason say which channel handed it over and
	// why; ChannelSince since when this channel has it.
	FallbackFrom, FallbackReason, ChannelSince string
	// ReplayOf names the dead letter a replay came from.
	ReplayOf string
}

// Attempts is a notification's failed attempts on its current channel.
type Attempts struct {
	Count int
	// MaybeDelivered: the last failed attempt may have reached the provider
	// (a timeout after the request was written).
	MaybeDelivered bool
}

// State sums the trail up in a few words: delivered, dead, pending in the
// outbox, waiting in NOTIFY, or unknown.
func (t *Trail) State() string {
	switch {
	case t.Delivery != nil:
		return "delivered"
	case t.Mark != nil && t.Mark.State == delivery.StateCancelled:
		return "cancelled"
	case t.Outbox != nil && t.Outbox.Cancelled:
		return "cancelled in the outbox"
	case t.lastEvent() == delivery.EventDead:
		return "dead"
	case t.Outbox != nil && t.Outbox.PublishedAt.IsZero():
		return "pending in the outbox"
	case len(t.Messages) > 0:
		return "in " + t.names.OrDefault().Stream + ", not delivered yet"
	case t.Outbox != nil:
		return "published, not found in " + t.names.OrDefault().Stream
	}
	return "unknown"
}

func (t *Trail) lastEvent() string {
	if len(t.Events) == 0 {
		return ""
	}
	return t.Events[len(t.Events)-1].Event
}

// Found reports whether anything at all is known about the key.
func (t *Trail) Found() bool {
	return t.Outbox != nil || len(t.Messages) > 0 || t.Delivery != nil || t.Mark != nil || t.Attempts != nil ||
		len(t.DeadLetters) > 0 || len(t.Events) > 0
}

// FindTrail collects the trail of the notification key. db, when not nil,
// is the application's outbox database (read only). Without a delivery
// record or an outbox row to say where to look, NOTIFY's notification
// subjects are read headers only from since (zero: the stream's start)
// until the first message of the key. n are the names of the deployment.
func FindTrail(ctx context.Context, js natsjs.JetStream, n jetstream.Names, db *sql.DB, key string, since time.Time) (*Trail, error) {
	if err := notify.ValidateKey(key); err != nil {
		return nil, err
	}
	t := &Trail{Key: key, names: n}
	if db != nil {
		row, err := lookupOutbox(ctx, db, key)
		if err != nil {
			return nil, err
		}
		t.Outbox = row
		if row != nil {
			if n, err := notify.DecodePayload(row.Payload); err == nil {
				t.Notification = &n
			}
		}
	}
	if err := t.readRecords(ctx, js); err != nil {
		return nil, err
	}
	if t.Notification == nil {
		if err := t.anchor(ctx, js, since); err != nil {
			return nil, err
		}
	}
	if t.Notification == nil {
		return t, nil
	}
	from := t.Notification.CreatedAt.Add(-clockSkew)
	if err := t.readMessages(ctx, js, from); err != nil {
		return nil, err
	}
	if err := t.readDeadLetters(ctx, js, from); err != nil {
		return nil, err
	}
	if err := t.readEvents(ctx, js, from); err != nil {
		return nil, err
	}
	return t, nil
}

// lookupOutbox reads the key's outbox row; nil when there is none.
func lookupOutbox(ctx context.Context, db *sql.DB, key string) (*OutboxRow, error) {
	var (
		r         OutboxRow
		chat      int64
		token     sql.NullString
		created   int64
		published sql.NullInt64
	)
	err := db.QueryRowContext(ctx, `SELECT id, channel, recipient, recipient_token, payload, created_at, published_at
		FROM outbox_status WHERE key = ?`, key).Scan(&r.ID, &r.Channel, &chat, &token, &r.Payload, &created, &published)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the outbox row of %q: %w", key, err)
	}
	r.Recipient = token.String
	if !token.Valid {
		r.Recipient = strconv.FormatInt(chat, 10)
	}
	r.CreatedAt = time.Unix(0, created).UTC()
	if published.Valid {
		r.PublishedAt = time.Unix(0, published.Int64).UTC()
	}
	// Schema version 4; an older database has no cancellation.
	var result sql.NullString
	if db.QueryRowContext(ctx, `SELECT cancelled_at IS NOT NULL, cancel_result FROM outbox WHERE key = ?`, key).Scan(&r.Cancelled, &result) == nil {
		r.CancelResult = result.String
	}
	return &r, nil
}

// readRecords reads the delivery record and the attempt count.
func (t *Trail) readRecords(ctx context.Context, js natsjs.JetStream) error {
	rec, err := kvGet(ctx, js, t.names.BucketDelivered, delivery.RecordKey(t.Key))
	if err != nil {
		return err
	}
	if rec != nil {
		var d delivery.DeliveryRecord
		if err := json.Unmarshal(rec, &d); err != nil {
			return fmt.Errorf("delivery record of %q: %w", t.Key, err)
		}
		if d.State == delivery.StateDelivered {
			t.Delivery = &d
		} else {
			t.Mark = &d
		}
	}
	att, err := kvGet(ctx, js, t.names.BucketAttempts, delivery.RecordKey(t.Key))
	if err != nil || att == nil {
		return err
	}
	v := string(att)
	a := &Attempts{MaybeDelivered: strings.HasSuffix(v, "+")}
	a.Count, _ = strconv.Atoi(strings.TrimSuffix(v, "+"))
	t.Attempts = a
	return nil
}

// kvGet returns the value of key in bucket, nil when either is missing.
func kvGet(ctx context.Context, js natsjs.JetStream, bucket, key string) ([]byte, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s from bucket %s: %w", key, bucket, err)
	}
	return e.Value(), nil
}

// anchor finds one message of the key in NOTIFY and decodes its payload:
// the one the delivery record names, else the first found by reading the
// notification subjects' headers.
func (t *Trail) anchor(ctx context.Context, js natsjs.JetStream, since time.Time) error {
	if t.Delivery != nil && t.Delivery.StreamSeq > 0 && t.decodeMsg(ctx, js, t.Delivery.StreamSeq) {
		return nil
	}
	var filters []string
	for _, c := range notify.Channels() {
		filters = append(filters, t.names.ChannelFilter(string(c)))
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: filters, HeadersOnly: true}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &since
	}
	var seq uint64
	err := scanRange(ctx, js, t.names.Stream, cfg, func(m natsjs.Msg) error {
		if m.Headers().Get(jetstream.HeaderKey) != t.Key {
			return nil
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		seq = meta.Sequence.Stream
		return errStop
	})
	if err != nil || seq == 0 {
		return err
	}
	if !t.decodeMsg(ctx, js, seq) {
		// Not a notification this program can read (poison): report the
		// message itself.
		m, err := getMsg(ctx, js, t.names.Stream, seq)
		if err != nil {
			return err
		}
		t.Messages = append(t.Messages, t.messageOf(m.Sequence, m.Time, m.Subject, m.Header))
	}
	return nil
}

// decodeMsg reads NOTIFY message seq and keeps its payload if it is the
// key's notification.
func (t *Trail) decodeMsg(ctx context.Context, js natsjs.JetStream, seq uint64) bool {
	m, err := getMsg(ctx, js, t.names.Stream, seq)
	if err != nil {
		return false
	}
	n, err := notify.DecodePayload(m.Data)
	if err != nil || n.Key != t.Key {
		return false
	}
	t.Notification = &n
	return true
}

func getMsg(ctx context.Context, js natsjs.JetStream, stream string, seq uint64) (*natsjs.RawStreamMsg, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return nil, fmt.Errorf("reading %s #%d: %w", stream, seq, err)
	}
	return m, nil
}

// routeTokens returns, for each channel of the notification's route, its
// recipient there.
func (t *Trail) routeTokens() map[notify.Channel]string {
	out := map[notify.Channel]string{}
	for _, c := range t.Notification.Route {
		if r, err := t.Notification.Recipient(c); err == nil {
			out[c] = r
		}
	}
	return out
}

// readMessages reads the headers of the messages on the subjects of the
// notification's route, from from, and keeps the key's.
func (t *Trail) readMessages(ctx context.Context, js natsjs.JetStream, from time.Time) error {
	var filters []string
	for c, r := range t.routeTokens() {
		filters = append(filters, t.names.Subject(string(c), r))
	}
	t.Messages = t.Messages[:0]
	return scanRange(ctx, js, t.names.Stream, since(filters, from), func(m natsjs.Msg) error {
		if m.Headers().Get(jetstream.HeaderKey) != t.Key {
			return nil
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		t.Messages = append(t.Messages, t.messageOf(meta.Sequence.Stream, meta.Timestamp, m.Subject(), m.Headers()))
		return nil
	})
}

func (t *Trail) messageOf(seq uint64, stored time.Time, subject string, h map[string][]string) Message {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	m := Message{Seq: seq, Stored: stored, Subject: subject, MsgID: get(jetstream.HeaderMsgID),
		FallbackFrom: get(jetstream.HeaderFallbackFrom), FallbackReason: get(jetstream.HeaderFallbackReason),
		ChannelSince: get(jetstream.HeaderChannelSince), ReplayOf: get(HeaderReplayOf)}
	m.Channel, m.Recipient, _ = t.names.ParseSubject(subject)
	return m
}

// since is an ordered consumer's configuration for headers only on
// filters, from a time.
func since(filters []string, from time.Time) natsjs.OrderedConsumerConfig {
	return natsjs.OrderedConsumerConfig{FilterSubjects: filters, HeadersOnly: true,
		DeliverPolicy: natsjs.DeliverByStartTimePolicy, OptStartTime: &from}
}

// readDeadLetters reads the headers of the dead letters of the route's
// recipients, from from, and keeps the key's.
func (t *Trail) readDeadLetters(ctx context.Context, js natsjs.JetStream, from time.Time) error {
	var filters []string
	for c, r := range t.routeTokens() {
		filters = append(filters, t.names.DeadLetterSubject(string(c), "*", r))
	}
	return scanRange(ctx, js, t.names.DeadStream, since(filters, from), func(m natsjs.Msg) error {
		if m.Headers().Get(jetstream.HeaderKey) != t.Key {
			return nil
		}
		d, err := deadLetterOf(t.names, m)
		if err != nil {
			return err
		}
		d.Data = nil
		t.DeadLetters = append(t.DeadLetters, d)
		return nil
	})
}

// readEvents reads the headers of the delivered, fallback and dead events
// from from, and the bodies of the key's.
func (t *Trail) readEvents(ctx context.Context, js natsjs.JetStream, from time.Time) error {
	var seqs []uint64
	filters := []string{t.names.SubjectDelivered, t.names.SubjectFallback, t.names.SubjectDead,
		t.names.SubjectCancelled, t.names.SubjectCancelTooLate}
	err := scanRange(ctx, js, t.names.Stream, since(filters, from), func(m natsjs.Msg) error {
		if m.Headers().Get(jetstream.HeaderKey) != t.Key {
			return nil
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		seqs = append(seqs, meta.Sequence.Stream)
		return nil
	})
	if err != nil {
		return err
	}
	for _, seq := range seqs {
		m, err := getMsg(ctx, js, t.names.Stream, seq)
		if err != nil {
			return err
		}
		var ev delivery.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			return fmt.Errorf("event %s #%d: %w", m.Subject, seq, err)
		}
		t.Events = append(t.Events, ev)
	}
	return nil
}
