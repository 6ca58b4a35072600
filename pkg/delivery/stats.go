package delivery

import (
	"sync"
	"time"
)

// Stats is the worker's /stats document, the resilience dashboard of the
// fault-tolerant delivery article plus the state an operator asks for first.
type Stats struct {
	CircuitBreaker string  `json:"circuit_breaker"` // CLOSED, HALF_OPEN or OPEN
	DLQSize        int64   `json:"dlq_size"`        // messages in NOTIFY_DEAD
	QueueDepth     int64   `json:"queue_depth"`     // NOTIFY messages not yet acked by the worker
	SuccessRate5m  float64 `json:"success_rate_5m"` // accepted / (accepted + failed) over 5 minutes; 1 without calls
	APIHealthy     bool    `json:"api_healthy"`     // breaker closed and token accepted
	Retries        struct {
		Level1 int64 `json:"level_1"`
		Level2 int64 `json:"level_2"`
		Level3 int64 `json:"level_3"`
	} `json:"retries"`
	Sent             int64      `json:"sent"`
	AlreadyDelivered int64      `json:"already_delivered"`
	DeadLetters      int64      `json:"dead_letters"`
	RateLimited      int64      `json:"rate_limited"`
	InFlight         int        `json:"in_flight"`
	Held             int        `json:"held"`
	Parked           int        `json:"parked"`
	Lanes            int        `json:"lanes"`
	DeadChats        int        `json:"dead_chats"`
	PausedUntil      *time.Time `json:"paused_until,omitempty"`
	TokenRejected    bool       `json:"token_rejected"`
	Consuming        bool       `json:"consuming"`
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
