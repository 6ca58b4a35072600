package delivery

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Stats is the worker's /stats document, the resilience dashboard of the
// fault-tolerant delivery article plus the state an operator asks for first.
type Stats struct {
	Channel        string  `json:"channel"`
	CircuitBreaker string  `json:"circuit_breaker"` // CLOSED, HALF_OPEN or OPEN
	DLQSize        int64   `json:"dlq_size"`        // messages in NOTIFY_DEAD
	QueueDepth     int64   `json:"queue_depth"`     // messages of the channel not yet acked by the worker
	SuccessRate5m  float64 `json:"success_rate_5m"` // accepted / (accepted + failed) over 5 minutes; 1 without calls
	APIHealthy     bool    `json:"api_healthy"`     // breaker closed and credentials accepted
	Retries        struct {
		Level1 int64 `json:"level_1"`
		Level2 int64 `json:"level_2"`
		Level3 int64 `json:"level_3"`
	} `json:"retries"`
	Sent             int64 `json:"sent"`
	AlreadyDelivered int64 `json:"already_delivered"`
	DeadLetters      int64 `json:"dead_letters"`
	RateLimited      int64 `json:"rate_limited"`
	// Crossing429 counts requests admitted before a 429 was read and not
	// answered yet when it was, or admitted while it was being classified:
	// they may reach the provider inside the pause. No request is admitted
	// after a 429 was classified.
	Crossing429    int64      `json:"crossing_429"`
	InFlight       int        `json:"in_flight"`
	Held           int        `json:"held"`
	Parked         int        `json:"parked"`
	Lanes          int        `json:"lanes"`
	DeadRecipients int        `json:"dead_recipients"`
	PausedUntil    *time.Time `json:"paused_until,omitempty"`
	// TokenRejected is true while sending is stopped because the provider
	// rejected the credentials (401).
	TokenRejected bool `json:"token_rejected"`
	Consuming     bool `json:"consuming"`
	// Degradation is the graceful degradation in force: a slower send rate
	// and a longer request timeout while the provider answers slowly, bulk
	// waiting during a 429 storm or a backlog.
	Degradation degradation `json:"degradation"`
}

// statsView holds the figures /stats reports that no lock protects
// elsewhere.
type statsView struct {
	queueDepth, dlqSize                     atomic.Int64
	sent, already, deadN, limited, crossing atomic.Int64
	retries                                 [3]atomic.Int64
	window                                  window

	mu  sync.Mutex
	c   counts
	deg degradation
}

func (s *statsView) setCounts(c counts) {
	s.mu.Lock()
	s.c = c
	s.mu.Unlock()
}

func (s *statsView) setDegradation(d degradation) {
	s.mu.Lock()
	s.deg = d
	s.mu.Unlock()
}

// Stats returns the /stats document.
func (w *Worker) Stats() Stats {
	var s Stats
	s.Channel = w.name
	state := w.adm.breakerState()
	s.CircuitBreaker = breakerName(state)
	s.DLQSize = w.stats.dlqSize.Load()
	s.QueueDepth = w.stats.queueDepth.Load()
	now := w.now()
	s.SuccessRate5m = w.stats.window.rate(now)
	s.TokenRejected = w.adm.isHalted()
	s.APIHealthy = state == gobreaker.StateClosed && !s.TokenRejected
	s.Retries.Level1, s.Retries.Level2, s.Retries.Level3 = w.stats.retries[0].Load(), w.stats.retries[1].Load(), w.stats.retries[2].Load()
	s.Sent, s.AlreadyDelivered, s.DeadLetters = w.stats.sent.Load(), w.stats.already.Load(), w.stats.deadN.Load()
	s.RateLimited, s.Crossing429 = w.stats.limited.Load(), w.stats.crossing.Load()
	w.stats.mu.Lock()
	s.InFlight, s.Held, s.Parked, s.Lanes = w.stats.c.inflight, w.stats.c.held, w.stats.c.parked, w.stats.c.lanes
	s.Degradation = w.stats.deg
	w.stats.mu.Unlock()
	s.DeadRecipients = w.store.state.deadCount()
	if until := w.adm.pausedUntil(); until.After(now) {
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

// pollStats reads the queue depth (the consumer's pending and ack-pending
// messages) and the dead-letter count from JetStream every StatsInterval.
func (w *Worker) pollStats(ctx context.Context) {
	t := time.NewTicker(w.cfg.StatsInterval)
	defer t.Stop()
	for {
		w.pollOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollOnce reads the queue depth and the dead-letter count; it asks nothing
// while NATS is unreachable (the requests would only queue up in the
// reconnect buffer).
func (w *Worker) pollOnce(ctx context.Context) {
	if !w.js.Conn().IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StatsInterval)
	defer cancel()
	if info, err := w.res.Consumer.Info(ctx); err == nil {
		depth := int64(info.NumPending) + int64(info.NumAckPending)
		w.stats.queueDepth.Store(depth)
		w.m.queueDepth.Set(float64(depth))
	}
	if s, err := w.js.Stream(ctx, w.names.DeadStream); err == nil {
		if info, err := s.Info(ctx); err == nil {
			w.stats.dlqSize.Store(int64(info.State.Msgs))
			w.m.deadLetters.Set(float64(info.State.Msgs))
		}
	}
}

// window counts successes and failures per second over the last five minutes.
type window struct {
	mu      sync.Mutex
	buckets [300]struct {
		sec       int64
		ok, fails int64
	}
}

func (w *window) add(now time.Time, ok bool) {
	sec := now.Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	b := &w.buckets[sec%int64(len(w.buckets))]
	if b.sec != sec {
		b.sec, b.ok, b.fails = sec, 0, 0
	}
	if ok {
		b.ok++
	} else {
		b.fails++
	}
}

func (w *window) rate(now time.Time) float64 {
	from := now.Unix() - int64(len(w.buckets)) + 1
	var ok, fails int64
	w.mu.Lock()
	for _, b := range w.buckets {
		if b.sec >= from {
			ok += b.ok
			fails += b.fails
		}
	}
	w.mu.Unlock()
	if ok+fails == 0 {
		return 1
	}
	return float64(ok) / float64(ok+fails)
}
