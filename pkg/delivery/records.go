package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Delivery records are read in batches. Before a send the worker must know
// whether the notification's key was delivered already, and the answer must
// be at least as recent as the send's start (another worker that lost the
// pin, or the worker of another channel, may write a record at any time up
// to then). So the lookup stays where it was, right before the request, but
// the lookups of the attempts that start together are one request: a single
// direct get of the last message of every key's subject (the server's
// multi_last batch), instead of one KV get per message. While one batch is
// on its way the next attempts queue up, so the batches grow with the load.

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

// readLast reads the last value of each of keys (bucket keys, not
// idempotency keys) in one batched direct get, and returns the values of
// the keys that have one; a deleted or purged key has none. It fails unless
// the server said the answer was complete: a partial answer would make a
// delivered message look undelivered.
func (s *store) readLast(ctx context.Context, b bucketSubjects, keys []string) (map[string][]byte, error) {
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
	prefix := s.js.Options().APIPrefix
	if prefix == "" {
		prefix = natsjs.DefaultAPIPrefix
	}
	answers, done, err := s.direct.request(prefix+"DIRECT.GET."+b.stream, req, len(keys)+1)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", b.stream, err)
	}
	defer done()
	found := make(map[string][]byte)
	for {
		var m *nats.Msg
		select {
		case m = <-answers:
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
		switch m.Header.Get(kvOperationHeader) {
		case "DEL", "PURGE":
			delete(found, key)
		default:
			found[key] = m.Data
		}
	}
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
	waiting map[string]chan *nats.Msg
}

func newDirectReader(nc *nats.Conn) *directReader {
	return &directReader{nc: nc, waiting: map[string]chan *nats.Msg{}}
}

// request publishes data to subject and returns the channel its answers
// arrive on (at most max of them are buffered; more are dropped, and the
// asker, which never asks for more than it can take, times out) and the
// function that forgets the request.
func (d *directReader) request(subject string, data []byte, max int) (<-chan *nats.Msg, func(), error) {
	d.mu.Lock()
	if d.sub == nil {
		inbox := d.nc.NewInbox() + "."
		sub, err := d.nc.Subscribe(inbox+"*", d.deliver)
		if err != nil {
			d.mu.Unlock()
			return nil, nil, err
		}
		d.sub, d.inbox = sub, inbox
	}
	d.next++
	token := strconv.FormatUint(d.next, 36)
	ch := make(chan *nats.Msg, max)
	d.waiting[token] = ch
	reply := d.inbox + token
	d.mu.Unlock()
	done := func() {
		d.mu.Lock()
		delete(d.waiting, token)
		d.mu.Unlock()
	}
	if err := d.nc.PublishRequest(subject, reply, data); err != nil {
		done()
		return nil, nil, err
	}
	return ch, done, nil
}

// deliver hands an answer to the request it belongs to.
func (d *directReader) deliver(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	d.mu.Lock()
	ch := d.waiting[token]
	d.mu.Unlock()
	if ch == nil {
		return // a request given up on
	}
	select {
	case ch <- m:
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

// lookedUp is what notify_delivered says of one idempotency key.
type lookedUp struct {
	delivered bool
	// rec is the record; nil when its value does not parse.
	rec *DeliveryRecord
}

// readRecords looks the delivery records of keys up in one batched read.
func (s *store) readRecords(ctx context.Context, keys []string) (map[string]lookedUp, error) {
	bucketKeys := make([]string, len(keys))
	byBucketKey := make(map[string]string, len(keys))
	for i, k := range keys {
		bucketKeys[i] = RecordKey(k)
		byBucketKey[bucketKeys[i]] = k
	}
	values, err := s.readLast(ctx, s.deliveredSubjects, bucketKeys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]lookedUp, len(values))
	for bk, v := range values {
		key := byBucketKey[bk]
		var rec DeliveryRecord
		if json.Unmarshal(v, &rec) != nil || rec.Key != key {
			out[key] = lookedUp{delivered: true}
			continue
		}
		out[key] = lookedUp{delivered: true, rec: &rec}
	}
	return out, nil
}

// lookupRequest is one attempt's question to the batcher.
type lookupRequest struct {
	key    string
	answer chan lookupAnswer // buffered: the batcher never waits for the asker
}

type lookupAnswer struct {
	lookedUp
	err error
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
		found, err := l.s.readRecords(rctx, keys)
		cancel()
		for _, r := range batch {
			r.answer <- lookupAnswer{lookedUp: found[r.key], err: err}
		}
	}
}

// get looks key up with the next batch.
func (l *lookups) get(ctx context.Context, key string) (lookedUp, error) {
	r := lookupRequest{key: key, answer: make(chan lookupAnswer, 1)}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		return lookedUp{}, ctx.Err()
	}
	select {
	case a := <-r.answer:
		return a.lookedUp, a.err
	case <-ctx.Done():
		return lookedUp{}, ctx.Err()
	}
}
