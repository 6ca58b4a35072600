package operator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// ErrNotFound is returned for a dead letter (or anything else) that does not
// exist.
var ErrNotFound = errors.New("not found")

// ErrNotReplayable is returned by [ReplayMsg] for a dead letter that cannot
// go back to NOTIFY: a poison message without a key, or one whose original
// subject is not a notification subject.
var ErrNotReplayable = errors.New("not replayable")

// Filter selects dead letters. The zero Filter selects every one.
type Filter struct {
	// Channel, Reason and Recipient are tokens of the dead-letter subject
	// dead.notify.<channel>.<reason>.<recipient>; empty matches any.
	Channel, Reason, Recipient string
	// Key selects the dead letters of one idempotency key (Notify-Key).
	Key string
	// Since and Until bound when NOTIFY_DEAD stored them; zero is unbounded.
	Since, Until time.Time
}

// Validate checks that the subject tokens can be tokens and the times are
// in order.
func (f Filter) Validate() error {
	for _, t := range []struct{ name, v string }{{"channel", f.Channel}, {"reason", f.Reason}, {"recipient", f.Recipient}} {
		if t.v != "" && !jetstream.ValidToken(t.v) {
			return fmt.Errorf("%s %q is not a subject token (no spaces, dots or wildcards)", t.name, t.v)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return fmt.Errorf("until %s is before since %s", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	return nil
}

// Subject returns the subject filter the dead letters f selects are stored
// on under the names n: dead.notify.<channel>.<reason>.<recipient> with *
// for what f leaves open, or dead.> when it names none of them.
func (f Filter) Subject(n jetstream.Names) string {
	if f.Channel == "" && f.Reason == "" && f.Recipient == "" {
		return n.DeadSubjects
	}
	tok := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	return n.DeadLetterSubject(tok(f.Channel), tok(f.Reason), tok(f.Recipient))
}

// SubjectOnly reports whether the subject alone says what f selects (no
// key, no time bound), so that the server can purge them by subject.
func (f Filter) SubjectOnly() bool {
	return f.Key == "" && f.Since.IsZero() && f.Until.IsZero()
}

// DeadLetter is one message of NOTIFY_DEAD and what its subject and headers
// say.
type DeadLetter struct {
	// Seq is its sequence in NOTIFY_DEAD, Stored when it was stored.
	Seq     uint64
	Stored  time.Time
	Subject string
	// Channel, Reason and Recipient are read from the subject
	// dead.notify.<channel>.<reason>.<recipient> (the reason from
	// Notify-Reason when the subject is another shape).
	Channel, Reason, Recipient string
	// Key is Notify-Key: empty for a poison message without one.
	Key string
	// Code and Description are the provider's answer (or the worker's
	// reason), Attempts the transient failures before it died.
	Code, Description, Attempts string
	// OriginalSubject and OriginalSeq say where it was in NOTIFY.
	OriginalSubject string
	OriginalSeq     uint64
	// DeadAt is Notify-Dead-At as written.
	DeadAt string
	// Header is every header; Data the body, nil when read headers only.
	Header nats.Header
	Data   []byte
}

// newDeadLetter reads a dead letter's subject (under the names n) and
// headers.
func newDeadLetter(n jetstream.Names, seq uint64, stored time.Time, subject string, h nats.Header, data []byte) DeadLetter {
	d := DeadLetter{
		Seq: seq, Stored: stored, Subject: subject, Header: h, Data: data,
		Reason:          h.Get(jetstream.HeaderReason),
		Key:             h.Get(jetstream.HeaderKey),
		Code:            h.Get(jetstream.HeaderErrorCode),
		Description:     h.Get(jetstream.HeaderErrorDescription),
		Attempts:        h.Get(jetstream.HeaderAttempts),
		OriginalSubject: h.Get(jetstream.HeaderOriginalSubject),
		DeadAt:          h.Get(jetstream.HeaderDeadAt),
	}
	d.OriginalSeq, _ = strconv.ParseUint(h.Get(jetstream.HeaderOriginalSeq), 10, 64)
	if ch, reason, r, err := n.ParseDeadLetterSubject(subject); err == nil && (d.Reason == "" || d.Reason == reason) {
		d.Channel, d.Reason, d.Recipient = ch, reason, r
	} else if ch, r, err := n.ParseSubject(strings.TrimPrefix(subject, n.DeadPrefix)); err == nil {
		d.Channel, d.Recipient = ch, r // poison kept on its original subject
	}
	return d
}

// deadLetterOf reads a message delivered by a consumer of NOTIFY_DEAD.
func deadLetterOf(n jetstream.Names, m natsjs.Msg) (DeadLetter, error) {
	meta, err := m.Metadata()
	if err != nil {
		return DeadLetter{}, err
	}
	return newDeadLetter(n, meta.Sequence.Stream, meta.Timestamp, m.Subject(), m.Headers(), m.Data()), nil
}

// scanDead calls fn for each dead letter f selects, in stream order, with
// or without its body.
func scanDead(ctx context.Context, js natsjs.JetStream, n jetstream.Names, f Filter, headersOnly bool, fn func(DeadLetter) error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{f.Subject(n)}, HeadersOnly: headersOnly}
	if !f.Since.IsZero() {
		since := f.Since
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &since
	}
	return scanRange(ctx, js, n.DeadStream, cfg, func(m natsjs.Msg) error {
		d, err := deadLetterOf(n, m)
		if err != nil {
			return err
		}
		if !f.Until.IsZero() && d.Stored.After(f.Until) {
			return errStop
		}
		if f.Key != "" && d.Key != f.Key {
			return nil
		}
		if headersOnly {
			d.Data = nil
		}
		return fn(d)
	})
}

// List calls fn for each dead letter f selects, in the order they died,
// reading headers only. It reads the dead letters that exist when it
// starts.
func List(ctx context.Context, js natsjs.JetStream, n jetstream.Names, f Filter, fn func(DeadLetter) error) error {
	return scanDead(ctx, js, n, f, true, fn)
}

// Get reads dead letter seq, body included. A sequence that holds no
// message matches [ErrNotFound].
func Get(ctx context.Context, js natsjs.JetStream, n jetstream.Names, seq uint64) (DeadLetter, error) {
	s, err := js.Stream(ctx, n.DeadStream)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("reading stream %s: %w", n.DeadStream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return DeadLetter{}, fmt.Errorf("%s #%d: %w", n.DeadStream, seq, ErrNotFound)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("reading %s #%d: %w", n.DeadStream, seq, err)
	}
	return newDeadLetter(n, m.Sequence, m.Time, m.Subject, m.Header, m.Data), nil
}

// ReplayID is the message id of a replay of dead letter seq of key:
// <key>:replay:<seq>, the one scripts/dead-letters.sh and the runbook's
// manual procedure use, so that a replay by any of them is a duplicate for
// the others inside NOTIFY's duplicate window.
func ReplayID(key string, seq uint64) string { return key + ":replay:" + strconv.FormatUint(seq, 10) }

// ReplayMsg builds the message that replays d, as scripts/dead-letters.sh
// does: d's body, unchanged, on its original subject, with Nats-Msg-Id
// [ReplayID], Notify-Key, Content-Type (application/json when d has none),
// Notify-Replay-Of NOTIFY_DEAD:<seq> and d's Notify-Created-At. A dead
// letter without a key or without a notification subject matches
// [ErrNotReplayable]. n are the names d was read under.
func ReplayMsg(n jetstream.Names, d DeadLetter) (*nats.Msg, error) {
	if d.Key == "" {
		return nil, fmt.Errorf("#%d: no %s header (a poison message: fix the producer instead): %w", d.Seq, jetstream.HeaderKey, ErrNotReplayable)
	}
	subject := d.OriginalSubject
	if subject == "" && d.Channel != "" && d.Recipient != "" {
		subject = n.Subject(d.Channel, d.Recipient)
	}
	if _, _, err := n.ParseSubject(subject); err != nil {
		return nil, fmt.Errorf("#%d: original subject %q is not %s.<channel>.<recipient>: %w", d.Seq, subject, n.Prefix, ErrNotReplayable)
	}
	h := nats.Header{}
	h.Set(jetstream.HeaderMsgID, ReplayID(d.Key, d.Seq))
	h.Set(jetstream.HeaderKey, d.Key)
	ct := d.Header.Get(jetstream.HeaderContentType)
	if ct == "" {
		ct = "application/json"
	}
	h.Set(jetstream.HeaderContentType, ct)
	h.Set(HeaderReplayOf, n.DeadStream+":"+strconv.FormatUint(d.Seq, 10))
	if c := d.Header.Get(jetstream.HeaderCreatedAt); c != "" {
		h.Set(jetstream.HeaderCreatedAt, c)
	}
	return &nats.Msg{Subject: subject, Header: h, Data: d.Data}, nil
}

// HeaderReplayOf names the dead letter a replayed notification came from:
// NOTIFY_DEAD:<seq>.
const HeaderReplayOf = "Notify-Replay-Of"

// Replayed is the outcome of replaying one dead letter.
type Replayed struct {
	DeadLetter
	// To is the subject it was published to, MsgID its message id.
	To, MsgID string
	// Seq in NOTIFY where it is stored; Duplicate when NOTIFY already held
	// that replay id (an earlier replay of the same dead letter).
	StoredSeq uint64
	Duplicate bool
	// Err says why it was not replayed (matches ErrNotReplayable for a
	// poison message).
	Err error
}

// replayBatch bounds the replays published and not yet acknowledged.
const replayBatch = 512

// replayer publishes replays asynchronously and reports them in order.
type replayer struct {
	js      natsjs.JetStream
	names   jetstream.Names
	fn      func(Replayed) error
	pending []pendingReplay
}

type pendingReplay struct {
	r   Replayed
	ack natsjs.PubAckFuture
}

func (p *replayer) add(ctx context.Context, d DeadLetter) error {
	r := Replayed{DeadLetter: d}
	m, err := ReplayMsg(p.names, d)
	if err != nil {
		r.Err = err
		p.pending = append(p.pending, pendingReplay{r: r})
	} else {
		r.To, r.MsgID = m.Subject, m.Header.Get(jetstream.HeaderMsgID)
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			r.Err = fmt.Errorf("publishing %s to %s: %w", d.Key, m.Subject, err)
		}
		p.pending = append(p.pending, pendingReplay{r: r, ack: f})
	}
	if len(p.pending) >= replayBatch {
		return p.flush(ctx)
	}
	return nil
}

// flush waits for the outstanding PubAcks and reports every replay so far.
func (p *replayer) flush(ctx context.Context) error {
	for _, pr := range p.pending {
		r := pr.r
		if pr.ack != nil && r.Err == nil {
			select {
			case ack := <-pr.ack.Ok():
				r.StoredSeq, r.Duplicate = ack.Sequence, ack.Duplicate
			case err := <-pr.ack.Err():
				r.Err = fmt.Errorf("publishing %s to %s: %w", r.Key, r.To, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := p.fn(r); err != nil {
			return err
		}
	}
	p.pending = p.pending[:0]
	return nil
}

// Replay publishes every dead letter f selects back to its original
// subject ([ReplayMsg]) and calls fn with each outcome, in order. A poison
// message is reported with an error matching [ErrNotReplayable] and
// skipped. The dead letters stay in NOTIFY_DEAD.
func Replay(ctx context.Context, js natsjs.JetStream, n jetstream.Names, f Filter, fn func(Replayed) error) error {
	p := &replayer{js: js, names: n, fn: fn}
	if err := scanDead(ctx, js, n, f, false, func(d DeadLetter) error { return p.add(ctx, d) }); err != nil {
		return err
	}
	return p.flush(ctx)
}

// ReplaySeqs replays the dead letters with the given sequences, in the
// order given. A sequence that holds no dead letter is reported with an
// error matching [ErrNotFound].
func ReplaySeqs(ctx context.Context, js natsjs.JetStream, n jetstream.Names, seqs []uint64, fn func(Replayed) error) error {
	p := &replayer{js: js, names: n, fn: fn}
	for _, seq := range seqs {
		d, err := Get(ctx, js, n, seq)
		if errors.Is(err, ErrNotFound) {
			p.pending = append(p.pending, pendingReplay{r: Replayed{DeadLetter: DeadLetter{Seq: seq}, Err: err}})
			continue
		}
		if err != nil {
			return err
		}
		if err := p.add(ctx, d); err != nil {
			return err
		}
	}
	return p.flush(ctx)
}

// Purged says what [Purge] removed.
type Purged struct {
	// Subject is set when the server purged by subject at once; Count is
	// then the number of dead letters on it just before.
	Subject string
	Count   uint64
}

// Purge deletes the dead letters f selects (with dryRun, only counts and
// reports them). When the subject alone selects them ([Filter.SubjectOnly])
// the server purges that subject at once and fn is not called; otherwise
// they are read headers only and deleted one by one, fn seeing each.
func Purge(ctx context.Context, js natsjs.JetStream, n jetstream.Names, f Filter, dryRun bool, fn func(DeadLetter) error) (Purged, error) {
	if err := f.Validate(); err != nil {
		return Purged{}, err
	}
	s, err := js.Stream(ctx, n.DeadStream)
	if err != nil {
		return Purged{}, fmt.Errorf("reading stream %s: %w", n.DeadStream, err)
	}
	if f.SubjectOnly() {
		p := Purged{Subject: f.Subject(n)}
		if p.Count, err = countOn(ctx, js, n, s, p.Subject); err != nil {
			return Purged{}, err
		}
		if dryRun || p.Count == 0 {
			return p, nil
		}
		opts := []natsjs.StreamPurgeOpt{}
		if p.Subject != n.DeadSubjects {
			opts = append(opts, natsjs.WithPurgeSubject(p.Subject))
		}
		if err := s.Purge(ctx, opts...); err != nil {
			return Purged{}, fmt.Errorf("purging %s of %s: %w", n.DeadStream, p.Subject, err)
		}
		return p, nil
	}
	var p Purged
	err = scanDead(ctx, js, n, f, true, func(d DeadLetter) error {
		if !dryRun {
			if err := s.DeleteMsg(ctx, d.Seq); err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
				return fmt.Errorf("deleting %s #%d: %w", n.DeadStream, d.Seq, err)
			}
		}
		p.Count++
		return fn(d)
	})
	return p, err
}

// countOn returns the number of messages of stream s on subject (a filter).
func countOn(ctx context.Context, js natsjs.JetStream, n jetstream.Names, s natsjs.Stream, subject string) (uint64, error) {
	if subject == n.DeadSubjects {
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	c, err := orderedConsumer(ctx, js, s, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true})
	if err != nil {
		return 0, err
	}
	defer dispose(ctx, js, n.DeadStream, c)
	info, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.NumPending, nil
}
