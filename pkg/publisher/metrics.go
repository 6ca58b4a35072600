package publisher

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsNamespace and metricsSubsystem make every metric name start with
// tgnotify_publisher_.
const (
	metricsNamespace = "tgnotify"
	metricsSubsystem = "publisher"
)

// metrics are the publisher's Prometheus metrics.
type metrics struct {
	backlog       renamedGauge
	oldestAge     prometheus.GaugeFunc
	published     prometheus.Counter
	duplicates    prometheus.Counter
	publishErrors prometheus.Counter
	reordered     prometheus.Counter
	purged        prometheus.Counter
	latency       prometheus.Histogram
	batchSize     renamedHistogram
	leader        prometheus.Gauge
	batched       prometheus.Gauge
	atomicBatches prometheus.Counter
	unverified    *prometheus.CounterVec

	// oldestNanos is the creation time of the oldest pending row at the
	// last backlog refresh, 0 when nothing was pending.
	oldestNanos atomic.Int64
}

func newMetrics(reg prometheus.Registerer, now func() time.Time) (*metrics, error) {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help}
	}
	m := &metrics{
		backlog: newRenamedGauge(prometheus.GaugeOpts(opts("backlog_rows",
			"Rows pending in the outbox at the last refresh.")), "backlog"),
		published: prometheus.NewCounter(prometheus.CounterOpts(opts("published_total",
			"Rows acknowledged by JetStream and marked published (duplicates included)."))),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts(opts("duplicates_total",
			"PubAcks that reported a duplicate: the stream already held the message id, for example after a crash between PubAck and marking."))),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts(opts("publish_errors_total",
			"Publishes that failed (error, missing PubAck or lost connection); their rows stay pending and are retried."))),
		reordered: prometheus.NewCounter(prometheus.CounterOpts(opts("reordered_total",
			"Rows stored in the stream after a later row of the same chat while publishing message by message (fast_batches 0); batches cannot reorder (docs/PUBLISHER.md)."))),
		purged: prometheus.NewCounter(prometheus.CounterOpts(opts("purged_total",
			"Published rows deleted from the outbox after the retention."))),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "commit_to_ack_seconds",
			Help:    "Time from a row's creation (its enqueue) to its PubAck.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		batchSize: newRenamedHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "batch_size_rows",
			Help:    "Rows per batch read from the outbox.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, "batch_size"),
		leader: prometheus.NewGauge(prometheus.GaugeOpts(opts("is_leader",
			"1 while this process holds the outbox lock and drains, 0 while it is a standby."))),
		batched: prometheus.NewGauge(prometheus.GaugeOpts(opts("fast_batches",
			"1 while the publisher publishes in fast-ingest batches, whose order a stream leader change cannot break; 0 while NOTIFY refuses them and it publishes message by message."))),
		atomicBatches: prometheus.NewCounter(prometheus.CounterOpts(opts("atomic_batches_total",
			"Atomic batches committed: runs of fresh rows on a NOTIFY with one replica, stored with one fsync each (docs/PUBLISHER.md)."))),
		unverified: prometheus.NewCounterVec(prometheus.CounterOpts(opts("unverified_batches_total",
			"Batches whose every message was a duplicate, by what asking NOTIFY about the last row found: stored (the batch is marked), proposed (published again after a backoff), missing (its rows go one per batch) or failed (no answer).")),
			[]string{"outcome"}),
	}
	for _, outcome := range []string{proofStored, proofProposed, proofMissing, proofFailed} {
		m.unverified.WithLabelValues(outcome) // exported at 0 from the start
	}
	m.oldestAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("oldest_pending_age_seconds",
		"Age of the oldest pending row at the last backlog refresh; 0 when none is pending.")),
		func() float64 {
			n := m.oldestNanos.Load()
			if n == 0 {
				return 0
			}
			return max(0, now().Sub(time.Unix(0, n)).Seconds())
		})
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.backlog.Gauge, m.backlog.old, m.oldestAge, m.published, m.duplicates,
		m.publishErrors, m.reordered, m.purged, m.latency, m.batchSize.Histogram, m.batchSize.old, m.leader, m.batched, m.atomicBatches, m.unverified} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// deprecatedHelp is the help of a metric's former name, exported for one
// release beside the new one.
func deprecatedHelp(namespace, subsystem, name, help string) string {
	return "Deprecated: renamed " + prometheus.BuildFQName(namespace, subsystem, name) + "; this name goes away in the next release. " + help
}

// renamedGauge is a gauge whose former name is still exported, for one
// release, as a deprecated duplicate: Set sets both. docs/RUNBOOK.md lists
// the former names.
type renamedGauge struct {
	prometheus.Gauge
	old prometheus.Gauge
}

func newRenamedGauge(opts prometheus.GaugeOpts, old string) renamedGauge {
	oldOpts := opts
	oldOpts.Name, oldOpts.Help = old, deprecatedHelp(opts.Namespace, opts.Subsystem, opts.Name, opts.Help)
	return renamedGauge{Gauge: prometheus.NewGauge(opts), old: prometheus.NewGauge(oldOpts)}
}

// Set sets the gauge and its former name.
func (g renamedGauge) Set(v float64) {
	g.Gauge.Set(v)
	g.old.Set(v)
}

// renamedHistogram is a histogram whose former name is still exported, for
// one release, as a deprecated duplicate: Observe observes both.
type renamedHistogram struct {
	prometheus.Histogram
	old prometheus.Histogram
}

func newRenamedHistogram(opts prometheus.HistogramOpts, old string) renamedHistogram {
	oldOpts := opts
	oldOpts.Name, oldOpts.Help = old, deprecatedHelp(opts.Namespace, opts.Subsystem, opts.Name, opts.Help)
	return renamedHistogram{Histogram: prometheus.NewHistogram(opts), old: prometheus.NewHistogram(oldOpts)}
}

// Observe observes v in the histogram and its former name.
func (h renamedHistogram) Observe(v float64) {
	h.Histogram.Observe(v)
	h.old.Observe(v)
}
