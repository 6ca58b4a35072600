package publisher

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// Publisher drains one outbox database into JetStream. Create it with
// [Open], drive it with [Publisher.Run], and [Publisher.Close] it after Run
// has returned.
type Publisher struct {
	opts    Options
	log     *slog.Logger
	path    string
	db      *sql.DB
	reader  *outbox.Reader
	nc      *nats.Conn
	js      natsjs.JetStream
	acks    *ackRouter
	lock    *leaderLock
	metrics *metrics

	// checkpointDB is a one-connection handle with a short busy timeout,
	// used only for WAL checkpoints; checkpointer reads through it.
	checkpointDB *sql.DB
	checkpointer *outbox.Reader

	running atomic.Bool
	leader  atomic.Bool

	// batchRefused is when NOTIFY last refused fast-ingest batches (Unix
	// nanoseconds, 0 while it accepts them): rounds then publish message by
	// message, and try batches again after batchRetryInterval.
	batchRefused atomic.Int64

	// verifyUpto is the id of the last row of a batch that ended
	// unverified (errUnverifiedBatch): rows up to it are published one
	// per batch.
	verifyUpto atomic.Int64

	// atomicOK is whether fresh rows go in atomic batches (atomicbatch.go):
	// NOTIFY has one replica and takes them, as the drain loop last read
	// (learnAtomic, at atomicChecked; atomicKnown once a read succeeded),
	// and has not refused one since (atomicRefused).
	atomicOK      atomic.Bool
	atomicRefused atomic.Bool
	atomicKnown   bool
	atomicChecked time.Time

	// atRisk holds rows whose publish failed while a later row of the same
	// chat was stored: if such a row is then stored (not a duplicate), the
	// chat's order was broken. Only the ack stage of the running round
	// touches it.
	atRisk map[int64]struct{}

	closeOnce sync.Once
	closeErr  error
}

// Open opens the outbox database at path (creating it and applying the
// schema if needed, see [outbox.Open]) and returns a publisher that drains it
// into JetStream over nc. The connection belongs to the caller, who closes it
// after Close.
func Open(ctx context.Context, path string, nc *nats.Conn, opts Options) (*Publisher, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("publisher options: %w", err)
	}
	if nc == nil {
		return nil, errors.New("opening publisher: NATS connection is nil")
	}
	opts = opts.withDefaults()
	m, err := newMetrics(opts.Registerer, opts.Now)
	if err != nil {
		return nil, fmt.Errorf("registering publisher metrics: %w", err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening JetStream context: %w", err)
	}
	acks, err := newAckRouter(nc)
	if err != nil {
		return nil, err
	}
	db, err := openDB(ctx, path, opts.DB)
	if err != nil {
		acks.close()
		return nil, err
	}
	cpOpts := opts.DB
	cpOpts.BusyTimeout = checkpointBusyTimeout
	cpOpts.MaxOpenConns = 1
	cpDB, err := sql.Open("sqlite", outbox.DSN(path, cpOpts))
	if err != nil {
		acks.close()
		db.Close()
		return nil, fmt.Errorf("opening checkpoint handle on %s: %w", path, err)
	}
	cpDB.SetMaxOpenConns(1)
	if opts.Prepare == nil {
		decl := jetstream.DefaultSettings()
		decl.Prefix = opts.Names.Prefix
		streams := jetstream.Declare(decl).ForPublisher()
		opts.Prepare = func(ctx context.Context) error {
			_, err := jetstream.Ensure(ctx, js, streams)
			return err
		}
	}
	return &Publisher{
		opts:         opts,
		log:          opts.Logger.With("component", "publisher"),
		path:         path,
		db:           db,
		reader:       outbox.NewReader(db),
		nc:           nc,
		js:           js,
		acks:         acks,
		lock:         newLeaderLock(LockPath(path), opts.LockPollInterval),
		metrics:      m,
		checkpointDB: cpDB,
		checkpointer: outbox.NewReader(cpDB),
		atRisk:       make(map[int64]struct{}),
	}, nil
}

// openDB opens the publisher's handle on the outbox database: the settings
// of [outbox.Open] (which creates the file and applies the schema first),
// plus wal_autocheckpoint(0). SQLite otherwise checkpoints inside whichever
// commit finds the WAL over 1000 pages; for the publisher that is the mark
// stage, which would then stall for the copy and the fsync of the database
// file. The leader checkpoints from its maintenance loop instead, on its own
// connection, off the drain's path (see checkpoint).
func openDB(ctx context.Context, path string, opts outbox.Options) (*sql.DB, error) {
	db, err := outbox.Open(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	if err := db.Close(); err != nil {
		return nil, fmt.Errorf("opening outbox database %s: %w", path, err)
	}
	db, err = sql.Open("sqlite", outbox.DSN(path, opts)+"&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		return nil, fmt.Errorf("opening outbox database %s: %w", path, err)
	}
	n := opts.MaxOpenConns
	if n <= 0 {
		n = 8
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening outbox database %s: %w", path, err)
	}
	return db, nil
}

// Close closes the database handles and the PubAck subscription. Call it after Run has returned; it is
// safe to call more than once.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closeErr = errors.Join(p.acks.close(), p.db.Close(), p.checkpointDB.Close())
	})
	return p.closeErr
}

// IsLeader reports whether this publisher holds the outbox lock.
func (p *Publisher) IsLeader() bool { return p.leader.Load() }

// Ready reports whether the publisher can do its job: it returns
// [ErrStandby] while another process holds the lock (or Run has not taken
// it yet), [ErrNATSUnavailable] while the NATS connection is down, and an
// error while the database does not answer.
func (p *Publisher) Ready(ctx context.Context) error {
	if !p.leader.Load() {
		return ErrStandby
	}
	if !p.nc.IsConnected() {
		return fmt.Errorf("%w: connection is %s", ErrNATSUnavailable, p.nc.Status())
	}
	return p.reader.Ping(ctx)
}

// Run drains the outbox until ctx is cancelled. It first waits, as a hot
// standby, until it holds the lock next to the database; then it prepares
// the streams (Options.Prepare) and publishes pending rows, retrying every failure with a
// capped, jittered backoff. Once ctx is cancelled it stops reading, waits up
// to ShutdownTimeout for in-flight PubAcks, marks the acknowledged rows and
// returns nil.
//
// Run returns an error only for what retrying cannot fix: a conflicting
// existing stream (a [*jetstream.ConflictError]), or an error from the
// AfterAck hook. It is meant for an oklog/run actor: execute Run(ctx),
// interrupt by cancelling ctx.
func (p *Publisher) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer p.running.Store(false)

	p.log.Info("waiting for the outbox lock (standby)", "lock", LockPath(p.path))
	if err := p.lock.acquire(ctx, func(err error) { p.log.Warn("taking the outbox lock", "err", err) }); err != nil {
		return nil // cancelled while standby
	}
	defer func() {
		if err := p.lock.release(); err != nil {
			p.log.Warn("releasing the outbox lock", "err", err)
		}
	}()
	p.leader.Store(true)
	p.metrics.leader.Set(1)
	defer func() {
		p.leader.Store(false)
		p.metrics.leader.Set(0)
	}()
	p.log.Info("took the outbox lock; draining", "db", p.path)

	mctx, stopMaintenance := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.maintain(mctx) })
	defer func() {
		stopMaintenance()
		wg.Wait()
	}()

	return p.drain(ctx)
}

// noStreamBeforePrepare is how many rounds in a row must end with "no
// responders" from NOTIFY before the publisher starts Prepare again in the
// background (to create a deleted stream), and again after as many more
// once that attempt ended. Fewer are an election: such a round is retried
// after at most noStreamRetry, since "no responders" costs the servers
// nothing and the new leader should get the rows at once, not after a
// backoff grown through the election. Neither does a Prepare in such a
// streak hold publishing back (preparer).
const (
	noStreamBeforePrepare = 3
	noStreamRetry         = 250 * time.Millisecond
)

// drain runs pipeline rounds until ctx ends or an unrecoverable error.
func (p *Publisher) drain(ctx context.Context) error {
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     p.opts.RetryInitial,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         p.opts.RetryMax,
	}
	bo.Reset()
	var (
		cursor      int64
		watcher     *outbox.CommitWatcher
		noStream    int // rounds in a row NOTIFY answered "no responders"
		provisioned bool
		failures    int
		failedSince time.Time
	)
	defer func() {
		if watcher != nil {
			watcher.Close()
		}
	}()
	// A background Prepare ends with the drain, however it returns.
	prep := newPreparer(p.opts.Prepare)
	pctx, cancelPrepare := context.WithCancel(ctx)
	defer prep.wait()
	defer cancelPrepare()
	// failFor logs the first failure of a streak at WARN and the
	// following ones at DEBUG, then waits out the backoff, but never
	// longer than most when most is positive. fail waits it out whole.
	failFor := func(what string, err error, most time.Duration) {
		// A publish the user may not make only times out: say which
		// subject the server refused.
		err = jetstream.Denied(p.nc, err)
		if failures == 0 {
			failedSince = time.Now()
			p.log.Warn(what+"; retrying with backoff", "err", err)
		} else {
			p.log.Debug(what+"; retrying with backoff", "err", err, "failures", failures+1)
		}
		failures++
		wait := bo.NextBackOff()
		if most > 0 {
			wait = min(wait, most)
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	fail := func(what string, err error) { failFor(what, err, 0) }
	// recovered runs on this goroutine when a round marks its first rows
	// (round.onFirstMark): a round that recovered from failures reports it
	// then, not when it ends, which may be much later.
	recovered := func() {
		noStream = 0
		if failures > 0 {
			p.log.Info("publishing recovered", "failures", failures, "after", time.Since(failedSince).Round(time.Millisecond))
			failures = 0
		}
		bo.Reset()
	}

	for ctx.Err() == nil {
		if !p.nc.IsConnected() {
			p.waitConnected(ctx, bo.NextBackOff())
			continue
		}
		if err, ended := prep.collect(); ended && err != nil {
			if conflicting(err) {
				p.log.Error("cannot use the streams", "err", err)
				return err
			}
			p.log.Debug("preparing the streams again", "err", err)
		}
		if !provisioned {
			if err := prep.run(ctx); err != nil {
				if conflicting(err) {
					p.log.Error("cannot use the streams", "err", err)
					return err
				}
				fail("preparing the streams", err)
				continue
			}
			provisioned = true
		}
		if watcher == nil {
			w, err := outbox.NewCommitWatcher(ctx, p.db)
			if err != nil {
				fail("opening the commit watcher", err)
				continue
			}
			watcher = w
		}
		batched := p.batchRefused.Load() == 0 || p.batchRetryDue()
		if batched {
			p.learnAtomic(ctx)
			p.metrics.batched.Set(1)
		} else {
			p.metrics.batched.Set(0)
		}
		res := p.round(ctx, watcher, cursor, batched, recovered)
		cursor = res.cursor
		if res.fatal != nil {
			return res.fatal
		}
		if res.marked > 0 {
			if batched && p.batchRefused.Swap(0) != 0 {
				p.log.Info("NOTIFY accepts fast-ingest batches again; publishing in batches", "stream", p.opts.Names.Stream)
			}
		}
		switch {
		case res.err == nil:
			continue // clean stop: ctx is done
		case errors.Is(res.err, errRetryBatches):
			continue
		case errors.Is(res.err, errUnverifiedBatch):
			// Not a failure of NATS: NOTIFY lacks the last row of a batch
			// it answered as all duplicates; the rows go again at once,
			// one per batch.
			p.log.Info("a batch was all duplicates but NOTIFY lacks its last row; publishing its rows one per batch", "err", res.err)
			continue
		case errors.Is(res.err, errBatchUnsupported):
			if p.batchRefused.Swap(p.opts.Now().UnixNano()) == 0 {
				p.log.Warn("NOTIFY does not accept fast-ingest batches; publishing message by message, "+
					"which a stream leader change can reorder (counted in tgnotify_publisher_reordered_total). "+
					"Run tgnotify provision to enable allow_batched (nats-server 2.14 or later)", "stream", p.opts.Names.Stream, "err", res.err)
			}
			continue
		}
		if res.watcherBroken {
			watcher.Close()
			watcher = nil
		}
		if errors.Is(res.err, natsjs.ErrNoStreamResponse) {
			// NOTIFY has no leader: it is electing one (seconds at most
			// in a cluster; publishing again finds the new leader at
			// once) or it was deleted. Only a silence that lasts is
			// taken for a possible deletion, and even then Prepare runs
			// beside the rounds: its requests wait for the election.
			noStream++
			if noStream%noStreamBeforePrepare == 0 {
				prep.start(pctx)
			}
			failFor("publishing stopped", res.err, noStreamRetry)
			continue
		}
		noStream = 0
		fail("publishing stopped", res.err)
	}
	return nil
}

// conflicting reports whether err says that an existing stream conflicts
// with the declaration, which retrying cannot fix.
func conflicting(err error) bool {
	var conflict *jetstream.ConflictError
	return errors.As(err, &conflict)
}

// batchRetryInterval is how long the publisher keeps to message-by-message
// publishing after NOTIFY refused fast-ingest batches, before it tries them
// again.
const batchRetryInterval = time.Minute

// batchRetryDue reports whether NOTIFY refused batches batchRetryInterval
// ago or longer.
func (p *Publisher) batchRetryDue() bool {
	refused := p.batchRefused.Load()
	return refused != 0 && p.opts.Now().Sub(time.Unix(0, refused)) >= batchRetryInterval
}

// waitConnected waits until the NATS connection is up, ctx ends, or d
// passes.
func (p *Publisher) waitConnected(ctx context.Context, d time.Duration) {
	ch := p.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer p.nc.RemoveStatusListener(ch)
	if p.nc.IsConnected() {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-ch:
	case <-t.C:
	}
}
