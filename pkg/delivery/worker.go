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

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Sender is the part of the Bot API client the worker uses.
type Sender interface {
	SendMessage(ctx context.Context, p botapi.SendMessageParams) (*botapi.Message, error)
	GetMe(ctx context.Context) (*botapi.User, error)
}

// Deps are the worker's collaborators.
type Deps struct {
	// JS publishes dead letters and events and reads stream state.
	JS natsjs.JetStream
	// Resources are the consumer and buckets from jetstream.ProvisionWorker.
	Resources *jetstream.WorkerResources
	// API sends messages; normally a *botapi.Client.
	API Sender
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Registry receives the worker's metrics; default a private registry.
	Registry prometheus.Registerer
	// Now is the clock; default time.Now.
	Now func() time.Time
	// RandN returns a uniform random int64 in [0, n) for backoff jitter;
	// default math/rand/v2.Int64N.
	RandN func(n int64) int64
}

// Worker delivers notifications from the NOTIFY stream to Telegram. Create it
// with [New] and call [Worker.Run] once.
type Worker struct {
	cfg        Config
	js         natsjs.JetStream
	res        *jetstream.WorkerResources
	api        Sender
	log        *slog.Logger
	m          *metrics
	now        func() time.Time
	randN      func(int64) int64
	state      *chatState
	deliveries *deliveries
	attempts   attempts
	breaker    *gobreaker.CircuitBreaker[*botapi.Message]
	botLimit   *rate.Limiter
	// botNext is a bot-wide token reserved for a future instant, kept
	// rather than cancelled so that timer lateness is not lost from the
	// rate (owned by the dispatcher).
	botNext *rate.Reservation

	// Owned by the dispatcher goroutine.
	lanes           map[int64]*lane
	scheds          [2]*scheduler // transactional, bulk
	inflight        int
	lastArrival     time.Time
	arrivalEpoch    uint64             // pin epoch of the last arrival
	quarantineUntil time.Time          // see takeover.go
	reconnects      uint64             // NATS reconnections seen
	settleUntil     time.Time          // no sends before, after a reconnection
	stopCheck       context.CancelFunc // stops the running takeover check
	takeover        chan ackCount      // consumer ack-pending counts from the check
	pinLost         chan struct{}      // signalled when another worker was pinned

	incoming    chan *job
	results     chan result
	wake        chan struct{}
	sends       sync.WaitGroup
	sendCtx     context.Context // requests in flight; cancelled at the shutdown deadline
	cancelSends context.CancelFunc
	persistCh   chan stateOp
	persistDone chan struct{}
	persistCtx  context.Context // ends when the worker abandons unwritten state
	stopPersist context.CancelFunc

	breakerOpenedAt atomic.Int64  // unix nanos of the last transition to open
	pinEpoch        atomic.Uint64 // times this worker lost the pin to another
	received        atomic.Uint64 // messages handed to the dispatcher
	halted          atomic.Bool
	consuming       atomic.Bool
	running         atomic.Bool

	// Figures for /stats, written by the dispatcher and the stats poller.
	statsMu                       sync.Mutex
	held, parkedN, lanesN, flight int
	queueDepth, dlqSize           atomic.Int64
	sent, already, deadN, limited atomic.Int64
	retries                       [3]atomic.Int64
	window                        window
}

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
		return nil, errors.New("worker: provisioned consumer and buckets are required (jetstream.ProvisionWorker)")
	case d.API == nil:
		return nil, errors.New("worker: Bot API client is required")
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
	m, err := newMetrics(d.Registry)
	if err != nil {
		return nil, fmt.Errorf("registering worker metrics: %w", err)
	}
	log := d.Logger.With("component", "telegram-worker")
	w := &Worker{
		cfg: cfg, js: d.JS, res: d.Resources, api: d.API, log: log, m: m, now: d.Now, randN: d.RandN,
		state:       newChatState(d.Resources.Chats, log),
		deliveries:  newDeliveries(d.Resources.Delivered, cfg.RememberDelivered),
		attempts:    attempts{kv: d.Resources.Attempts},
		botLimit:    rate.NewLimiter(rate.Limit(cfg.BotRate), 1),
		lanes:       map[int64]*lane{},
		scheds:      [2]*scheduler{newScheduler(), newScheduler()},
		incoming:    make(chan *job, cfg.PullBatch*2),
		results:     make(chan result, cfg.MaxInFlight*2),
		wake:        make(chan struct{}, 1),
		takeover:    make(chan ackCount, 1),
		pinLost:     make(chan struct{}, 1),
		persistCh:   make(chan stateOp, 4096),
		persistDone: make(chan struct{}),
	}
	w.persistCtx, w.stopPersist = context.WithCancel(context.Background())
	w.breaker = gobreaker.NewCircuitBreaker[*botapi.Message](gobreaker.Settings{
		Name:        "telegram",
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.BreakerFailures },
		// Only transient failures say the API is unhealthy. A 429, a blocked
		// chat or a bad message is a healthy API answering.
		IsSuccessful: func(err error) bool { return botapi.Classify(err).Action != botapi.ActionBackoff },
		IsExcluded:   func(err error) bool { return botapi.Classify(err).Action == botapi.ActionCanceled },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			w.m.breakerState.Set(float64(breakerGauge(to)))
			if to == gobreaker.StateOpen {
				w.breakerOpenedAt.Store(w.now().UnixNano())
			}
			w.log.Warn("circuit breaker changed state", "from", breakerName(from), "to", breakerName(to))
			w.poke()
		},
	})
	return w, nil
}

// poke wakes the dispatcher.
func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Ready reports whether the worker is consuming and allowed to send: false
// while it starts, after Telegram rejected the token, or when it stopped.
func (w *Worker) Ready() error {
	switch {
	case !w.running.Load():
		return errors.New("worker is not running")
	case w.halted.Load():
		return errors.New("bot token rejected by Telegram (401): sending is stopped")
	case !w.consuming.Load():
		return errors.New("not consuming from JetStream")
	}
	return nil
}

// Stats returns the /stats document.
func (w *Worker) Stats() Stats {
	var s Stats
	state := w.breaker.State()
	s.CircuitBreaker = breakerName(state)
	s.DLQSize = w.dlqSize.Load()
	s.QueueDepth = w.queueDepth.Load()
	now := w.now()
	s.SuccessRate5m = w.window.rate(now)
	s.TokenRejected = w.halted.Load()
	s.APIHealthy = state == gobreaker.StateClosed && !s.TokenRejected
	s.Retries.Level1, s.Retries.Level2, s.Retries.Level3 = w.retries[0].Load(), w.retries[1].Load(), w.retries[2].Load()
	s.Sent, s.AlreadyDelivered, s.DeadLetters, s.RateLimited = w.sent.Load(), w.already.Load(), w.deadN.Load(), w.limited.Load()
	w.statsMu.Lock()
	s.InFlight, s.Held, s.Parked, s.Lanes = w.flight, w.held, w.parkedN, w.lanesN
	w.statsMu.Unlock()
	s.DeadChats = w.state.deadCount()
	if until := w.state.pausedUntil(); until.After(now) {
		s.PausedUntil = &until
	}
	s.Consuming = w.consuming.Load()
	return s
}

func breakerName(s gobreaker.State) string {
	switch s {
	case gobreaker.StateOpen:
		return "OPEN"
	case gobreaker.StateHalfOpen:
		return "HALF_OPEN"
	}
	return "CLOSED"
}

func breakerGauge(s gobreaker.State) int {
	switch s {
	case gobreaker.StateOpen:
		return 2
	case gobreaker.StateHalfOpen:
		return 1
	}
	return 0
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
	defer func() { stopBG(); bgWG.Wait() }()

	ready := make(chan struct{})
	bgWG.Add(1)
	go func() { defer bgWG.Done(); _ = w.state.watch(bg, ready) }()
	select {
	case <-ready:
	case <-ctx.Done():
		return nil
	}

	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.pollStats(bg) }()
	go w.runPersister()

	consumeCtx, stopConsume := context.WithCancel(ctx)
	consumeDone := make(chan struct{})
	go func() { defer close(consumeDone); w.consume(consumeCtx) }()

	w.dispatch(ctx)

	stopConsume()
	<-consumeDone
	w.shutdown()
	return nil
}

// pullExpiry is how long one pull request waits on the server. The server
// unpins a client that sends no new pull request for the consumer's
// PinnedTTL, even one that is alive and whose request is still waiting; the
// standby is then pinned while this worker still holds messages. So pulls
// expire, and are renewed, every half pinned TTL (at least 1s, nats.go's
// minimum: a pinned TTL below 2s cannot be kept), instead of nats.go's 30s.
func (w *Worker) pullExpiry() time.Duration {
	info := w.res.Consumer.CachedInfo()
	if info == nil || info.Config.PinnedTTL <= 0 {
		return 30 * time.Second
	}
	ttl := info.Config.PinnedTTL
	return min(max(ttl/2, time.Second), 30*time.Second)
}

// consume pulls from the durable consumer in the pinned priority group and
// feeds the dispatcher, re-establishing the subscription if it ends (consumer
// deleted and re-created by an operator, say).
func (w *Worker) consume(ctx context.Context) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		errs := make(chan error, 1)
		cc, err := w.res.Consumer.Consume(func(m natsjs.Msg) { w.receive(ctx, m) },
			natsjs.PullPriorityGroup(jetstream.PriorityGroupTelegram),
			natsjs.PullMaxMessages(w.cfg.PullBatch),
			natsjs.PullExpiry(w.pullExpiry()),
			natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) {
				if errors.Is(err, natsjs.ErrPinIDMismatch) {
					// Another worker is pinned now. Reported on the goroutine
					// that delivers messages, so what arrives from here on
					// carries the new epoch: this worker hands back what it
					// was delivered before (onPinLost), and when it is pinned
					// again it checks for messages the other one holds
					// (takeover.go) however soon that is.
					w.pinEpoch.Add(1)
					select {
					case w.pinLost <- struct{}{}:
					default:
					}
				}
				if errors.Is(err, natsjs.ErrConsumerDeleted) || errors.Is(err, natsjs.ErrConsumerNotFound) {
					select {
					case errs <- err:
					default:
					}
				}
				w.log.Warn("consume error", "err", err)
			}))
		if err != nil {
			w.log.Error("cannot consume; retrying", "err", err, "retry_in", delay)
			w.consuming.Store(false)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(delay*2, 10*time.Second)
			continue
		}
		w.consuming.Store(true)
		delay = 100 * time.Millisecond
		select {
		case <-ctx.Done():
			cc.Stop()
			<-cc.Closed()
			// Make sure the server has dropped this subscription's pull
			// requests before shutdown hands messages back: otherwise it
			// could redeliver them to the dead subscription, and they would
			// come back out of order after the ack wait.
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = w.js.Conn().FlushWithContext(fctx)
			cancel()
			w.consuming.Store(false)
			return
		case err := <-errs:
			w.log.Error("consumer is gone; re-subscribing", "err", err)
			cc.Stop()
		case <-cc.Closed():
			w.log.Warn("consume subscription ended; re-subscribing")
		}
		w.consuming.Store(false)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}
