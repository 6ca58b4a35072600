package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// ReconnectSettle is how long a worker sends nothing after its connection to
// NATS comes back. Another worker that had requests in flight when NATS went
// away writes their delivery records once it reconnects, and a message it
// sent can be handed to this worker at once (a nats-server that crashed
// forgets its most recent deliveries). It covers the NATS clients' largest
// reconnect delay (jetstream.Options.MaxReconnectWait, 2s) and a record
// write. A worker that was pinned before the reconnect ends it as soon as
// the consumer shows it still holds the same pin (Worker.confirmPin).
const ReconnectSettle = 3 * time.Second

// Deps are the worker's collaborators.
type Deps struct {
	// JS publishes dead letters and events and reads stream state.
	JS natsjs.JetStream
	// Resources are the channel's consumer and the buckets
	// (jetstream.ProvisionWorker or jetstream.OpenWorker), and the names
	// they were opened under: the worker publishes its dead letters,
	// events and fallbacks, and answers failover requests, by them.
	Resources *jetstream.WorkerResources
	// Channel sends and classifies; see pkg/channel/... .
	Channel Channel
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Registry receives the worker's metrics; default a private registry.
	Registry prometheus.Registerer
	// Now is the clock; default time.Now.
	Now func() time.Time
	// RandN returns a uniform random int64 in [0, n) for backoff jitter;
	// default math/rand/v2.Int64N.
	RandN func(n int64) int64
	// Reconnects says when JS's connection came back after a disconnect
	// (jetstream.Options.Reconnects, timed on Now), so that the settle
	// after a reconnect runs from then, not from when the worker noticed
	// it. Without it the settle runs from when the worker noticed.
	Reconnects *jetstream.Reconnects
}

// Worker delivers the notifications of one channel from the NOTIFY stream.
// Create it with [New] and call [Worker.Run] once.
//
// Its goroutines and what each owns:
//
//   - the dispatcher (dispatch, Run's own goroutine) owns the scheduler and
//     every job it holds: it places arrivals, launches attempts, applies
//     their results, keeps held messages alive and hands them back;
//   - the consumer callback (consume.go) decodes messages and passes them
//     to the dispatcher on incoming;
//   - one goroutine per attempt (attempt.go) runs the channel's Send and the
//     I/O of its outcome, and reports a result;
//   - the persister (persist.go) writes holds and pauses in order;
//   - the shared state watcher (state.go) follows notify_chats;
//   - the stats poller reads queue depth and dead letters; the takeover
//     check (takeover.go) and the halt probe run while needed.
//
// Everything else they share is behind admission (its own lock), the
// shared state (its own lock) or atomics.
type Worker struct {
	cfg     Config
	channel Channel
	name    string
	js      natsjs.JetStream
	res     *jetstream.WorkerResources
	names   jetstream.Names
	log     *slog.Logger
	m       *metrics
	now     func() time.Time
	randN   func(int64) int64
	store   *store
	records *recorder
	adm     *admission
	pace    *pacer
	persist *persister
	events  *events
	degrade *degrader
	// recipients is what ChangeRecipient and the dead-retry keep
	// (recipients.go).
	recipients *recipients

	// Owned by the dispatcher goroutine.
	sched        *scheduler
	lastArrival  time.Time
	arrivalEpoch uint64             // pin epoch of the last arrival
	reconnects   uint64             // NATS reconnections seen
	stopCheck    context.CancelFunc // stops the running takeover check
	// reconnectTimes says when the connection came back (Deps.Reconnects).
	reconnectTimes *jetstream.Reconnects
	// doubt is the running doubt after a 423; heldFrom the first pin epoch
	// whose messages this worker keeps: older ones go back (pinreset.go).
	doubt    *pinDoubt
	heldFrom uint64
	// takeoverBounds is the first reading of a running takeover that could
	// be the consumer as it is (plausibleReading); clearWindow the window
	// (F, D] its lane checks read: that reading's, or, while every reading
	// was doubted, one up to the stream's last sequence (doubted.go);
	// wantStreamLast asks the reading goroutine to read that sequence;
	// clearQueue the lanes waiting for a check, clearsRunning the checks
	// running (takeover.go).
	takeoverBounds *ackCount
	clearWindow    *ackCount
	wantStreamLast atomic.Bool
	// takeoverDoubted: this takeover has logged a reading it ignored
	// (onTakeoverCheck); later ones are logged at debug.
	takeoverDoubted bool
	// takeoverSince is when the running takeover began: its first arrival,
	// kept when it begins again.
	takeoverSince time.Time
	// takeoverGen counts the takeovers begun or begun again: readings of
	// the consumer and lane checks of an earlier one are ignored
	// (restartTakeover). Written by the dispatcher, read by the reading
	// goroutine.
	takeoverGen   atomic.Uint64
	clearQueue    []string
	verifyQueue   []holdCheck
	clearsRunning int
	// clearsRetryAt holds back the queued checks after one failed
	// (JetStream did not answer: an election), clearsBackoff is how long
	// the next failure holds them back.
	clearsRetryAt time.Time
	clearsBackoff time.Duration
	// suspectKeys are the keys of the running takeover's suspects, by
	// stream sequence; verifying: a verification of them runs, and none
	// starts before verifyAfter (suspectcount.go).
	suspectKeys     map[uint64]string
	verifying       bool
	verifyAfter     time.Time
	settledOnLeader settledOnLeaderFunc
	settledBatch    settledOnLeaderFunc
	sendCtx         context.Context // requests in flight; cancelled at the shutdown deadline
	// freshUntil ends the start-up settle of redeliveries (settleRedelivery);
	// set before the dispatcher starts, read by attempts.
	freshUntil  time.Time
	cancelSends context.CancelFunc
	// sends counts the sender goroutines; idle hands an attempt to one
	// that waits for work (launchOne).
	sends sync.WaitGroup
	idle  chan launched

	incoming chan *job
	results  chan result
	wake     chan struct{}
	takeover chan ackCount // consumer ack-pending counts from the check
	clears   chan cleared  // lane checks done
	verdicts chan suspectVerdict
	pinLost  chan struct{} // signalled when a pull request was answered "pin ID mismatch"
	// pinElsewhere carries the doubt during which another worker answered
	// that it is pinned (pinreset.go).
	pinElsewhere chan *pinDoubt

	pin      pinState      // see failover.go
	id       string        // names this worker's send claims (holder.go)
	pinEpoch atomic.Uint64 // times a pull request of this worker was answered "pin ID mismatch"
	// pinSettled is the last pin epoch whose doubt ended: while pinEpoch
	// is ahead, no request is written (pinreset.go).
	pinSettled atomic.Uint64
	received   atomic.Uint64 // messages handed to the dispatcher
	consuming  atomic.Bool
	running    atomic.Bool
	probing    atomic.Bool
	// haltCause describes the answer that halted sending.
	haltCause atomic.Pointer[string]
	// lastDelivery is the highest consumer sequence of a delivery that
	// reached this worker (deliveryGap); gapSeen: a gap not yet told to the
	// dispatcher.
	lastDelivery atomic.Uint64
	gapSeen      atomic.Bool
	// arrivals is the run of consumer sequences received without a gap,
	// under one pin: a takeover whose window lies inside it ends at once.
	arrivals arrivalRun

	stats statsView
}

// MaxInFlight is how many attempts the worker runs at once: the
// configured MaxInFlight, or the one derived from the channel's rate.
func (w *Worker) MaxInFlight() int { return w.cfg.MaxInFlight }

// New checks the configuration and builds a worker.
func New(cfg Config, d Deps) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("worker configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	switch {
	case d.JS == nil:
		return nil, errors.New("worker: JetStream is required")
	case d.Resources == nil || d.Resources.Consumer == nil || d.Resources.Delivered == nil || d.Resources.Chats == nil || d.Resources.Attempts == nil:
		return nil, errors.New("worker: the consumer and buckets are required (jetstream.ProvisionWorker)")
	case d.Channel == nil:
		return nil, errors.New("worker: a channel is required")
	}
	lim := d.Channel.Limits()
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("worker: channel %s: %w", d.Channel.Name(), err)
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = InFlightFor(lim.Rate, cfg.SingleRecordWrites)
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
		if info := d.Resources.Consumer.CachedInfo(); info != nil && info.Config.AckWait > 0 {
			cfg.AckWait = info.Config.AckWait
		}
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.RandN == nil {
		d.RandN = rand.Int64N
	}
	name := d.Channel.Name()
	m, err := newMetrics(d.Registry, name)
	if err != nil {
		return nil, fmt.Errorf("registering worker metrics: %w", err)
	}
	log := d.Logger.With("component", name+"-worker")
	w := &Worker{
		cfg: cfg, channel: d.Channel, name: name, js: d.JS, res: d.Resources, names: d.Resources.Names.OrDefault(), log: log, m: m, now: d.Now, randN: d.RandN,
		id:       newWorkerID(),
		incoming: make(chan *job, cfg.PullBatch*2),
		results:  make(chan result, cfg.MaxInFlight*2),
		idle:     make(chan launched),
		wake:     make(chan struct{}, 1),
		takeover: make(chan ackCount, 1),
		clears:   make(chan cleared, maxClearing),
		verdicts: make(chan suspectVerdict, 1),
		pinLost:  make(chan struct{}, 1),

		suspectKeys: make(map[uint64]string),

		pinElsewhere:   make(chan *pinDoubt, 1),
		reconnectTimes: d.Reconnects,
	}
	w.adm = newAdmission(name, cfg.BreakerFailures, cfg.BreakerOpen, func(from, to gobreaker.State) {
		w.m.breakerState.Set(float64(breakerGauge(to)))
		w.log.Warn("circuit breaker changed state", "from", breakerName(from), "to", breakerName(to))
		w.poke()
	})
	w.adm.connected = d.JS.Conn().IsConnected
	w.adm.pinDoubt = w.inPinDoubt
	state := newSharedState(d.Resources.Chats, name, log, w.adm.sharedPause)
	state.retryAfter, state.now = cfg.DeadRetryAfter, d.Now
	if w.recipients, err = newRecipients(d.Registry, name); err != nil {
		return nil, fmt.Errorf("registering worker metrics: %w", err)
	}
	w.store = &store{
		js: d.JS, names: w.names, channel: name, delivered: d.Resources.Delivered, attempts: d.Resources.Attempts, state: state, log: log, now: d.Now,
		deliveredSubjects: subjectsOf(d.Resources.Delivered), attemptsSubjects: subjectsOf(d.Resources.Attempts),
		direct:     newDirectReader(d.JS.Conn()),
		keep:       cfg.RememberDelivered,
		cancelLost: w.m.cancelsLost.Inc,
		readCopied: w.m.readCopies.Inc,
		worker:     w.id, held: w.heldElsewhere,
	}
	w.store.lookups = newLookups(w.store, func(n int) { w.m.lookupBatch.Observe(float64(n)) })
	w.settledOnLeader, w.settledBatch = w.store.settledOnLeader, w.store.settledKeys
	w.records = newRecorder(w.store, cfg.SingleRecordWrites, log, func(n int) { w.m.recordBatch.Observe(float64(n)) }, w.m.recordStalls.Inc)
	pauses, last, err := openPauseFile(cfg.PauseFile, name, log)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.persist = newPersister(state, pauses, func() bool { return d.JS.Conn().IsConnected() }, log)
	if now := d.Now(); last.Until.After(now) {
		// A pause the last process announced here and may not have stored
		// in notify_chats before it died: honour it, and store it.
		log.Warn("a 429 pause announced by the last worker on this host is still on: sending nothing until it ends",
			"until", last.Until, "left", last.Until.Sub(now).Round(time.Millisecond), "reason", last.Reason, "file", cfg.PauseFile)
		w.PauseUntil(last.Until, last.Reason)
	}
	w.events = newEvents(d.JS, w.names, name, log, w.m.eventErrors.Inc, func(n int) { w.m.eventBatch.Observe(float64(n)) })
	w.degrade = newDegrader(cfg, lim.Rate)
	w.pace = newPacer(lim.Rate)
	w.sched = newScheduler(schedConfig{
		rate:       lim.Rate,
		strictRate: cfg.StrictRate,
		laneRate:   lim.RecipientRate,
		laneCap:    cfg.LaneCap,
		parkGrace:  w.parkGrace(),
		recheck:    cfg.AckWait,
	}, state)
	return w, nil
}

// poke wakes the dispatcher.
func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// parkGrace is how long past its deadline a parked message may take to come
// back before the lane stops waiting for it.
func (w *Worker) parkGrace() time.Duration { return w.cfg.AckWait + 10*time.Second }

// ErrNotConnected is what Ready reports, and why shared state waits, while
// the worker's connection to NATS is down.
var ErrNotConnected = errors.New("not connected to NATS")

// PauseUntil makes the worker send nothing before until, as after a 429 of
// its own, and writes the pause to the shared state for the other workers:
// the daemon calls it when its start-up probe was answered with a rate
// limit (RateLimitedError).
func (w *Worker) PauseUntil(until time.Time, reason string) {
	p := pause{Until: until, Reason: reason}
	w.adm.extendPause(p)
	w.persist.pause(p)
}

// Ready reports whether the worker is consuming and allowed to send: false
// while it starts, after the provider rejected the credentials, or when it
// stopped.
func (w *Worker) Ready() error {
	switch {
	case !w.running.Load():
		return errors.New("worker is not running")
	case w.adm.isHalted():
		cause := "credentials rejected"
		if c := w.haltCause.Load(); c != nil {
			cause = *c
		}
		return fmt.Errorf("%s: %s: sending is stopped until a probe succeeds", w.name, cause)
	case !w.js.Conn().IsConnected():
		return ErrNotConnected
	case !w.consuming.Load():
		return errors.New("not consuming from JetStream")
	}
	return nil
}

// Run consumes and delivers until ctx ends, then stops pulling, lets
// requests in flight finish (bounded by ShutdownTimeout), hands every held
// message back to the stream in order, and returns nil. It returns an error
// only if it cannot start.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	defer w.running.Store(false)

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	defer func() { stopBG(); bgWG.Wait(); w.store.direct.close() }()

	// The other workers' 429 pauses are heard from the start, before the
	// shared state has loaded: that takes seconds in an election, and a
	// pause broadcast meanwhile by a worker that is then killed, before it
	// could store it, is known nowhere else (found by a long cluster chaos
	// run: a worker started in an election missed such a broadcast and sent
	// two requests inside the pause once it took over).
	pauses, err := w.hearPauses()
	if err != nil {
		return fmt.Errorf("listening on %s: %w", w.names.PauseSubject(w.name), err)
	}
	ready := make(chan struct{})
	bgWG.Go(func() { w.store.state.watch(bg, ready) })
	select {
	case <-ready:
	case <-ctx.Done():
		_ = pauses.Unsubscribe()
		return nil
	}
	live, err := w.answerLiveness()
	if err != nil {
		_ = pauses.Unsubscribe()
		return fmt.Errorf("answering on %s: %w", w.liveSubject(w.id), err)
	}
	bgWG.Go(func() { w.store.lookups.run(bg) })
	// Whether the streams take atomic batches is read in the background:
	// in an election it takes seconds, and the writes meanwhile go one by
	// one.
	bgWG.Go(func() { w.records.start(bg) })
	bgWG.Go(func() { w.records.run(bg) })
	bgWG.Go(func() { w.pollStats(bg) })
	bgWG.Go(func() { w.watchPin(bg) })
	go w.persist.run()
	if !w.cfg.SingleRecordWrites {
		bgWG.Go(func() { w.events.start(bg) })
	}
	go w.events.run()

	consumeCtx, stopConsume := context.WithCancel(ctx)
	consumeDone := make(chan struct{})
	go func() { defer close(consumeDone); w.consume(consumeCtx) }()

	w.sendCtx, w.cancelSends = context.WithCancel(context.WithoutCancel(ctx))
	w.freshUntil = w.now().Add(ReconnectSettle)
	w.dispatch(ctx)

	stopConsume()
	<-consumeDone
	w.unpinned()
	w.shutdown()
	_ = live.Unsubscribe()
	_ = pauses.Unsubscribe()
	return nil
}

// dispatch is the dispatcher loop: the only goroutine that touches the
// scheduler. It returns when ctx ends.
func (w *Worker) dispatch(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	keepalive := time.NewTicker(w.cfg.AckWait / 3)
	defer keepalive.Stop()
	housekeeping := time.NewTicker(time.Second)
	defer housekeeping.Stop()
	for {
		next := w.launch()
		if retry := w.startClears(); !retry.IsZero() && (next.IsZero() || retry.Before(next)) {
			next = retry
		}
		if w.doubt != nil {
			if end := w.doubt.since.Add(pinDoubtMax); next.IsZero() || end.Before(next) {
				next = end // a doubt ends by itself (launch)
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(w.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case j := <-w.incoming:
			w.onArrival(j)
			w.takeIncoming() // take what else arrived, then launch once
		case r := <-w.results:
			w.onResult(r)
		case <-timer.C:
		case <-w.wake:
		case <-w.store.state.changed:
			w.sched.rescheduleAll(w.now())
		case c := <-w.takeover:
			w.onTakeoverCheck(c)
		case c := <-w.clears:
			w.onCleared(c)
		case v := <-w.verdicts:
			w.onSuspectsVerified(v)
		case <-w.pinLost:
			w.onPinReset()
		case d := <-w.pinElsewhere:
			w.onPinElsewhere(d)
		case <-keepalive.C:
			for _, j := range w.sched.keepAlive(w.now(), w.cfg.AckWait/3) {
				_ = j.reply.InProgress()
			}
		case <-housekeeping.C:
			w.housekeep()
		}
	}
}

// launch starts as many attempts as admission and the scheduler allow now,
// and returns when the dispatcher should look again (zero: only on an
// event).
func (w *Worker) launch() time.Time {
	now := w.now()
	if rc := w.js.Conn().Stats().Reconnects; rc != w.reconnects {
		w.reconnects = rc
		w.settleAfterReconnect(rc, now)
	}
	if w.doubtExpired(now) {
		w.pinMoved("timeout")
	}
	if w.quarantineExpired(now) {
		w.log.Warn("messages held by a previous worker did not all come back in time; every lane sends now",
			"waited", w.cfg.AckWait+w.parkGrace())
		w.endQuarantine(takeoverDeadline)
	}
	for w.sched.inflight < w.cfg.MaxInFlight {
		now = w.now()
		ok, retryAt, _ := w.adm.gate(now, w.sched.inflight)
		paused := w.adm.pausedUntil()
		w.m.paused.Set(boolGauge(now.Before(paused)))
		if !ok {
			if now.Before(paused) {
				w.sched.pausedUntil(paused)
			}
			return retryAt
		}
		j, wake := w.sched.next(now)
		if j == nil {
			return wake
		}
		w.launchOne(j)
		if w.adm.breakerState() == gobreaker.StateHalfOpen {
			return time.Time{} // one probe at a time
		}
	}
	return time.Time{}
}

// launchOne runs an attempt at j on an idle sender goroutine, or on a new
// one when none is idle.
func (w *Worker) launchOne(j *job) {
	a := launched{j: j, target: w.store.state.resolve(j.lane)}
	select {
	case w.idle <- a:
		return
	default:
	}
	w.sends.Add(1)
	go w.sender(a)
}

// launched is an attempt handed to a sender goroutine.
type launched struct {
	j      *job
	target string
}

// sender runs a, then every attempt handed to it while it idles, until the
// sends are cancelled (shutdown). Senders outlive their attempts so that a
// new attempt does not start on a fresh goroutine stack and grow it again
// through the HTTP client's calls (copystack was 5% of the worker's CPU at
// its ceiling, BENCHMARKS.md §5). Their number follows the most attempts
// once in flight: a sender between handing its result over and waiting for
// the next attempt is not idle yet, so a launch in that moment starts one
// more.
func (w *Worker) sender(a launched) {
	defer w.sends.Done()
	for {
		w.results <- w.attempt(w.sendCtx, a.j, a.target)
		select {
		case a = <-w.idle:
		case <-w.sendCtx.Done():
			return
		}
	}
}

// apply carries out what the scheduler decided for the stream. Messages are
// not handed back while the connection to NATS is down: the NAKs would pile
// up in the reconnect buffer (thousands overflow it) and reach the server
// late, after their messages may have been redelivered. They stay parked in
// their lanes instead, and come back when their ack wait expires.
func (w *Worker) apply(eff effects) {
	now := w.now()
	if len(eff.naks) > 0 && !w.js.Conn().IsConnected() {
		for _, n := range eff.naks {
			w.apply(w.sched.nakFailed(n.j, now.Add(max(n.delay, w.cfg.AckWait))))
		}
		w.log.Warn("not connected to NATS: messages to hand back stay parked until their ack wait expires", "count", len(eff.naks))
		eff.naks = nil
	}
	for _, n := range eff.naks {
		var err error
		if n.delay <= 0 {
			err = n.j.reply.Nak()
		} else {
			err = n.j.reply.NakWithDelay(n.delay)
		}
		if err != nil {
			w.log.Warn("cannot hand a message back; it will be redelivered after the ack wait", "seq", n.j.seq, "err", err)
			w.apply(w.sched.nakFailed(n.j, now.Add(max(n.delay, w.cfg.AckWait))))
		}
	}
	for _, h := range eff.holds {
		w.persist.hold(h)
	}
}

// onArrival places a delivered message in its recipient's lane.
func (w *Worker) onArrival(j *job) {
	now := w.now()
	if j.pinEpoch < w.heldFrom {
		// Delivered while this worker was pinned, processed after it lost
		// the pin: it goes back like the rest of what it held.
		w.apply(w.sched.handBackJob(j, now))
		return
	}
	if w.doubt != nil && j.pinEpoch >= w.doubt.epoch {
		w.pinKept() // delivered after the 423: to this worker's new pin
	}
	w.sched.regainPin() // delivered under this worker's pin
	if j.gap && !j.newPin {
		w.m.deliveryGaps.Inc()
		w.log.Info("a delivery of the consumer never reached this worker (lost with a connection or on a route): taking over",
			"consumer_seq", j.cseq, "seq", j.seq)
	}
	if w.lastArrival.IsZero() || j.received.Sub(w.lastArrival) >= w.cfg.TakeoverGap || j.pinEpoch != w.arrivalEpoch || j.newPin || j.gap {
		w.startTakeoverCheck(j.received)
	}
	w.lastArrival, w.arrivalEpoch = j.received, j.pinEpoch
	eff, dup := w.sched.arrive(j, now)
	if dup {
		w.log.Debug("duplicate delivery attached", "seq", j.seq)
	}
	w.apply(eff)
}

// onResult applies a finished attempt.
func (w *Worker) onResult(r result) {
	if r.pause != nil {
		w.persist.pause(*r.pause)
	}
	if r.halt != "" && w.adm.setHalted(true) {
		w.haltCause.Store(&r.halt)
		w.m.halted.Set(1)
		if w.probing.CompareAndSwap(false, true) {
			go w.probe()
		}
	}
	disp := r.disp
	if (disp == retryHere) && r.job.pinEpoch < w.heldFrom {
		disp = handBack // the pin moved while it was in flight
	}
	w.apply(w.sched.finish(r.job, r.at, r.called, disp, r.delay))
}

// settleAfterReconnect begins the settle after the connection's rc-th
// reconnect, noticed at now: ReconnectSettle from when the connection came
// back, as Deps.Reconnects tells, else from now. The other workers' records
// it waits for are written once their connections are back, within the
// settle of the moment NATS came back, however late this worker notices: a
// worker whose connection came back while it was still starting (waiting
// for its consumer or its shared state) began to send seconds later, and
// then waited the whole settle again (the long cluster chaos run on
// 5ef896b: 8 s after the reconnect, 3 s more of a gap between Telegram
// outages lost).
func (w *Worker) settleAfterReconnect(rc uint64, now time.Time) {
	back := now
	if at, ok := w.reconnectTimes.At(rc); ok && at.Before(now) {
		back = at
	}
	pin := w.pinHeldBefore(rc)
	until := back.Add(ReconnectSettle)
	if !until.After(now) {
		w.log.Info("reconnected to NATS a while ago: the other workers' delivery records had the time to land; sending",
			"ago", now.Sub(back), "pinned", pin != "")
		return
	}
	w.adm.settleFor(until, settleCause{reconnects: rc, pin: pin})
	w.log.Info("reconnected to NATS: waiting for other workers' delivery records before sending",
		"for", until.Sub(now), "pinned", pin != "")
}

// probe checks rejected credentials with Channel.Probe until they are
// accepted again (a transient 401, or the operator fixed them) or the worker
// stops.
func (w *Worker) probe() {
	defer w.probing.Store(false)
	t := time.NewTicker(w.cfg.HaltProbe)
	defer t.Stop()
	for {
		select {
		case <-w.sendCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(w.sendCtx, 30*time.Second)
		err := w.channel.Probe(ctx)
		cancel()
		if err == nil {
			w.log.Info("the provider accepts the credentials again: sending resumes")
			w.adm.setHalted(false)
			w.m.halted.Set(0)
			w.poke()
			return
		}
		w.log.Error("credentials still rejected", "err", err)
	}
}

// housekeep forgets parked messages that never came back, drops idle lanes
// and publishes the gauges.
func (w *Worker) housekeep() {
	now := w.now()
	for _, j := range w.sched.due(now, w.due(now)) {
		w.launchOne(j)
	}
	deg, rateChanged := w.degrade.evaluate(now, w.stats.queueDepth.Load())
	if rateChanged {
		w.sched.setRate(rate.Limit(deg.Rate), now)
		w.pace.setRate(rate.Limit(deg.Rate))
		w.log.Warn("provider answers slowly: send rate and request timeout changed", "latency_p90", deg.P90,
			"send_rate", deg.Rate, "request_timeout", deg.Timeout, "degraded", deg.Slow)
	}
	if deg.SheddingBulk != w.sched.shedBulk {
		w.log.Warn("bulk notifications wait while transactional ones go", "waiting", deg.SheddingBulk, "cause", deg.SheddingReason)
	}
	w.sched.shedBulk = deg.SheddingBulk
	w.m.sendRate.Set(deg.Rate)
	w.m.requestTimeout.Set(deg.Timeout.Seconds())
	w.m.degradedSlow.Set(boolGauge(deg.Slow))
	w.m.sheddingBulk.Set(boolGauge(deg.SheddingBulk))
	w.stats.setDegradation(deg)
	eff, gone := w.sched.housekeep(now)
	for _, g := range gone {
		w.log.Warn("parked messages did not come back in time; checking whether they are settled", "recipient", g.recipient, "count", g.count)
	}
	w.apply(eff)
	c := w.sched.counts(w.heldFrom)
	w.m.held.Set(float64(c.held))
	w.m.parked.Set(float64(c.parked))
	w.m.lanes.Set(float64(c.lanes))
	w.m.inFlight.Set(float64(c.inflight))
	w.stats.setCounts(c)
}

// shutdown runs after the consumer stopped: no request is written from
// then on (the attempts that had not written theirs end not sent), the
// requests in flight get ShutdownTimeout to finish, then every held message
// goes back to the stream in order (behind its lane's parked ones), and
// pending state writes flush.
func (w *Worker) shutdown() {
	w.adm.stop()
	w.log.Info(StoppingMessage, "in_flight", w.sched.inflight)
	deadline := time.NewTimer(w.cfg.ShutdownTimeout)
	defer deadline.Stop()
	for w.sched.inflight > 0 {
		select {
		case r := <-w.results:
			w.onResult(r)
		case <-deadline.C:
			w.log.Warn("requests still in flight at the shutdown deadline; cancelling them", "in_flight", w.sched.inflight)
			w.cancelSends()
			for w.sched.inflight > 0 {
				w.onResult(<-w.results)
			}
		}
	}
	w.cancelSends()
	w.sends.Wait()
	for more := true; more; {
		select {
		case j := <-w.incoming:
			w.onArrival(j)
		default:
			more = false
		}
	}
	eff, n := w.sched.handBackAll(w.now())
	w.apply(eff)
	w.persist.close(5 * time.Second)
	w.events.close(5 * time.Second)
	w.log.Info("worker stopped", "handed_back", n)
}

// StoppingMessage is what the worker logs when it begins to stop (tests
// and operators look for it).
const StoppingMessage = "stopping: no request is written from now on; waiting for those in flight"

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
