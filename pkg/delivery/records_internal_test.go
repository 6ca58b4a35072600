package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// recordStore returns a store on a fresh server, its buckets provisioned as
// the daemons provision them (notify_delivered takes atomic batches).
func recordStore(t *testing.T) *store {
	t.Helper()
	nc, js, res := provisionedServer(t)
	s := &store{
		js: js, channel: "telegram", delivered: res.Delivered, attempts: res.Attempts, log: slog.New(slog.DiscardHandler), now: time.Now,
		deliveredSubjects: subjectsOf(res.Delivered), attemptsSubjects: subjectsOf(res.Attempts), direct: newDirectReader(nc),
		keep: 16,
	}
	t.Cleanup(s.direct.close)
	return s
}

// provisionedServer starts an embedded server with the streams, the
// telegram consumer and its buckets, and connects to it.
func provisionedServer(t *testing.T) (*nats.Conn, natsjs.JetStream, *jetstream.WorkerResources) {
	t.Helper()
	nc, js := natstest.Start(t).Connect(t)
	ctx := context.Background()
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	res, err := jetstream.ProvisionWorker(ctx, js, jetstream.WorkerSettings{})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, res
}

// putRecord writes a delivery record as another worker would: this
// process does not remember it.
func putRecord(t *testing.T, s *store, r DeliveryRecord) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.delivered.Put(context.Background(), RecordKey(r.Key), b); err != nil {
		t.Fatal(err)
	}
}

// One batched read answers for every key: a record, a value that is not a
// record (delivered all the same), a deleted key and a key never written
// (not delivered).
func TestReadRecordsAnswersEveryKeyOfTheBatch(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	rec := DeliveryRecord{Key: "order:1", Channel: "telegram", Recipient: "100", ProviderID: "7", DeliveredAt: time.Now().UTC(), StreamSeq: 3}
	putRecord(t, s, rec)
	if _, err := s.delivered.Put(ctx, RecordKey("order:2"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.delivered.Put(ctx, RecordKey("order:3"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := s.delivered.Delete(ctx, RecordKey("order:3")); err != nil {
		t.Fatal(err)
	}
	got, err := s.readRecords(ctx, []string{"order:1", "order:2", "order:3", "order:4"})
	if err != nil {
		t.Fatal(err)
	}
	if e := got["order:1"]; e == nil || e.corrupt || e.state() != StateDelivered || e.rec.ProviderID != "7" || e.rec.StreamSeq != 3 {
		t.Errorf("order:1: got %+v, want delivered with its record", e)
	}
	if e := got["order:2"]; e == nil || !e.corrupt || e.state() != StateDelivered {
		t.Errorf("order:2: got %+v, want delivered without a readable record", e)
	}
	for _, k := range []string{"order:3", "order:4"} {
		if e := got[k]; e != nil {
			t.Errorf("%s: got %+v, want no entry", k, e)
		}
	}
	_, last, err := s.readRecordsAt(ctx, []string{"order:1", "order:3", "order:4"})
	if err != nil {
		t.Fatal(err)
	}
	marker, err := s.delivered.Get(ctx, RecordKey("order:1"))
	if err != nil {
		t.Fatal(err)
	}
	if last["order:1"] != marker.Revision() || last["order:3"] <= last["order:1"] || last["order:4"] != 0 {
		t.Errorf("last revisions %v: want order:1 at %d, order:3 at its delete marker (later), order:4 at none", last, marker.Revision())
	}
	none, err := s.readRecords(ctx, []string{"order:5", "order:6"})
	if err != nil || len(none) != 0 {
		t.Fatalf("keys never written: got %v, %v, want none found", none, err)
	}
}

// Concurrent lookups are answered together, and each gets its own answer.
func TestLookupsBatchConcurrentAttempts(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	for i := range 50 {
		if i%2 == 0 {
			putRecord(t, s, DeliveryRecord{Key: fmt.Sprint("k", i), Channel: "telegram"})
		}
	}
	var mu sync.Mutex
	var batches []int
	l := newLookups(s, func(n int) { mu.Lock(); batches = append(batches, n); mu.Unlock() })
	s.lookups = l
	// The requests queue up before the batcher runs, so they are read in
	// one batch.
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			found, err := s.isDelivered(ctx, fmt.Sprint("k", i))
			switch {
			case err != nil:
				errs <- err
			case found != (i%2 == 0):
				errs <- fmt.Errorf("k%d: got delivered %v, want %v", i, found, i%2 == 0)
			}
		})
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(l.reqs) == 50 }, "50 lookups queued")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.run(runCtx) }()
	wg.Wait()
	stop()
	<-done
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(batches) != 1 || batches[0] != 50 {
		t.Fatalf("batches of %v keys, want one of 50", batches)
	}
}

// Records that wait while a write is on its way are written as one atomic
// batch; every attempt learns that its own record is stored, and it is.
func TestRecorderWritesWaitingRecordsAsOneBatch(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	var batches []int
	r := newRecorder(s, false, slog.New(slog.DiscardHandler), func(n int) { batches = append(batches, n) }, func() {})
	r.start(ctx)
	if !r.batches.Load() {
		t.Fatal("notify_delivered as provisioned does not take atomic batches")
	}
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := r.write(ctx, DeliveryRecord{Key: fmt.Sprint("b", i), Channel: "telegram"}, 0); err != nil {
				errs <- err
			}
		})
	}
	runQueued(t, r, n, &wg)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(batches) != 1 || batches[0] != n {
		t.Fatalf("atomic batches of %v records, want one of %d", batches, n)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("b", i)
	}
	found, err := s.readRecords(ctx, keys)
	if err != nil || len(found) != n {
		t.Fatalf("%d of %d records stored (%v)", len(found), n, err)
	}
}

// refuseBatches turns atomic batches off on the stream of s's
// notify_delivered, as on a bucket provisioned before they were declared.
func refuseBatches(t *testing.T, s *store) {
	t.Helper()
	ctx := context.Background()
	stream, err := s.js.Stream(ctx, s.deliveredSubjects.stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// A bucket that takes no atomic batches (provisioned before they were
// declared) fails the batch; the recorder writes every record on its own
// from then on.
func TestRecorderWritesOneByOneWhenTheBucketTakesNoBatches(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	refuseBatches(t, s)
	r := newRecorder(s, false, slog.New(slog.DiscardHandler), func(int) {}, func() {})
	r.batches.Store(true) // as if read before the change
	batch := make([]recordRequest, minAtomicBatch)
	for i := range batch {
		m, err := s.recordMsg(DeliveryRecord{Key: fmt.Sprint("c", i)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = recordRequest{msg: m, done: make(chan written, 1)}
	}
	r.writeAll(ctx, batch)
	var apiErr *natsjs.APIError
	if err := (<-batch[0].done).err; !errors.As(err, &apiErr) {
		t.Fatalf("the batch's write: got %v, want the server's refusal", err)
	}
	if r.batches.Load() {
		t.Fatal("the recorder still writes batches")
	}
	if err := r.write(ctx, DeliveryRecord{Key: "c0"}, 0); err != nil {
		t.Fatalf("a record on its own: %v", err)
	}
	if found, err := s.readRecords(ctx, []string{"c0"}); err != nil || found["c0"] == nil || found["c0"].state() != StateDelivered {
		t.Fatalf("the record written on its own is not stored (%v)", err)
	}
}

// A batched read returns every kind of entry with its revision: a send
// claim, a cancel mark and a delivery record. Of these only the claim
// leaves the key unsettled: the send it announces may have failed.
func TestReadRecordsTellsClaimsAndCancelMarks(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	c, err := s.claim(ctx, "sending", "100", 4)
	if err != nil || c.rev == 0 {
		t.Fatalf("claim = %+v, %v; want a claim", c, err)
	}
	if res, err := Cancel(ctx, s.js, jetstream.DefaultNames(), "cancelled", "test", time.Now()); err != nil || res.Outcome != Cancelled {
		t.Fatalf("Cancel = %+v, %v; want cancelled", res, err)
	}
	putRecord(t, s, DeliveryRecord{Key: "delivered", Channel: "telegram", Recipient: "100"})
	got, err := s.readRecords(ctx, []string{"sending", "cancelled", "delivered"})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"sending": StateSending, "cancelled": StateCancelled, "delivered": StateDelivered} {
		e := got[key]
		if e == nil || e.corrupt || e.state() != want {
			t.Errorf("%s: got %+v, want state %q", key, e, want)
			continue
		}
		single, err := readEntry(ctx, s.delivered, key)
		if err != nil || single == nil || single.rev != e.rev {
			t.Errorf("%s: revision %d in the batch, want %v (%v)", key, e.rev, single, err)
		}
	}
	if got["sending"] != nil && got["sending"].rev != c.rev {
		t.Errorf("claim's revision: got %d, want %d", got["sending"].rev, c.rev)
	}
	settled, err := s.settledKeys(ctx, []string{"sending", "cancelled", "delivered"})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"sending": false, "cancelled": true, "delivered": true} {
		if settled[key] != want {
			t.Errorf("settled[%s]: got %v, want %v", key, settled[key], want)
		}
	}
}

// claimKeys claims n keys named prefix0... and returns their revisions.
func claimKeys(t *testing.T, s *store, prefix string, n int) []uint64 {
	t.Helper()
	revs := make([]uint64, n)
	for i := range revs {
		c, err := s.claim(context.Background(), fmt.Sprint(prefix, i), "100", uint64(i+1))
		if err != nil || c.rev == 0 {
			t.Fatalf("claim = %+v, %v; want a claim", c, err)
		}
		revs[i] = c.rev
	}
	return revs
}

// Records over send claims are written in one atomic batch, each at its
// claim's revision, and replace the claims.
func TestRecorderWritesRecordsOverClaimsInOneBatch(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	var batches []int
	r := newRecorder(s, false, slog.New(slog.DiscardHandler), func(n int) { batches = append(batches, n) }, func() {})
	r.start(ctx)
	const n = 2 * minAtomicBatch
	revs := claimKeys(t, s, "d", n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := r.write(ctx, DeliveryRecord{Key: fmt.Sprint("d", i), Channel: "telegram"}, revs[i]); err != nil {
				errs <- err
			}
		})
	}
	runQueued(t, r, n, &wg)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(batches) != 1 || batches[0] != n {
		t.Fatalf("atomic batches of %v records, want one of %d", batches, n)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("d", i)
	}
	found, err := s.readRecords(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if e := found[k]; e == nil || e.state() != StateDelivered {
			t.Errorf("%s: got %+v, want a delivery record", k, e)
		}
	}
}

// A record whose claim was taken over (another worker's attempt on the
// same key) is refused, and with it its whole atomic batch: nothing of the
// batch is stored, and each attempt then writes its record on its own.
func TestRecorderBatchFailsOverAStaleClaim(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	r := newRecorder(s, false, slog.New(slog.DiscardHandler), func(int) {}, func() {})
	r.start(ctx)
	if !r.batches.Load() {
		t.Fatal("notify_delivered as provisioned does not take atomic batches")
	}
	revs := claimKeys(t, s, "s", minAtomicBatch)
	// Taken over: the first claim's revision is stale.
	taken, err := s.claim(ctx, "s0", "100", 1)
	if err != nil || taken.rev <= revs[0] {
		t.Fatalf("claim taken over = %+v, %v; want a later revision", taken, err)
	}
	batch := make([]recordRequest, minAtomicBatch)
	for i := range batch {
		m, err := s.recordMsg(DeliveryRecord{Key: fmt.Sprint("s", i), Channel: "telegram"}, revs[i])
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = recordRequest{msg: m, done: make(chan written, 1)}
	}
	r.writeAll(ctx, batch)
	for i, req := range batch {
		if err := (<-req.done).err; !wrongRevision(err) {
			t.Fatalf("record %d of the batch: got %v, want the wrong revision refused", i, err)
		}
	}
	if !r.batches.Load() {
		t.Fatal("a refused record stopped the batches")
	}
	keys := make([]string, minAtomicBatch)
	for i := range keys {
		keys[i] = fmt.Sprint("s", i)
	}
	found, err := s.readRecords(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if e := found[k]; e == nil || e.state() != StateSending {
			t.Fatalf("%s: got %+v, want its claim still (nothing of the batch stored)", k, e)
		}
	}
	for i, k := range keys {
		if err := s.record(ctx, DeliveryRecord{Key: k, Channel: "telegram"}, revs[i]); err != nil {
			t.Fatalf("%s on its own: %v", k, err)
		}
	}
	found, err = s.readRecords(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if e := found[k]; e == nil || e.state() != StateDelivered {
			t.Errorf("%s: got %+v, want a delivery record", k, e)
		}
	}
}

// claimAll makes the claims of keys through r concurrently, each over the
// last revision in last (nil: read now, as the lookup before each claim
// does), once all are queued for one batch.
func claimAll(t *testing.T, r *recorder, keys []string, last map[string]uint64) []claimResult {
	t.Helper()
	ctx := context.Background()
	if last == nil {
		var err error
		if _, last, err = r.s.readRecordsAt(ctx, keys); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]claimResult, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { out[i], errs[i] = r.claim(ctx, k, "100", uint64(i+1), last[k]) })
	}
	runQueued(t, r, len(keys), &wg)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("claim of %s: %v", keys[i], err)
		}
	}
	return out
}

// Send claims that wait together are written as one atomic batch, each over
// what its lookup found: no entry, the claim of an attempt that died
// mid-send, or the delete marker of a released claim. Each attempt learns
// its claim's revision, which the record over it needs.
func TestRecorderWritesClaimsInOneBatch(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	var batches []int
	r := newRecorder(s, false, slog.New(slog.DiscardHandler), func(n int) { batches = append(batches, n) }, func() {})
	r.start(ctx)
	const n = 3 * minAtomicBatch
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("c", i)
		switch i % 3 {
		case 1: // an attempt died mid-send
			claimKeys(t, s, keys[i], 1)
			keys[i] += "0"
		case 2: // an attempt failed and released its claim
			c := claimKeys(t, s, keys[i], 1)
			keys[i] += "0"
			s.release(ctx, keys[i], c[0])
		}
	}
	claims := claimAll(t, r, keys, nil)
	if len(batches) != 1 || batches[0] != n {
		t.Fatalf("atomic batches of %v, want one of %d claims", batches, n)
	}
	found, err := s.readRecords(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		e := found[k]
		switch {
		case e == nil || e.state() != StateSending || e.rec.StreamSeq != uint64(i+1):
			t.Errorf("%s: got %+v, want this attempt's claim", k, e)
		case claims[i].rev != e.rev || claims[i].found != nil:
			t.Errorf("%s: the claim says revision %d (found %v), the bucket %d", k, claims[i].rev, claims[i].found, e.rev)
		}
	}
	// The revisions are the ones the records over the claims are written at.
	for i, k := range keys {
		b, err := json.Marshal(DeliveryRecord{Key: k, Channel: "telegram"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.delivered.Update(ctx, RecordKey(k), b, claims[i].rev); err != nil {
			t.Fatalf("record over the claim of %s: %v", k, err)
		}
	}
}

// A cancel mark written between an attempt's lookup and its claim makes the
// server refuse the batch the claim is in; every claim of the batch is then
// made on its own: the cancelled key's finds the mark, the others are
// written.
func TestRecorderClaimBatchRefusedOverACancel(t *testing.T) {
	js, s, _ := cancelEnv(t)
	ctx := context.Background()
	keys := make([]string, minAtomicBatch)
	for i := range keys {
		keys[i] = fmt.Sprint("x", i)
	}
	_, last, err := s.readRecordsAt(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := Cancel(ctx, js, jetstream.DefaultNames(), "x3", "test", time.Now()); err != nil || res.Outcome != Cancelled {
		t.Fatalf("Cancel = %+v, %v", res, err)
	}
	claims, found := claimInRefusedBatch(t, s, keys, last)
	for i, k := range keys {
		c, e := claims[i], found[k]
		switch {
		case k == "x3":
			if c.rev != 0 || c.found == nil || c.found.state() != StateCancelled || e == nil || e.state() != StateCancelled {
				t.Errorf("x3: claim %+v over %+v; want the cancel mark found and kept", c, e)
			}
		case e == nil || e.state() != StateSending || c.rev != e.rev:
			t.Errorf("%s: claim %+v, bucket %+v; want this attempt's claim", k, c, e)
		}
	}
}

// A lookup answered by a lagging replica (direct gets may be served by any
// replica of notify_delivered) can miss what another worker wrote: here the
// lookups said "no entry" and "the claim of an attempt still sending" while
// the bucket already held delivery records. The claims carry what the
// lookups read as the expected last revision, and only the stream's leader
// stores them, so the server refuses them; made again on their own they find
// the records, and no attempt gets a claim to send with. A stale read costs
// a round trip, never a second send.
func TestAStaleLookupCannotClaim(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	keys := make([]string, 2*minAtomicBatch)
	stale := map[string]uint64{}
	for i := range keys {
		keys[i] = fmt.Sprint("s", i)
		if i%2 == 1 {
			// Another worker claimed it; the stale lookup read that claim.
			c, err := s.claim(ctx, keys[i], "100", uint64(i+1))
			if err != nil || c.rev == 0 {
				t.Fatalf("claim of %s = %+v, %v", keys[i], c, err)
			}
			stale[keys[i]] = c.rev
		} // else: the stale lookup found no entry (0).
		putRecord(t, s, DeliveryRecord{Key: keys[i], Channel: "max", Recipient: "u1", DeliveredAt: time.Now().UTC(), StreamSeq: uint64(i + 1)})
	}
	claims, found := claimInRefusedBatch(t, s, keys, stale)
	for i, k := range keys {
		c, e := claims[i], found[k]
		switch {
		case c.rev != 0:
			t.Errorf("%s: claimed at revision %d over a stale lookup (%d); want it refused", k, c.rev, stale[k])
		case c.found == nil || c.found.state() != StateDelivered || c.found.rec.Channel != "max":
			t.Errorf("%s: the claim found %+v; want the other worker's delivery record", k, c.found)
		case e == nil || e.state() != StateDelivered || e.rec.Channel != "max":
			t.Errorf("%s: the bucket holds %+v; want the delivery record kept", k, e)
		}
	}
}

// claimInRefusedBatch makes the claims of keys over the revisions last,
// together, with a recorder of its own, checks that they went as one atomic
// batch (which the server refused), and returns the claims and what the
// bucket holds afterwards.
func claimInRefusedBatch(t *testing.T, s *store, keys []string, last map[string]uint64) ([]claimResult, map[string]*entry) {
	t.Helper()
	var batches []int
	r := newRecorder(s, false, slog.New(slog.DiscardHandler), func(n int) { batches = append(batches, n) }, func() {})
	r.start(context.Background())
	claims := claimAll(t, r, keys, last)
	if len(batches) != 1 {
		t.Fatalf("atomic batches of %v, want the one refused", batches)
	}
	found, err := s.readRecords(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	return claims, found
}

// runQueued waits until n writes are queued on r, runs r until the
// attempts that queued them (wg) are done, and stops it.
func runQueued(t *testing.T, r *recorder, n int, wg *sync.WaitGroup) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(r.reqs) == n }, "writes queued")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	wg.Wait()
	stop()
	<-done
}

// learnAtomic keeps trying while the stream cannot be read (here: it does
// not exist yet, as in an election it does not answer), and turns batches
// on once it can; a cancelled context ends it.
func TestLearnAtomicRetriesUntilTheStreamAnswers(t *testing.T) {
	_, plain := natstest.Start(t).Connect(t)
	js := &natstest.CountingJS{JetStream: plain}
	log := slog.New(slog.DiscardHandler)
	var batches atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		learnAtomic(t.Context(), js, "LATER", &batches, log, "the test stream", "writing one by one")
	}()
	natstest.WaitFor(t, 20*time.Second, func() bool { return js.Lookups.Load() >= 2 }, "a second lookup after the first failed")
	if batches.Load() {
		t.Fatal("batches on before the stream could be read")
	}
	if _, err := js.CreateStream(t.Context(), natsjs.StreamConfig{Name: "LATER", Subjects: []string{"later.>"}, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("learnAtomic did not return after the stream appeared")
	}
	if !batches.Load() {
		t.Error("batches off after the stream, which takes atomic batches, could be read")
	}

	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		learnAtomic(ctx, js, "NEVER", &batches, log, "a missing stream", "one by one")
	}()
	cancel()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("learnAtomic did not end with its context")
	}
}

// The in-memory set of delivered keys grows as keys come, keeps at most
// keep of them, and forgets the oldest first.
func TestRememberKeepsTheNewestKeys(t *testing.T) {
	s := &store{keep: 3}
	if s.remembers("a") {
		t.Fatal("an empty set remembers a key")
	}
	for _, k := range []string{"a", "b", "a", "c"} {
		s.remember(k)
	}
	if len(s.ring) != 3 || !s.remembers("a") || !s.remembers("b") || !s.remembers("c") {
		t.Fatalf("after a, b, a, c: ring %v; want the three remembered", s.ring)
	}
	s.remember("d") // forgets a, the oldest
	s.remember("e") // forgets b
	for k, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true, "e": true} {
		if s.remembers(k) != want {
			t.Errorf("remembers(%q) = %v, want %v", k, !want, want)
		}
	}
	if len(s.recent) != 3 || len(s.ring) != 3 {
		t.Errorf("%d keys in the set, ring of %d; want 3 and 3", len(s.recent), len(s.ring))
	}
	off := &store{}
	off.remember("a")
	if off.remembers("a") {
		t.Error("a store with keep 0 remembers")
	}
}

// fakeDirectGets answers the batched direct gets of the stream KV_fake
// with answer, which gets the number of the request (from 1) and its reply
// subject; it returns the store that reads through it.
func fakeDirectGets(t *testing.T, answer func(n int, reply string, nc *nats.Conn)) *store {
	t.Helper()
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	responder, _ := srv.Connect(t)
	var n int
	if _, err := responder.Subscribe("$JS.API.DIRECT.GET.KV_fake", func(m *nats.Msg) {
		n++
		answer(n, m.Reply, responder)
	}); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	s := &store{js: js, log: slog.New(slog.DiscardHandler), now: time.Now, direct: newDirectReader(nc)}
	t.Cleanup(s.direct.close)
	return s
}

// directAnswer publishes one message of a batched direct get's answer: a
// stored message of subject at seq, or with subject "" the end of the
// batch.
func directAnswer(t *testing.T, nc *nats.Conn, reply, subject string, seq uint64, data string) {
	t.Helper()
	m := nats.NewMsg(reply)
	if subject == "" {
		m.Header.Set(statusHeader, "204")
		m.Header.Set(descriptionHeader, "EOB")
	} else {
		m.Header.Set(natsjs.SubjectHeader, subject)
		m.Header.Set(natsjs.SequenceHeader, strconv.FormatUint(seq, 10))
		m.Data = []byte(data)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Error(err)
	}
}

// A batched read sent to a replica that dies before it answers is never
// answered. readLast sends a copy after jetstream.HedgeEvery and takes
// its answer, well inside the read's bound (the long cluster chaos run:
// 139 batched reads waited out their 5 s bound and failed).
func TestReadLastSendsALostReadAgain(t *testing.T) {
	s := fakeDirectGets(t, func(n int, reply string, nc *nats.Conn) {
		if n == 1 {
			return // lost with its replica
		}
		directAnswer(t, nc, reply, "$KV.fake.k1", 5, "v")
		directAnswer(t, nc, reply, "", 0, "")
	})
	var copies atomic.Int32
	s.readCopied = func() { copies.Add(1) }
	ctx, cancel := context.WithTimeout(context.Background(), 6*jetstream.HedgeEvery)
	defer cancel()
	got, err := s.readLast(ctx, bucketSubjects{stream: "KV_fake", prefix: "$KV.fake."}, []string{"k1"})
	if err != nil {
		t.Fatalf("readLast = %v; want the answer to the copy sent after %v", err, jetstream.HedgeEvery)
	}
	if v := got["k1"]; v.rev != 5 || string(v.data) != "v" {
		t.Errorf("k1 = %+v, want revision 5", v)
	}
	if n := copies.Load(); n != 1 {
		t.Errorf("record_read_copies_total counted %d copies, want 1", n)
	}
}

// When a copy answers, the answers of the others are dropped, however they
// interleave with it: mixed, a copy's end of batch would end the read
// before the taken copy's answer is complete, and a key could come from a
// replica that is behind.
func TestReadLastTakesTheAnswersOfOneCopy(t *testing.T) {
	var first string
	s := fakeDirectGets(t, func(n int, reply string, nc *nats.Conn) {
		if n == 1 {
			first = reply // held, as by a slow replica
			return
		}
		if n > 2 {
			return
		}
		directAnswer(t, nc, reply, "$KV.fake.k1", 5, "second")
		directAnswer(t, nc, first, "$KV.fake.k1", 9, "first")
		directAnswer(t, nc, first, "$KV.fake.k2", 10, "first")
		directAnswer(t, nc, first, "", 0, "")
		directAnswer(t, nc, reply, "$KV.fake.k2", 6, "second")
		directAnswer(t, nc, reply, "", 0, "")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := s.readLast(ctx, bucketSubjects{stream: "KV_fake", prefix: "$KV.fake."}, []string{"k1", "k2"})
	if err != nil {
		t.Fatal(err)
	}
	if k1, k2 := got["k1"], got["k2"]; k1.rev != 5 || k2.rev != 6 || string(k1.data) != "second" || string(k2.data) != "second" {
		t.Errorf("read k1 = %+v, k2 = %+v; want revisions 5 and 6, both from the copy that answered first", k1, k2)
	}
}

// A batch of writes whose answer never comes (here a subscriber swallows
// it, as the former leader of notify_delivered drops a write that reaches
// it while its leadership moves) holds up only its own writes: after
// recordStall the recorder writes the next batch beside it, and the lost
// one still fails at recordTimeout, telling its attempt. Before, every
// claim and record waited recordTimeout behind it (benchmark row 7c).
func TestRecorderWritesPastABatchWhoseAnswerIsLost(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	var stalls atomic.Int64
	r := newRecorder(s, false, slog.New(slog.DiscardHandler), func(int) {}, func() { stalls.Add(1) })
	r.start(ctx)
	swallow, err := s.js.Conn().SubscribeSync("lost.record")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); r.run(runCtx) }()
	t.Cleanup(func() { stop(); <-ran })

	lost := recordRequest{msg: &nats.Msg{Subject: "lost.record", Data: []byte("{}")}, done: make(chan written, 1)}
	r.reqs <- lost
	if _, err := swallow.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the write that is not answered never reached the server: %v", err)
	}
	if err := r.write(ctx, DeliveryRecord{Key: "after-lost", Channel: "telegram"}, 0); err != nil {
		t.Fatalf("the next write: %v", err)
	}
	if len(lost.done) != 0 {
		t.Fatal("the next write was made only after the unanswered one ended: it waited for it")
	}
	if found, err := s.readRecords(ctx, []string{"after-lost"}); err != nil || found["after-lost"] == nil {
		t.Fatalf("the next write is not stored (%v)", err)
	}
	if got := stalls.Load(); got != 1 {
		t.Fatalf("%d stalled batches counted, want 1", got)
	}
	if w := <-lost.done; !errors.Is(w.err, context.DeadlineExceeded) {
		t.Fatalf("the unanswered write ended with %v, want its timeout", w.err)
	}
}

// commitAtomic leaves every message as it was, whether the batch is stored
// or refused: a message is written on its own after a failed batch, and
// the batch's headers on it would make the server take it for a batch's.
func TestCommitAtomicLeavesTheMessagesAsTheyWere(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	msgs := func() []*nats.Msg {
		plain, err := s.recordMsg(DeliveryRecord{Key: "plain"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		over, err := s.recordMsg(DeliveryRecord{Key: "over"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		over.Header = nats.Header{"X-Kept": {"a", "b"}}
		return []*nats.Msg{plain, over}
	}
	check := func(what string, got []*nats.Msg) {
		t.Helper()
		for i, want := range msgs() {
			if got[i].Subject != want.Subject || string(got[i].Data) != string(want.Data) || got[i].Reply != "" || fmt.Sprint(got[i].Header) != fmt.Sprint(want.Header) {
				t.Errorf("%s: message %d is %q %q reply %q header %v, want %q %q header %v", what, i,
					got[i].Subject, got[i].Data, got[i].Reply, got[i].Header, want.Subject, want.Data, want.Header)
			}
		}
	}

	stored := msgs()
	ack, err := commitAtomic(ctx, s.js, stored)
	if err != nil || ack.BatchSize != 2 {
		t.Fatalf("commitAtomic: %+v, %v", ack, err)
	}
	check("after a stored batch", stored)
	if stored[0].Header != nil {
		t.Errorf("a message without headers has a header map after the batch: %v", stored[0].Header)
	}

	refuseBatches(t, s)
	refused := msgs()
	if _, err := commitAtomic(ctx, s.js, refused); err == nil {
		t.Fatal("a batch to a stream without atomic batches was stored")
	}
	check("after a refused batch", refused)
	for _, m := range refused {
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("the message written on its own after the refused batch: %v", err)
		}
	}
}

// A record's key in notify_delivered is the SHA-256 of the idempotency key
// in lower-case hex (operators find records with it), and the subject a
// record is written to is the bucket's prefix and that key.
func TestRecordKeyIsTheKeysSHA256(t *testing.T) {
	for _, key := range []string{"", "order:1042:accepted", "заказ:7:принят", "a\x00b"} {
		sum := sha256.Sum256([]byte(key))
		want := hex.EncodeToString(sum[:])
		if got := RecordKey(key); got != want {
			t.Errorf("RecordKey(%q) = %q, want %q", key, got, want)
		}
		if got := prefixedRecordKey("$KV.notify_delivered.", key); got != "$KV.notify_delivered."+want {
			t.Errorf("prefixedRecordKey(%q) = %q, want the prefix and %q", key, got, want)
		}
	}
}
