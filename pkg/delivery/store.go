package delivery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// store is the worker's JetStream side besides the consumer: delivery
// records (notify_delivered), attempt counts (notify_attempts), the shared
// recipient state (notify_chats, state.go), dead letters (NOTIFY_DEAD) and
// events (notify.events.>).
type store struct {
	js        natsjs.JetStream
	names     jetstream.Names
	channel   string
	delivered natsjs.KeyValue
	attempts  natsjs.KeyValue
	state     *sharedState
	log       *slog.Logger
	now       func() time.Time
	// cancelLost counts a delivery record written over a cancel mark.
	cancelLost func()
	// readCopied counts a copy of a batched read sent because no copy had
	// been answered (readLast); nil counts nothing.
	readCopied func()
	// worker is the id this worker's send claims carry (holder.go).
	worker string
	// held reports whether a send claim found holds this worker off
	// (Worker.heldElsewhere); nil takes every claim over.
	held func(ctx context.Context, rec DeliveryRecord) bool
	// deliveredSubjects and attemptsSubjects name the buckets' streams
	// and subjects for batched reads and asynchronous writes (records.go).
	deliveredSubjects, attemptsSubjects bucketSubjects
	// lookups batches the record lookups of attempts; nil reads each key
	// on its own. direct carries the batched reads.
	lookups *lookups
	direct  *directReader

	// recent is a bounded in-memory set of recently delivered keys, at
	// most keep of them, the oldest forgotten first (ring). It covers the
	// window in which notify_delivered cannot be written (NATS down right
	// after the provider accepted a message): a redelivery of that message
	// is then still recognised by this process. The set grows as keys come:
	// allocated whole at start, it cost the worker 2.6 MB before it had
	// delivered anything (the memory benchmark's heap profile).
	mu     sync.Mutex
	recent map[string]struct{}
	ring   []string
	next   int
	keep   int
}

// DeliveryRecord is what the worker keeps, per idempotency key, once a
// provider accepted a message: the proof of delivery support staff can look
// up. The same bucket holds, under the same key, a worker's send claim and
// a cancel mark (State; cancel.go).
type DeliveryRecord struct {
	Key         string    `json:"key"`
	Channel     string    `json:"channel"`
	Recipient   string    `json:"recipient"`
	ProviderID  string    `json:"provider_id,omitempty"`
	DeliveredAt time.Time `json:"delivered_at"`
	StreamSeq   uint64    `json:"stream_seq"`
	// State is empty for a delivery record, [StateSending] for a send
	// claim and [StateCancelled] for a cancel mark.
	State string `json:"state,omitempty"`
	// ClaimedAt is when a send claim was written, and ClaimedBy the id of
	// the worker that wrote it (it answers on Names.LiveSubject while it
	// lives).
	ClaimedAt time.Time `json:"claimed_at,omitzero"`
	ClaimedBy string    `json:"claimed_by,omitempty"`
	// CancelledAt and CancelledBy say when and by whom a cancel mark was
	// written.
	CancelledAt time.Time `json:"cancelled_at,omitzero"`
	CancelledBy string    `json:"cancelled_by,omitempty"`
}

// RecordKey maps an idempotency key to its key in notify_delivered and
// notify_attempts: KV keys allow only [-/_=.a-zA-Z0-9], so the key is hashed
// (SHA-256, hex).
func RecordKey(key string) string {
	return prefixedRecordKey("", key)
}

// prefixedRecordKey is prefix + RecordKey(key), built in one allocation:
// each message's claim and record are written to such a subject.
func prefixedRecordKey(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	b.Grow(len(prefix) + hex.EncodedLen(len(sum)))
	b.WriteString(prefix)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	b.Write(h[:])
	return b.String()
}

func (s *store) remember(key string) {
	if s.keep <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.recent[key]; ok {
		return
	}
	if s.recent == nil {
		s.recent = make(map[string]struct{})
	}
	if len(s.ring) < s.keep {
		s.ring = append(s.ring, key)
	} else {
		delete(s.recent, s.ring[s.next])
		s.ring[s.next] = key
		s.next = (s.next + 1) % s.keep
	}
	s.recent[key] = struct{}{}
}

// lookup reads what notify_delivered says of a key: remembered is true
// when this process delivered it recently (no read then); otherwise the
// entry, nil when there is none, and last, the revision of the key's last
// message (the entry's, or the delete marker of a released claim; 0 when
// the key never had one). The read goes with the next batch (records.go).
func (s *store) lookup(ctx context.Context, key string) (remembered bool, e *entry, last uint64, err error) {
	if s.remembers(key) {
		return true, nil, 0, nil
	}
	e, last, err = s.read(ctx, key)
	if err != nil {
		return false, nil, 0, err
	}
	if e != nil && e.state() == StateDelivered {
		s.remember(key)
	}
	return false, e, last, nil
}

// read reads what notify_delivered holds for a key, whatever this process
// remembers: the entry (nil when there is none) and the revision of the
// key's last message. The read goes with the next batch (records.go).
func (s *store) read(ctx context.Context, key string) (e *entry, last uint64, err error) {
	if s.lookups != nil {
		e, last, err = s.lookups.get(ctx, key)
	} else {
		var found map[string]*entry
		var lasts map[string]uint64
		found, lasts, err = s.readRecordsAt(ctx, []string{key})
		e, last = found[key], lasts[key]
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading delivery record of %q: %w", key, err)
	}
	return e, last, nil
}

// readFromLeader is read asked of notify_delivered's leader, one key per
// request: read's batched direct gets may be answered by a replica that is
// behind (a node back from a partition, catching up), which knows nothing
// of a record stored meanwhile. A decision that such an answer would make
// wrong, and that nothing later undoes, asks here: a give-up hands the
// notification to the next channel (found by the long cluster chaos run,
// bug 53). While the leader cannot be reached (an election), it fails.
func (s *store) readFromLeader(ctx context.Context, key string) (e *entry, last uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	b := s.deliveredSubjects
	m, err := s.lastMsg(ctx, b.stream, prefixedRecordKey(b.prefix, key))
	if err != nil {
		return nil, 0, fmt.Errorf("reading delivery record of %q from the leader of %s: %w", key, b.stream, jetstream.Denied(s.js.Conn(), err))
	}
	if m == nil {
		return nil, 0, nil
	}
	switch m.Header.Get(kvOperationHeader) {
	case "DEL", "PURGE":
		return nil, m.Seq, nil
	}
	return parseEntry(key, m.Data, m.Seq), m.Seq, nil
}

// remembers reports whether this process delivered (or found delivered) the
// key recently.
func (s *store) remembers(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.recent[key]
	return ok
}

// isDelivered reports whether a notification with this key needs no more
// sending: delivered, on any channel, or cancelled. A send claim does not
// count: the send it announces may have failed.
func (s *store) isDelivered(ctx context.Context, key string) (bool, error) {
	remembered, e, _, err := s.lookup(ctx, key)
	if err != nil || remembered {
		return remembered, err
	}
	return e.settles(), nil
}

// record stores the proof of delivery over this attempt's send claim (at
// its revision, claim > 0), or with KV Create when the send had no claim.
// The key is remembered in memory first, so it counts even when the bucket
// write fails. What it finds instead is overwritten: a claim another worker
// took over (both sent), or a cancel mark written while this send had no
// claim — a lost cancel, logged and counted.
func (s *store) record(ctx context.Context, r DeliveryRecord, claim uint64) error {
	s.remember(r.Key)
	b, err := r.marshal()
	if err != nil {
		return err
	}
	if claim > 0 {
		_, err = s.delivered.Update(ctx, RecordKey(r.Key), b, claim)
	} else {
		_, err = s.delivered.Create(ctx, RecordKey(r.Key), b)
	}
	switch {
	case err == nil:
		return nil
	case !wrongRevision(err) && !errors.Is(err, natsjs.ErrKeyExists):
		return fmt.Errorf("writing delivery record of %q to %s: %w", r.Key, s.names.BucketDelivered, err)
	}
	if e, rerr := readEntry(ctx, s.delivered, r.Key); rerr == nil && e != nil && e.state() == StateCancelled {
		s.log.Error("delivered although a cancel mark was written: the send had no claim", "key", r.Key, "cancelled_by", e.rec.CancelledBy)
		if s.cancelLost != nil {
			s.cancelLost()
		}
	}
	if _, err := s.delivered.Put(ctx, RecordKey(r.Key), b); err != nil {
		return fmt.Errorf("writing delivery record of %q to %s: %w", r.Key, s.names.BucketDelivered, err)
	}
	return nil
}

// wrongRevision reports a KV write refused because the entry changed.
func wrongRevision(err error) bool {
	var apiErr *natsjs.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequenceConstant)
}

// attemptKey is the notify_attempts key of a notification on this
// channel: each channel of a route has its own budget. Telegram keeps the
// key it always had.
func (s *store) attemptKey(key string) string {
	if s.channel == "telegram" {
		return RecordKey(key)
	}
	return RecordKey(s.channel + "\x00" + key)
}

// maybeDeliveredMark follows the count when the last failed attempt may
// have reached the provider after all (a timeout after the request was
// written).
const maybeDeliveredMark = "+"

// doneMark starts the attempt record of a notification this channel
// settled without a delivery: it gave up (dead letter, fallback), followed
// by the reason. A redelivery — the original's termination failed — gives up
// again with that reason instead of sending, and a worker taking over knows
// it needs no waiting for (takeover.go).
const doneMark = "done "

// isGiveUpMark reports whether a notify_attempts value is a give-up mark.
func isGiveUpMark(v []byte) bool {
	return bytes.HasPrefix(v, []byte(doneMark))
}

// attempts is what notify_attempts says of a notification on this channel.
type attempts struct {
	// n is how many attempts failed.
	n int
	// done: the channel gave up on it, for reason.
	done   bool
	reason string
}

// attemptsOf reads the failed attempts of a notification so far; the budget
// survives redeliveries, restarts and a move to the standby worker.
func (s *store) attemptsOf(ctx context.Context, key string) (attempts, error) {
	e, err := s.attempts.Get(ctx, s.attemptKey(key))
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return attempts{}, nil
	case err != nil:
		return attempts{}, fmt.Errorf("reading attempts of %q: %w", key, err)
	}
	v := string(e.Value())
	if reason, ok := strings.CutPrefix(v, doneMark); ok {
		return attempts{done: true, reason: reason}, nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v, maybeDeliveredMark))
	if err != nil {
		return attempts{}, nil // a corrupt counter restarts the budget rather than blocking the message
	}
	return attempts{n: n}, nil
}

func (s *store) setAttempts(ctx context.Context, key string, n int, maybeDelivered bool) error {
	v := strconv.Itoa(n)
	if maybeDelivered {
		v += maybeDeliveredMark
	}
	if _, err := s.attempts.Put(ctx, s.attemptKey(key), []byte(v)); err != nil {
		return fmt.Errorf("writing attempts of %q: %w", key, err)
	}
	return nil
}

// markDone records that this channel gave up on the notification, and why.
func (s *store) markDone(ctx context.Context, key, reason string) error {
	if _, err := s.attempts.Put(ctx, s.attemptKey(key), []byte(doneMark+reason)); err != nil {
		return fmt.Errorf("writing attempts of %q: %w", key, err)
	}
	return nil
}

// clearAttempts forgets the failed attempts of a delivered notification.
func (s *store) clearAttempts(ctx context.Context, key string) error {
	if err := s.attempts.Delete(ctx, s.attemptKey(key)); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return fmt.Errorf("clearing attempts of %q: %w", key, err)
	}
	return nil
}

// settledKeys reports which of keys this channel is done with: delivered
// (on any channel) or cancelled, or given up on by this channel. A send claim
// does not count: the send it announces may have failed. Both buckets are
// read in one batch each.
func (s *store) settledKeys(ctx context.Context, keys []string) (map[string]bool, error) {
	out := make(map[string]bool, len(keys))
	var ask []string
	for _, k := range keys {
		switch {
		case k == "" || out[k]:
		case s.remembers(k):
			out[k] = true
		default:
			ask = append(ask, k)
		}
	}
	if len(ask) == 0 {
		return out, nil
	}
	delivered, err := s.readRecords(ctx, ask)
	if err != nil {
		return nil, fmt.Errorf("reading delivery records: %w", err)
	}
	attemptKeys := make([]string, 0, len(ask))
	byAttemptKey := make(map[string]string, len(ask))
	for _, k := range ask {
		if delivered[k].settles() {
			out[k] = true
			continue
		}
		ak := s.attemptKey(k)
		attemptKeys = append(attemptKeys, ak)
		byAttemptKey[ak] = k
	}
	if len(attemptKeys) == 0 {
		return out, nil
	}
	values, err := s.readLast(ctx, s.attemptsSubjects, attemptKeys)
	if err != nil {
		return nil, fmt.Errorf("reading attempts: %w", err)
	}
	for ak, v := range values {
		if isGiveUpMark(v.data) {
			out[byAttemptKey[ak]] = true
		}
	}
	return out, nil
}

// settledOnLeader is settledKeys asked of the buckets' leaders, two
// requests per key: a replica that is behind may not know a record stored
// meanwhile, and a takeover that took a settled message for an
// unacknowledged one would end with a lane unchecked (verifySuspects).
// While a leader cannot be reached (an election), it fails.
func (s *store) settledOnLeader(ctx context.Context, keys []string) (map[string]bool, error) {
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		if s.remembers(k) {
			out[k] = true
			continue
		}
		e, _, err := s.readFromLeader(ctx, k)
		if err != nil {
			return nil, err
		}
		if e.settles() {
			out[k] = true
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		b := s.attemptsSubjects
		m, err := s.lastMsg(lctx, b.stream, b.prefix+s.attemptKey(k))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("reading the give-up mark of %q from the leader of %s: %w", k, b.stream, jetstream.Denied(s.js.Conn(), err))
		}
		if m != nil && m.Header.Get(kvOperationHeader) == "" && isGiveUpMark(m.Data) {
			out[k] = true
		}
	}
	return out, nil
}

// pinIDHeader is the header nats-server adds to messages delivered to a
// pinned client of a priority group.
const pinIDHeader = "Nats-Pin-Id"

// letter says why a message is dead.
type letter struct {
	reason      string
	code        int
	description string
	attempts    int
	// maybeDelivered: the last attempt may have reached the provider.
	maybeDelivered bool
}

// deadLetter publishes a copy of the job's message to NOTIFY_DEAD with the
// reason in its headers, waits for the PubAck, and only then terminates the
// original. If the copy cannot be stored the original is left alone, so a
// dead letter is never lost between the two streams.
//
// The copy's subject is dead.<original subject>; its Nats-Msg-Id is derived
// from the original's stream sequence, so a retry after a crash between the
// two steps is de-duplicated by NOTIFY_DEAD.
func (s *store) deadLetter(ctx context.Context, j *job, l letter) error {
	// The original's headers, without the server's pull bookkeeping (the
	// pin), which packHeader left out. Headers that cannot be read back do
	// not keep the message from its dead letter, which says the rest.
	h, err := unpackHeader(j.header)
	if err != nil {
		s.log.Warn("the original's headers cannot be read back; the dead letter goes without them", "seq", j.seq, "err", err)
		h = nats.Header{}
	}
	subject := s.names.DeadLetterSubject(s.channel, l.reason, j.lane)
	msgID := "dead:" + strconv.FormatUint(j.seq, 10)
	if j.lane == "" || !jetstream.ValidToken(l.reason) { // poison on an unusable subject
		subject = s.names.DeadPrefix + j.subject
		sum := sha256.Sum256(append([]byte(j.subject+"\x00"), j.data...))
		msgID = "dead:poison:" + hex.EncodeToString(sum[:16])
	}
	key := j.n.Key
	if key == "" {
		key = h.Get(jetstream.HeaderKey)
	}
	h.Set(nats.MsgIdHdr, msgID)
	if key != "" {
		h.Set(jetstream.HeaderKey, key)
	}
	h.Set(jetstream.HeaderReason, l.reason)
	h.Set(jetstream.HeaderErrorCode, strconv.Itoa(l.code))
	h.Set(jetstream.HeaderErrorDescription, l.description)
	h.Set(jetstream.HeaderAttempts, strconv.Itoa(l.attempts))
	h.Set(jetstream.HeaderOriginalSubject, j.subject)
	h.Set(jetstream.HeaderOriginalSeq, strconv.FormatUint(j.seq, 10))
	h.Set(jetstream.HeaderDeadAt, s.now().UTC().Format(time.RFC3339Nano))
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: j.data}); err != nil {
		return fmt.Errorf("publishing dead letter for seq %d to %s: %w", j.seq, subject, jetstream.Denied(s.js.Conn(), err))
	}
	j.settling.Store(true)
	if err := j.reply.TermWithReason(l.reason); err != nil && !errors.Is(err, natsjs.ErrMsgAlreadyAckd) {
		s.log.Warn("dead letter stored but terminating the original failed; it will be redelivered and dead-lettered again (de-duplicated)",
			"seq", j.seq, "err", err)
	}
	for _, d := range j.dups {
		_ = d.reply.TermWithReason(l.reason)
	}
	s.log.Info("dead-lettered", "key", key, "recipient", j.lane, "seq", j.seq, "reason", l.reason,
		"code", l.code, "description", l.description, "attempts", l.attempts)
	return nil
}

// fallback publishes the job's notification on the next channel of its
// route and waits for the PubAck: the same body, under the message id
// <key>/<channel> (so a repeat after a crash is de-duplicated), with the
// channel it came from, why, and since when the next channel has it
// (Notify-Channel-Since, from which that channel's fallback_after counts).
func (s *store) fallback(ctx context.Context, j *job, next notify.Channel, l letter, now time.Time) error {
	token, err := j.n.Recipient(next)
	if err != nil {
		return err
	}
	m := jetstream.Msg(s.names.Subject(string(next), token), j.n.Key, j.n.CreatedAt, notify.PayloadContentType, j.data)
	m.Header.Set(nats.MsgIdHdr, j.n.Key+"/"+string(next))
	m.Header.Set(jetstream.HeaderFallbackFrom, s.channel)
	m.Header.Set(jetstream.HeaderFallbackReason, l.reason)
	m.Header.Set(jetstream.HeaderChannelSince, now.UTC().Format(time.RFC3339Nano))
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing %q to %s: %w", j.n.Key, m.Subject, jetstream.Denied(s.js.Conn(), err))
	}
	return nil
}

// RecipientEvent is published on notify.events.recipient_dead when a
// recipient can no longer be reached on a channel, and on
// notify.events.recipient_redirected when it moved (a Telegram group that
// became a supergroup). Applications consume it to stop offering the channel
// to that customer, or to update the stored address.
type RecipientEvent struct {
	Channel     string    `json:"channel"`
	Recipient   string    `json:"recipient"`
	Reason      string    `json:"reason"`
	Code        int       `json:"code,omitempty"`
	Description string    `json:"description,omitempty"`
	RedirectTo  string    `json:"redirect_to,omitempty"`
	Key         string    `json:"key,omitempty"`
	At          time.Time `json:"at"`
}

// publishEvent stores an event in the NOTIFY stream (its subjects cover
// notify.events.>); the id makes a repeat after a crash harmless.
func (s *store) publishEvent(ctx context.Context, subject, id string, ev RecipientEvent) {
	b, err := json.Marshal(ev)
	if err == nil {
		_, err = s.js.Publish(ctx, subject, b, natsjs.WithMsgID(id))
	}
	if err != nil {
		s.log.Error("cannot publish event", "subject", subject, "recipient", ev.Recipient, "err", jetstream.Denied(s.js.Conn(), err))
	}
}
