package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Delivery records are read in batches and written without waiting for one
// another.
//
// Reading: before a send the worker must know whether the notification's
// key was delivered or cancelled already (its notify_delivered entry: a
// delivery record, a send claim or a cancel mark, with its revision), and
// the answer must be at least as recent as the send's start (another worker
// that lost the pin, or the worker of another channel, may write a record
// at any time up to then). So the lookup stays where it was, right before
// the request, but the lookups of the attempts that start together are one
// request: a single direct get of the last message of every key's subject
// (the server's multi_last batch), instead of one KV get per message. While
// one batch is on its way the next attempts queue up, so the batches grow
// with the load.
//
// Writing: a record is published asynchronously, so the records of the
// messages in flight travel to the server together and are stored one
// after another without a round trip between them; each message is acked
// (without waiting for the server's confirmation) only once its own
// record's PubAck arrived: the record of a delivery is stored, and fsynced
// on a server with sync_interval: always, before its ack, so a redelivery
// always finds it. A record replaces the attempt's send claim (cancel.go)
// and carries the claim's revision as the expected last sequence of its
// subject, in a batch too: the server stores it only over that claim. The
// claims themselves go the same way, each over the revision its lookup
// read, and learn their revisions from the batch's ack.

// maxLookupBatch bounds the keys of one batched lookup; the server answers
// at most 1024 subjects in one request.
const maxLookupBatch = 256

// lookupTimeout bounds one batched lookup.
const lookupTimeout = 5 * time.Second

// Headers and statuses of the server's direct get answers.
const (
	kvOperationHeader = "KV-Operation"
	statusHeader      = "Status"
	descriptionHeader = "Description"
)

// errIncompleteAnswer is returned when a batched read ended before the
// server said it was complete: nothing can be concluded from what came.
var errIncompleteAnswer = errors.New("incomplete answer to a batched read")

// bucketSubjects names the stream and subjects of a KV bucket.
type bucketSubjects struct {
	stream string // KV_<bucket>
	prefix string // $KV.<bucket>.
}

func subjectsOf(kv natsjs.KeyValue) bucketSubjects {
	return bucketSubjects{stream: "KV_" + kv.Bucket(), prefix: "$KV." + kv.Bucket() + "."}
}

// lastValue is the last value of a bucket key, with its revision.
type lastValue struct {
	data []byte
	rev  uint64
	// deleted: the key's last entry is a delete or purge marker (at rev),
	// so it has no value.
	deleted bool
}

// readLast reads the last entry of each of keys (bucket keys, not
// idempotency keys) in one batched direct get, and returns the entries
// (with their revisions) of the keys that have one; a deleted or purged key
// has its marker, with deleted set. It fails unless the server said the
// answer was complete: a partial answer would make a delivered message look
// undelivered.
//
// A read not answered at all within jetstream.HedgeEvery is sent again
// (directRequest), and the first copy to answer is taken.
func (s *store) readLast(ctx context.Context, b bucketSubjects, keys []string) (map[string]lastValue, error) {
	subjects := make([]string, len(keys))
	for i, k := range keys {
		subjects[i] = b.prefix + k
	}
	req, err := json.Marshal(struct {
		MultiLastFor []string `json:"multi_last"`
	}{subjects})
	if err != nil {
		return nil, err
	}
	r, err := s.direct.request(s.directGet(b.stream), req, len(keys)+1)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", b.stream, err)
	}
	defer r.done()
	hedge := time.NewTicker(jetstream.HedgeEvery)
	defer hedge.Stop()
	found := make(map[string]lastValue)
	for {
		var m *nats.Msg
		select {
		case m = <-r.answers:
		case <-hedge.C:
			// Unanswered for HedgeEvery: the replica asked may be gone.
			// A copy that cannot be sent leaves the others waiting.
			if sent, _ := r.send(); sent && s.readCopied != nil {
				s.readCopied()
			}
			continue
		case <-ctx.Done():
			return nil, jetstream.Denied(s.js.Conn(), fmt.Errorf("reading %s: %w (%w)", b.stream, errIncompleteAnswer, ctx.Err()))
		}
		if status := m.Header.Get(statusHeader); status != "" {
			desc := m.Header.Get(descriptionHeader)
			switch {
			case status == "204" && desc == "EOB":
				return found, nil
			case status == "404" && desc == "No Results" && len(found) == 0:
				return found, nil
			}
			return nil, fmt.Errorf("reading %s: the server answered %s %s", b.stream, status, desc)
		}
		key, ok := strings.CutPrefix(m.Header.Get(natsjs.SubjectHeader), b.prefix)
		if !ok {
			return nil, fmt.Errorf("reading %s: an answer for subject %q, which was not asked for", b.stream, m.Header.Get(natsjs.SubjectHeader))
		}
		rev, err := strconv.ParseUint(m.Header.Get(natsjs.SequenceHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("reading %s: an answer for %q without a valid sequence: %w", b.stream, key, err)
		}
		switch m.Header.Get(kvOperationHeader) {
		case "DEL", "PURGE":
			found[key] = lastValue{rev: rev, deleted: true}
		default:
			found[key] = lastValue{data: m.Data, rev: rev}
		}
	}
}

// directGet is the subject of the direct gets of a stream.
func (s *store) directGet(stream string) string {
	prefix := s.js.Options().APIPrefix
	if prefix == "" {
		prefix = natsjs.DefaultAPIPrefix
	}
	return prefix + "DIRECT.GET." + stream
}

// nextMsg reads the first message of stream on subject at sequence from or
// after from the stream's leader, nil when there is none
// (jetstream.NextMsg: unlike a direct get, never a replica that is
// behind).
func (s *store) nextMsg(ctx context.Context, stream, subject string, from uint64) (*jetstream.StoredMsg, error) {
	return jetstream.NextMsg(ctx, s.js.Conn(), s.js.Options().APIPrefix, stream, subject, from)
}

// lastMsg reads the last message of stream on subject from the stream's
// leader, nil when there is none (jetstream.LastMsg).
func (s *store) lastMsg(ctx context.Context, stream, subject string) (*jetstream.StoredMsg, error) {
	return jetstream.LastMsg(ctx, s.js.Conn(), s.js.Options().APIPrefix, stream, subject)
}

// directReader sends requests that are answered with several messages (the
// server's batched direct gets) over one long-lived subscription, the way
// nats.go's request/reply shares one for single answers: a subscription of
// its own for every request would cost a subscribe and an unsubscribe, and
// nats.go gives each a channel of 65536 slots (512 KiB) to allocate and
// collect.
type directReader struct {
	nc *nats.Conn

	mu      sync.Mutex
	sub     *nats.Subscription
	inbox   string // <inbox>., the subscription covers <inbox>.*
	next    uint64
	waiting map[string]*directRequest // by the reply token of each copy
}

func newDirectReader(nc *nats.Conn) *directReader {
	return &directReader{nc: nc, waiting: map[string]*directRequest{}}
}

// directRequest is one batched read: the copies of it sent so far, and the
// answers of the copy that answered first. A request sent to a replica
// that dies or is cut off before it answers is never answered (the long
// cluster chaos run: 139 batched reads waited out their 5 s bound); a copy
// sent again is answered by another. The answers of two copies must not
// mix, so once one copy's first answer arrives, the others' are dropped.
type directRequest struct {
	d       *directReader
	subject string
	data    []byte
	answers chan *nats.Msg
	tokens  []string // of the copies sent; guarded by d.mu
	taken   string   // the copy whose answers are delivered, "" until one answers; guarded by d.mu
}

// request publishes data to subject and returns the request, whose
// answers arrive on its answers channel (at most max of them are
// buffered; more are dropped, and the asker, which never asks for more
// than it can take, times out). The asker calls done when it is finished.
func (d *directReader) request(subject string, data []byte, max int) (*directRequest, error) {
	r := &directRequest{d: d, subject: subject, data: data, answers: make(chan *nats.Msg, max)}
	if _, err := r.send(); err != nil {
		r.done()
		return nil, err
	}
	return r, nil
}

// send publishes a copy of the request, with a reply token of its own,
// unless a copy has answered, and reports whether it sent one. The check
// and the token's registration share the lock deliver takes an answer
// under, so no copy is registered after one was taken.
func (r *directRequest) send() (bool, error) {
	d := r.d
	d.mu.Lock()
	if r.taken != "" {
		d.mu.Unlock()
		return false, nil
	}
	if d.sub == nil {
		inbox := d.nc.NewInbox() + "."
		sub, err := d.nc.Subscribe(inbox+"*", d.deliver)
		if err != nil {
			d.mu.Unlock()
			return false, err
		}
		d.sub, d.inbox = sub, inbox
	}
	d.next++
	token := strconv.FormatUint(d.next, 36)
	d.waiting[token] = r
	r.tokens = append(r.tokens, token)
	reply := d.inbox + token
	d.mu.Unlock()
	if err := d.nc.PublishRequest(r.subject, reply, r.data); err != nil {
		return false, err
	}
	return true, nil
}

// done forgets the request: answers that still come are dropped.
func (r *directRequest) done() {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	for _, t := range r.tokens {
		delete(r.d.waiting, t)
	}
}

// deliver hands an answer to the request it belongs to. The first answer
// of a request decides which copy's answers it takes.
func (d *directReader) deliver(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	d.mu.Lock()
	r := d.waiting[token]
	if r != nil && r.taken == "" {
		r.taken = token
		for _, t := range r.tokens {
			if t != token {
				delete(d.waiting, t)
			}
		}
	}
	d.mu.Unlock()
	if r == nil {
		return // a request given up on, or a copy not taken
	}
	select {
	case r.answers <- m:
	default:
	}
}

// close ends the subscription.
func (d *directReader) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sub != nil {
		_ = d.sub.Unsubscribe()
		d.sub = nil
	}
}

// readRecords reads the notify_delivered entries of keys in one batched
// read: a key without an entry has none in the map. An entry is a delivery
// record, a send claim or a cancel mark (cancel.go), with its revision.
func (s *store) readRecords(ctx context.Context, keys []string) (map[string]*entry, error) {
	out, _, err := s.readRecordsAt(ctx, keys)
	return out, err
}

// readRecordsAt is readRecords that also returns the revision of every
// key's last message, the entries' and the delete markers' alike (a key
// without any message has none): a send claim is written only over that
// revision (claimMsg).
func (s *store) readRecordsAt(ctx context.Context, keys []string) (map[string]*entry, map[string]uint64, error) {
	bucketKeys := make([]string, len(keys))
	byBucketKey := make(map[string]string, len(keys))
	for i, k := range keys {
		bucketKeys[i] = RecordKey(k)
		byBucketKey[bucketKeys[i]] = k
	}
	values, err := s.readLast(ctx, s.deliveredSubjects, bucketKeys)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]*entry, len(values))
	last := make(map[string]uint64, len(values))
	for bk, v := range values {
		key := byBucketKey[bk]
		last[key] = v.rev
		if !v.deleted {
			out[key] = parseEntry(key, v.data, v.rev)
		}
	}
	return out, last, nil
}

// lookupRequest is one attempt's question to the batcher.
type lookupRequest struct {
	key    string
	answer chan lookupAnswer // buffered: the batcher never waits for the asker
}

type lookupAnswer struct {
	e *entry // nil: no entry
	// last is the revision of the key's last message (the entry's, or a
	// delete marker's); 0 when the key has none.
	last uint64
	err  error
}

// lookups batches the record lookups of attempts that start together
// (see the top of this file). Its run loop is the only reader.
type lookups struct {
	s    *store
	reqs chan lookupRequest
	// observe receives the size of every batch read (a metric).
	observe func(n int)
}

func newLookups(s *store, observe func(int)) *lookups {
	return &lookups{s: s, reqs: make(chan lookupRequest, maxLookupBatch), observe: observe}
}

// run answers lookups until ctx ends: it takes the first waiting request,
// and every other one queued behind it, and reads their keys at once.
func (l *lookups) run(ctx context.Context) {
	batch := make([]lookupRequest, 0, maxLookupBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case r := <-l.reqs:
			batch = append(batch, r)
		}
	more:
		for len(batch) < maxLookupBatch {
			select {
			case r := <-l.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		keys := make([]string, 0, len(batch))
		seen := make(map[string]bool, len(batch))
		for _, r := range batch {
			if !seen[r.key] {
				seen[r.key] = true
				keys = append(keys, r.key)
			}
		}
		l.observe(len(keys))
		rctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		found, last, err := l.s.readRecordsAt(rctx, keys)
		cancel()
		for _, r := range batch {
			r.answer <- lookupAnswer{e: found[r.key], last: last[r.key], err: err}
		}
	}
}

// get looks key's entry up with the next batch (nil when there is none),
// with the revision of the key's last message.
func (l *lookups) get(ctx context.Context, key string) (*entry, uint64, error) {
	r := lookupRequest{key: key, answer: make(chan lookupAnswer, 1)}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	select {
	case a := <-r.answer:
		return a.e, a.last, a.err
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

// recordMsg is the KV write of a delivery record, as a message that can be
// published asynchronously: over this attempt's send claim, at its revision
// (claim > 0: a KV Update, refused when the entry changed since), or a put.
func (s *store) recordMsg(r DeliveryRecord, claim uint64) (*nats.Msg, error) {
	b, err := r.marshal()
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: prefixedRecordKey(s.deliveredSubjects.prefix, r.Key), Data: b}
	if claim > 0 {
		m.Header = nats.Header{}
		m.Header.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(claim, 10))
	}
	return m, nil
}

// maxRecordBatch bounds the writes of one atomic batch (the server takes
// up to 1000).
const maxRecordBatch = 256

// minAtomicBatch is the fewest writes made as an atomic batch. A batch
// costs the server a staging store of its own (a directory, files and four
// fsyncs): it pays only when many writes wait; fewer are published one by
// one, all at once.
const minAtomicBatch = 16

// recorder makes the worker's conditional writes to notify_delivered: the
// delivery records and the send claims (cancel.go). With batches
// (notify_delivered takes atomic batches, its stream has allow_atomic, and
// Config.SingleRecordWrites is off), one write is on its way at a time,
// and the writes of the attempts that reach that point meanwhile gather
// into the next one: many are written as one atomic batch, which a server
// with sync_interval: always stores with one fsync instead of one per
// write (the worker's largest cost there), so batches grow exactly when
// the server is slow to store them. Without, each write is published at
// once, asynchronously. Either way an attempt waits for its own write
// only; a write that fails is reported to each of its attempts, which
// write again on their own (store.record, store.claim).
type recorder struct {
	s   *store
	log *slog.Logger
	// batches: writes go through run, in batches.
	batches atomic.Bool
	single  bool // Config.SingleRecordWrites
	reqs    chan recordRequest
	// observe receives the size of every atomic batch (a metric).
	observe func(n int)
	// stalled counts the batches not answered within recordStall (a
	// metric).
	stalled func()
}

// recordRequest is one attempt's write, and where its result goes.
type recordRequest struct {
	msg  *nats.Msg
	done chan written // buffered: the recorder never waits for the attempt
}

// written is the result of one write: the sequence the server stored it
// at (0 when the server did not say), or why it was not stored.
type written struct {
	seq uint64
	err error
}

func newRecorder(s *store, single bool, log *slog.Logger, observe func(int), stalled func()) *recorder {
	return &recorder{s: s, single: single, log: log, reqs: make(chan recordRequest, maxRecordBatch), observe: observe, stalled: stalled}
}

// start reads whether the bucket takes atomic batches, retrying until it
// can (see learnAtomic); until then records are written one by one.
func (r *recorder) start(ctx context.Context) {
	if r.single {
		return
	}
	learnAtomic(ctx, r.s.js, r.s.deliveredSubjects.stream, &r.batches, r.log, "the delivery records' stream", "writing records one by one")
}

// write stores the proof of delivery over the attempt's send claim (at its
// revision; 0 writes a plain put) and returns once the server has it (or it
// failed). The key is remembered in memory first, so it counts even when the
// write fails. A record whose claim is no longer the key's last entry is
// refused, and fails the atomic batch it is in: each of that batch's
// attempts then writes on its own (store.record), which knows what to do
// with what it finds.
func (r *recorder) write(ctx context.Context, rec DeliveryRecord, claim uint64) error {
	r.s.remember(rec.Key)
	m, err := r.s.recordMsg(rec, claim)
	if err != nil {
		return err
	}
	_, err = r.put(ctx, m)
	return err
}

// put publishes m, with the next batch when writes are batched, and
// returns the sequence the server stored it at once it has.
func (r *recorder) put(ctx context.Context, m *nats.Msg) (uint64, error) {
	if !r.batches.Load() {
		ctx, cancel := context.WithTimeout(ctx, recordTimeout)
		defer cancel()
		f, err := r.s.js.PublishMsgAsync(m)
		if err != nil {
			return 0, err
		}
		seq, err := stored(ctx, f)
		return seq, jetstream.Denied(r.s.js.Conn(), err)
	}
	// A timer, not a context with a timeout: this is the path of every
	// message's claim and record, and the context costs twice the time
	// (≈ 0.8 µs against 0.4) and two allocations more.
	timeout := time.NewTimer(recordTimeout)
	defer timeout.Stop()
	req := recordRequest{msg: m, done: make(chan written, 1)}
	select {
	case r.reqs <- req:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-timeout.C:
		return 0, context.DeadlineExceeded
	}
	select {
	case w := <-req.done:
		return w.seq, w.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-timeout.C:
		return 0, context.DeadlineExceeded
	}
}

// recordStall is how long the recorder waits for a batch of writes to be
// answered before it writes the next batch beside it. A batch is normally
// answered within milliseconds (tens with fsync on every write on a busy
// machine), and the writes that come meanwhile wait for it, which is what
// makes batches grow with the load. But a write that reaches the former
// leader of notify_delivered while its leadership moves (a step-down, a
// publisher gathering leaders, a node leaving) is dropped without an
// answer, and waiting recordTimeout for it held every attempt's claim and
// record behind it, so every send, for 5 s (benchmark row 7c, 2026-12-06).
const recordStall = 500 * time.Millisecond

// run makes the writes that wait, until ctx ends: every write queued as
// one batch, one batch at a time while each is answered within
// recordStall. A batch not answered by then is left to end on its own (it
// is answered, refused or given up at recordTimeout, and tells its
// attempts): the next batch goes beside it, so a lost answer holds up only
// the writes it was for. run returns once every batch it began has ended.
func (r *recorder) run(ctx context.Context) {
	var writing sync.WaitGroup
	defer writing.Wait()
	stall := time.NewTimer(recordStall)
	stall.Stop()
	for {
		var batch []recordRequest
		select {
		case <-ctx.Done():
			return
		case req := <-r.reqs:
			batch = append(batch, req)
		}
	more:
		for len(batch) < maxRecordBatch {
			select {
			case req := <-r.reqs:
				batch = append(batch, req)
			default:
				break more
			}
		}
		done := make(chan struct{})
		writing.Go(func() {
			defer close(done)
			r.writeAll(ctx, batch)
		})
		stall.Reset(recordStall)
		select {
		case <-done:
		case <-stall.C:
			r.stalled()
			r.log.Debug("a batch of record writes is not answered yet; writing the next beside it",
				"writes", len(batch), "after", recordStall)
		}
		stall.Stop()
	}
}

// writeAll makes a batch of writes, atomically when it is large enough,
// and tells each attempt.
func (r *recorder) writeAll(ctx context.Context, batch []recordRequest) {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	if len(batch) < minAtomicBatch || !r.batches.Load() {
		futures := make([]natsjs.PubAckFuture, len(batch))
		errs := make([]error, len(batch))
		for i, req := range batch {
			futures[i], errs[i] = r.s.js.PublishMsgAsync(req.msg)
		}
		for i, req := range batch {
			var seq uint64
			if errs[i] == nil {
				seq, errs[i] = stored(ctx, futures[i])
			}
			req.done <- written{seq: seq, err: errs[i]}
		}
		return
	}
	r.observe(len(batch))
	ack, err := r.commit(ctx, batch)
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishNotEnabled {
		if r.batches.CompareAndSwap(true, false) {
			r.log.Warn("the delivery records' stream no longer takes atomic batches; writing records one by one", "stream", r.s.deliveredSubjects.stream)
		}
	}
	for i, req := range batch {
		req.done <- written{seq: batchSeq(ack, len(batch), i), err: err}
	}
}

// batchSeq is the sequence the i-th of n messages of a committed atomic
// batch was stored at. The server stores a batch's messages one after
// another, the last at the sequence of the commit's ack; 0 when the ack
// does not say so (a failed commit, or one that counts another size).
func batchSeq(ack *jetstreamext.BatchAck, n, i int) uint64 {
	if ack == nil || ack.BatchSize != uint64(n) || ack.Sequence < uint64(n) {
		return 0
	}
	return ack.Sequence - uint64(n-1-i)
}

// commit publishes the batch atomically: the server stores every write or
// none, and answers once they are stored (and fsynced, on a server with
// sync_interval: always).
func (r *recorder) commit(ctx context.Context, batch []recordRequest) (*jetstreamext.BatchAck, error) {
	msgs := make([]*nats.Msg, len(batch))
	for i, req := range batch {
		msgs[i] = req.msg
	}
	ack, err := commitAtomic(ctx, r.s.js, msgs)
	if err != nil {
		return nil, fmt.Errorf("writing a batch of %d to %s: %w", len(batch), r.s.names.BucketDelivered, err)
	}
	return ack, nil
}

// learnAtomic reads whether stream takes atomic batches into batches. When
// JetStream does not answer (an election, a partition) it tries again
// every second, then less often up to every 10 seconds, until it can or
// ctx ends: meanwhile batches stays false and the writes go one by one,
// which is slower (one fsync each on a server that syncs every write) but
// as safe. It warns once, saying what happens meanwhile (meanwhile).
func learnAtomic(ctx context.Context, js natsjs.JetStream, stream string, batches *atomic.Bool, log *slog.Logger, what, meanwhile string) {
	const firstRetry, maxRetry = time.Second, 10 * time.Second
	retry := firstRetry
	for failures := 0; ; failures++ {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		s, err := js.Stream(lctx, stream)
		cancel()
		if err == nil {
			batches.Store(s.CachedInfo().Config.AllowAtomicPublish)
			if failures > 0 {
				log.Info("read the configuration of "+what, "stream", stream, "atomic_batches", batches.Load(), "failures", failures)
			}
			return
		}
		if failures == 0 {
			log.Warn("cannot read the configuration of "+what+"; "+meanwhile+" until it can be read", "stream", stream, "err", err, "retry_in", retry)
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(retry*2, maxRetry)
	}
}

// commitAtomic publishes msgs as one atomic batch and returns the server's
// ack of the whole. The batch adds its headers to each message, and they
// are taken off again before it returns (jetstream.Unbatch): a message can then go
// in a write of its own after a failure as it was. (A copy of each, as
// before, was 7% of the bytes the worker allocated at its ceiling.)
func commitAtomic(ctx context.Context, js natsjs.JetStream, msgs []*nats.Msg) (*jetstreamext.BatchAck, error) {
	defer jetstream.Unbatch(msgs...)
	bp, err := jetstreamext.NewBatchPublisher(js, jetstreamext.BatchFlowControl{})
	if err != nil {
		return nil, err
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := bp.AddMsg(m); err != nil {
			_ = bp.Discard()
			return nil, err
		}
	}
	return bp.CommitMsg(ctx, msgs[len(msgs)-1])
}

// stored waits for the PubAck of an asynchronous write and returns the
// sequence it was stored at.
func stored(ctx context.Context, f natsjs.PubAckFuture) (uint64, error) {
	select {
	case ack := <-f.Ok():
		return ack.Sequence, nil
	case err := <-f.Err():
		return 0, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
