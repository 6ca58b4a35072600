package intake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/botapi"
)

// Bot is the part of the Bot API a poller calls ([botapi.Client]).
type Bot interface {
	GetUpdates(ctx context.Context, p botapi.GetUpdatesParams) ([]botapi.Update, error)
	BotID() int64
}

// PollerDeps are a poller's collaborators.
type PollerDeps struct {
	// Bot takes the updates.
	Bot Bot
	// Chats is the notify_chats bucket: the lease and offset live there.
	Chats natsjs.KeyValue
	// Recipients applies each update's news (the delivery worker).
	Recipients Recipients
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Registry receives the intake's metrics; default a private registry.
	Registry prometheus.Registerer
}

// Retry delays of the poller.
const (
	retryMin = 500 * time.Millisecond
	retryMax = 30 * time.Second
)

// Poller takes the bot's updates with getUpdates while it holds the lease.
// Create it with [NewPoller] and call Run once.
type Poller struct {
	cfg        PollConfig
	bot        Bot
	botID      int64
	lease      *lease
	apply      applier
	log        *slog.Logger
	m          *metrics
	conflictAt time.Time // when the current 409 episode began (zero: none)
	failing    bool      // a non-conflict failure is being retried
}

// NewPoller checks the configuration and builds a poller.
func NewPoller(cfg PollConfig, d PollerDeps) (*Poller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("intake: %w", err)
	}
	cfg = cfg.withDefaults()
	switch {
	case d.Bot == nil:
		return nil, errors.New("intake: a Bot API client is required")
	case d.Chats == nil:
		return nil, errors.New("intake: the notify_chats bucket is required")
	case d.Recipients == nil:
		return nil, errors.New("intake: Recipients (the delivery worker) are required")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	m, err := newMetrics(d.Registry)
	if err != nil {
		return nil, fmt.Errorf("registering intake metrics: %w", err)
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	log := d.Logger.With("component", "intake", "mode", string(ModePoll))
	return &Poller{
		cfg: cfg, bot: d.Bot, botID: d.Bot.BotID(), log: log, m: m,
		lease: newLease(d.Chats, cfg.Owner, cfg.LeaseTTL, log),
		apply: applier{recipients: d.Recipients, log: log, m: m},
	}, nil
}

// defaultOwner names this process: host, pid and a random suffix, so that
// a restarted worker is never mistaken for its earlier life.
func defaultOwner() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Run takes the lease when it is free, polls while it holds it, and waits
// as a standby otherwise, until ctx ends; then it releases the lease
// (keeping the offset) so that a standby takes over at once, and returns
// nil.
func (p *Poller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	wg.Go(func() { p.lease.watch(watchCtx) })
	defer func() { stopWatch(); wg.Wait() }()
	p.log.Info("update intake started: polling getUpdates while this worker holds the lease", "lease", LeaseKey,
		"lease_ttl", p.cfg.LeaseTTL, "poll_timeout", p.cfg.Timeout)
	for {
		rec, err := p.lease.acquire(ctx)
		if err != nil {
			return nil
		}
		p.m.acquired.Inc()
		p.hold(ctx, rec)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			p.lease.release(rctx)
			cancel()
			p.log.Info("update intake stopped; lease released")
			return nil
		}
	}
}

// hold polls while the lease is held: a goroutine renews it and cancels
// the polling when it is lost or cannot be renewed in time.
func (p *Poller) hold(ctx context.Context, rec leaseRecord) {
	p.m.polling.Set(1)
	defer p.m.polling.Set(0)
	heldCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.keepLease(heldCtx, cancel) })
	defer func() { cancel(); wg.Wait() }()
	offset := rec.Offset
	if rec.BotID != 0 && rec.BotID != p.botID {
		p.log.Warn("the stored offset counts another bot's updates (the token changed); starting from Telegram's oldest update",
			"stored_bot", rec.BotID, "bot", p.botID, "stored_offset", rec.Offset)
		offset = 0
	}
	p.poll(heldCtx, offset)
}

// keepLease renews the lease every TTL/3 and cancels the polling when
// another poller took it, or when the last renewal is TTL/2 old (NATS
// unreachable): by then a standby may be about to take it.
func (p *Poller) keepLease(ctx context.Context, stop context.CancelFunc) {
	for {
		ok, left := p.lease.valid()
		if !ok {
			if ctx.Err() == nil {
				p.m.errors.WithLabelValues("lease").Inc()
				p.log.Warn("the intake lease was lost or could not be renewed in time: this worker stops polling; a standby takes over")
			}
			stop()
			return
		}
		if !sleepCtx(ctx, min(p.cfg.LeaseTTL/3, left)) {
			return
		}
		if err := p.lease.renew(ctx); err != nil && ctx.Err() == nil {
			p.m.errors.WithLabelValues("lease").Inc()
			p.log.Warn("cannot renew the intake lease", "err", err)
		}
	}
}

// poll takes updates from offset on and applies them in order, moving the
// stored offset after each, until ctx ends.
func (p *Poller) poll(ctx context.Context, offset int64) {
	wait := retryMin
	for ctx.Err() == nil {
		ups, err := p.bot.GetUpdates(ctx, botapi.GetUpdatesParams{Offset: offset, Timeout: int(p.cfg.Timeout / time.Second), AllowedUpdates: allowedUpdates})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !sleepCtx(ctx, p.pollFailed(err, &wait)) {
				return
			}
			continue
		}
		p.pollSucceeded()
		wait = retryMin
		for _, u := range ups {
			if u.UpdateID < offset {
				continue // confirmed already (a repeat)
			}
			// An update being applied is finished even when the worker is
			// stopping (within applyTimeout): its change and its event
			// belong together.
			apply := func() error {
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
				defer cancel()
				return p.apply.apply(actx, u)
			}
			if !p.retry(ctx, "apply", apply) {
				return
			}
			offset = u.UpdateID + 1
			// Stored even when the worker is stopping: an update applied
			// and not stored would be applied again after the restart.
			commit := func() error { return p.lease.commit(context.WithoutCancel(ctx), offset, p.botID) }
			if !p.retry(ctx, "lease", commit) {
				return
			}
		}
	}
}

// retry runs f until it succeeds, with backoff; it reports false when ctx
// ended or the lease was lost first.
func (p *Poller) retry(ctx context.Context, op string, f func() error) bool {
	wait := retryMin
	for {
		err := f()
		switch {
		case err == nil:
			return true
		case ctx.Err() != nil:
			return false
		case errors.Is(err, errLeaseLost):
			p.log.Warn("another worker took the intake lease: this one stops polling")
			return false
		}
		if op == "lease" {
			p.m.errors.WithLabelValues(op).Inc()
		}
		p.log.Warn("cannot finish an update; trying it again", "op", op, "err", err, "in", wait)
		if !sleepCtx(ctx, wait) {
			return false
		}
		wait = min(wait*2, retryMax)
	}
}

// pollFailed explains a getUpdates failure and returns how long to wait
// before the next one. A 409 is explained once per episode: someone must
// act on it.
func (p *Poller) pollFailed(err error, wait *time.Duration) time.Duration {
	p.m.errors.WithLabelValues("poll").Inc()
	var apiErr *botapi.Error
	switch {
	case errors.Is(err, botapi.ErrWebhookActive):
		p.conflict(err, "Telegram refuses getUpdates because a webhook is set on this bot: its updates go to that webhook (the application's, or a worker's with -intake webhook). "+
			"Either leave the updates to it (-intake off here, or -intake webhook on every worker) or, if nothing needs the webhook, delete it "+
			"(curl https://api.telegram.org/bot<token>/deleteWebhook); asking again every -intake-conflict-retry meanwhile (docs/RUNBOOK.md#the-409-conflict)")
		return p.cfg.ConflictRetry
	case errors.Is(err, botapi.ErrConflict):
		p.conflict(err, "another program polls this bot's updates (getUpdates ended with 409 Conflict): the application, or a tgnotify worker that uses another notify_chats bucket. "+
			"Two pollers take the updates from each other; stop the other one, or turn -intake off here (docs/RUNBOOK.md#the-409-conflict)")
	case errors.Is(err, botapi.ErrUnauthorized):
		p.log.Error("the bot token is rejected; the intake tries again", "err", err, "in", p.cfg.ConflictRetry)
		return p.cfg.ConflictRetry
	case errors.As(err, &apiErr) && apiErr.RetryAfter > 0:
		p.log.Warn("getUpdates rate limited", "retry_after", apiErr.RetryAfter)
		return apiErr.RetryAfter
	default:
		if !p.failing {
			p.log.Warn("getUpdates failed; retrying with backoff", "err", err)
		} else {
			p.log.Debug("getUpdates failed again", "err", err)
		}
		p.failing = true
	}
	d := *wait
	*wait = min(*wait*2, retryMax)
	return d
}

// conflict logs the first 409 of an episode as an error and the others at
// debug level.
func (p *Poller) conflict(err error, explain string) {
	if p.conflictAt.IsZero() {
		p.conflictAt = time.Now()
		p.log.Error(explain, "err", err)
	} else {
		p.log.Debug("getUpdates: still 409 Conflict", "err", err, "since", p.conflictAt)
	}
	p.m.conflict.Set(1)
}

// pollSucceeded ends a failure episode.
func (p *Poller) pollSucceeded() {
	if !p.conflictAt.IsZero() {
		p.log.Info("getUpdates works again: the conflict is over", "lasted", time.Since(p.conflictAt).Round(time.Second))
		p.conflictAt = time.Time{}
	}
	p.m.conflict.Set(0)
	if p.failing {
		p.log.Info("getUpdates works again")
		p.failing = false
	}
}
