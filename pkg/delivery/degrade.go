package delivery

import (
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// degrader is the engine's graceful degradation, the fault-tolerant delivery
// article's rules for a provider that struggles:
//
//   - slow answers: when the 90th percentile of request durations since the
//     last change exceeds SlowThreshold, the channel-wide send rate halves
//     (down to MinRateFraction of the configured one) and the request
//     timeout doubles (up to MaxRequestTimeout), so that fewer requests pile
//     up and fewer time out while the provider may still act on them; when
//     the percentile falls under half the threshold, both step back.
//   - a 429 storm (StormThreshold 429s within StormWindow) or a backlog over
//     BacklogThreshold: bulk notifications wait (or expire at their own
//     deadline) while transactional ones go first.
//
// It is plain data with its own lock: the attempts report durations and
// 429s, the dispatcher evaluates it once a second and applies the result.
type degrader struct {
	cfg      Config
	baseRate rate.Limit

	mu        sync.Mutex
	samples   []time.Duration // durations since the last step
	limited   []time.Time     // recent 429s
	rate      rate.Limit
	timeout   time.Duration
	lastStep  time.Time
	slow      bool
	shedding  bool
	shedCause string
	p90       time.Duration
}

// minSamples is how many requests a percentile needs before it counts.
const minSamples = 10

// stepEvery is the least time between two rate steps, so each step is judged
// on requests made after it.
const stepEvery = 3 * time.Second

func newDegrader(cfg Config, baseRate rate.Limit) *degrader {
	return &degrader{cfg: cfg, baseRate: baseRate, rate: baseRate, timeout: cfg.RequestTimeout}
}

// observe records the duration of one answered request.
func (d *degrader) observe(dur time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.samples) < 1000 {
		d.samples = append(d.samples, dur)
	}
}

// rateLimited records a 429 read at now.
func (d *degrader) rateLimited(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.limited = append(d.limited, now)
}

// requestTimeout is the timeout of the next request.
func (d *degrader) requestTimeout() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.timeout
}

// degradation is the state /stats and the metrics report.
type degradation struct {
	Slow           bool          `json:"slow"`
	P90            time.Duration `json:"-"`
	P90Text        string        `json:"latency_p90"`
	Rate           float64       `json:"send_rate"`
	BaseRate       float64       `json:"base_send_rate"`
	Timeout        time.Duration `json:"-"`
	TimeoutText    string        `json:"request_timeout"`
	SheddingBulk   bool          `json:"shedding_bulk"`
	SheddingReason string        `json:"shedding_reason,omitempty"`
}

// evaluate updates the state at now, with backlog messages of the channel
// waiting, and reports it and whether the send rate changed.
func (d *degrader) evaluate(now time.Time, backlog int64) (degradation, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := false
	if len(d.samples) >= minSamples && now.Sub(d.lastStep) >= stepEvery {
		s := slices.Clone(d.samples)
		slices.Sort(s)
		d.p90 = s[len(s)*9/10]
		minRate := d.baseRate * rate.Limit(d.cfg.MinRateFraction)
		switch {
		case d.p90 > d.cfg.SlowThreshold && (d.rate > minRate || d.timeout < d.cfg.MaxRequestTimeout):
			d.rate = max(d.rate/2, minRate)
			d.timeout = min(d.timeout*2, d.cfg.MaxRequestTimeout)
			d.slow, changed = true, true
		case d.p90 < d.cfg.SlowThreshold/2 && d.slow:
			d.rate = min(d.rate*2, d.baseRate)
			d.timeout = max(d.timeout/2, d.cfg.RequestTimeout)
			d.slow = d.rate < d.baseRate || d.timeout > d.cfg.RequestTimeout
			changed = true
		}
		if changed {
			d.lastStep = now
		}
		d.samples = d.samples[:0]
	}
	d.limited = slices.DeleteFunc(d.limited, func(t time.Time) bool { return now.Sub(t) > d.cfg.StormWindow })
	switch {
	case len(d.limited) >= d.cfg.StormThreshold:
		d.shedding, d.shedCause = true, "429 storm"
	case d.cfg.BacklogThreshold > 0 && backlog > int64(d.cfg.BacklogThreshold):
		d.shedding, d.shedCause = true, "backlog"
	default:
		d.shedding, d.shedCause = false, ""
	}
	return degradation{
		Slow: d.slow, P90: d.p90, P90Text: d.p90.String(), Rate: float64(d.rate), BaseRate: float64(d.baseRate),
		Timeout: d.timeout, TimeoutText: d.timeout.String(), SheddingBulk: d.shedding, SheddingReason: d.shedCause,
	}, changed
}
