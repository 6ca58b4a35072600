package delivery

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus metrics, registered on an injected
// registry. docs/RUNBOOK.md says what each means and what to do about it.
type metrics struct {
	sent             prometheus.Counter
	alreadyDelivered prometheus.Counter
	failures         *prometheus.CounterVec
	rateLimited      prometheus.Counter
	dead             *prometheus.CounterVec
	retries          *prometheus.CounterVec
	migrations       prometheus.Counter
	requests         *prometheus.CounterVec
	breakerState     prometheus.Gauge
	inFlight         prometheus.Gauge
	held             prometheus.Gauge
	parked           prometheus.Gauge
	lanes            prometheus.Gauge
	paused           prometheus.Gauge
	halted           prometheus.Gauge
	queueDepth       prometheus.Gauge
	deadLetters      prometheus.Gauge
	sendSeconds      prometheus.Histogram
	deliverySeconds  prometheus.Histogram
	recordErrors     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "tgnotify", "worker"
	m := &metrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "sent_total",
			Help: "Notifications Telegram accepted."}),
		alreadyDelivered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "already_delivered_total",
			Help: "Redelivered or replayed notifications acked without calling Telegram because their delivery record exists."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "failures_total",
			Help: "Failed Bot API calls by class (the botapi reason: server, network, timeout, blocked, ...)."}, []string{"class"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rate_limited_total",
			Help: "429 Too Many Requests answers received; each pauses the whole sender."}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dead_letters_total",
			Help: "Notifications moved to NOTIFY_DEAD, by reason."}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "retries_total",
			Help: "Retries scheduled after a transient failure, by attempt level (1, 2, 3 = third or later)."}, []string{"level"}),
		migrations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "migrations_total",
			Help: "Group-to-supergroup migrations followed."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Bot API sendMessage calls made, by outcome action."}, []string{"outcome"}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "breaker_state",
			Help: "Circuit breaker state: 0 closed, 1 half-open, 2 open."}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "in_flight",
			Help: "Notifications being sent right now."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "held_messages",
			Help: "Messages held in memory waiting for their turn (chat limits, pause, breaker)."}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "parked_messages",
			Help: "Messages sent back to the stream with a delay (retry backoff, 429, lane overflow) not yet returned."}),
		lanes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lanes",
			Help: "Chats with messages held, in flight or parked."}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "paused",
			Help: "1 while the bot-wide 429 pause is in force."}),
		halted: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "token_rejected",
			Help: "1 while sending is stopped because Telegram rejected the bot token (401)."}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_depth",
			Help: "Notifications in NOTIFY not yet acknowledged by the worker (pending + ack pending)."}),
		deadLetters: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "dead_letter_messages",
			Help: "Messages stored in NOTIFY_DEAD."}),
		sendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "send_duration_seconds",
			Help:    "Duration of sendMessage calls.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		deliverySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "delivery_latency_seconds",
			Help:    "Time from the notification's creation (the order commit) to Telegram accepting it.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}}),
		recordErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "record_errors_total",
			Help: "Delivery records or acks that could not be written after a successful send (duplicate risk if the worker also dies)."}),
	}
	for _, c := range []prometheus.Collector{m.sent, m.alreadyDelivered, m.failures, m.rateLimited, m.dead, m.retries,
		m.migrations, m.requests, m.breakerState, m.inFlight, m.held, m.parked, m.lanes, m.paused, m.halted,
		m.queueDepth, m.deadLetters, m.sendSeconds, m.deliverySeconds, m.recordErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
