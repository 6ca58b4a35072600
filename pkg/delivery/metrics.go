package delivery

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus metrics, registered on an injected
// registry. docs/RUNBOOK.md says what each means and what to do about it.
type metrics struct {
	sent                   prometheus.Counter
	alreadyDelivered       prometheus.Counter
	cancelled              prometheus.Counter
	scheduled              prometheus.Counter
	claimWaits             prometheus.Counter
	readsBehind            prometheus.Counter
	readCopies             prometheus.Counter
	heldOff                prometheus.Counter
	cancelsLost            prometheus.Counter
	failures               *prometheus.CounterVec
	rateLimited            prometheus.Counter
	dead                   *prometheus.CounterVec
	retries                *prometheus.CounterVec
	redirects              prometheus.Counter
	crossing               prometheus.Counter
	unrecognised           *prometheus.CounterVec
	fallbacks              *prometheus.CounterVec
	fallbackMaybeDelivered prometheus.Counter
	eventErrors            prometheus.Counter
	sendRate               renamedGauge
	failovers              prometheus.Counter
	pinChecks              prometheus.Counter
	takeovers              prometheus.Counter
	deliveryGaps           prometheus.Counter
	takeoverSeconds        *prometheus.HistogramVec
	suspectRechecks        prometheus.Counter
	settlesShortened       prometheus.Counter
	pinResets              *prometheus.CounterVec
	answerWaits            *prometheus.CounterVec
	requestTimeout         prometheus.Gauge
	degradedSlow           prometheus.Gauge
	sheddingBulk           prometheus.Gauge
	requests               *prometheus.CounterVec
	breakerState           prometheus.Gauge
	inFlight               renamedGauge
	held                   prometheus.Gauge
	parked                 prometheus.Gauge
	lanes                  prometheus.Gauge
	paused                 prometheus.Gauge
	halted                 prometheus.Gauge
	queueDepth             renamedGauge
	deadLetters            prometheus.Gauge
	sendSeconds            prometheus.Histogram
	deliverySeconds        prometheus.Histogram
	recordErrors           prometheus.Counter
	lookupBatch            prometheus.Histogram
	recordBatch            prometheus.Histogram
	recordStalls           prometheus.Counter
	eventBatch             prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, channel string) (*metrics, error) {
	const ns, sub = "tgnotify", "worker"
	// Every metric carries the channel, so that the workers of several
	// channels can be scraped into one dashboard.
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"channel": channel}, reg)
	m := &metrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "sent_total",
			Help: "Notifications the provider accepted."}),
		alreadyDelivered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "already_delivered_total",
			Help: "Redelivered or replayed notifications acked without calling Telegram because their delivery record exists."}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cancelled_total",
			Help: "Notifications acked without sending because a cancel mark was found (tgnotify cancel, outbox cancel of a published row)."}),
		scheduled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "scheduled_naks_total",
			Help: "Messages handed back to the stream because their not_before had not come (re-handed back every hour while it is far)."}),
		claimWaits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "claim_waits_total",
			Help: "Sends put off because their send claim could not be written within 2s (notify_delivered electing a leader): the send waits for the claim."}),
		readsBehind: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "record_reads_behind_total",
			Help: "Give-ups whose batched delivery record read (answered by any replica) was behind the bucket's leader, which was asked before handing the notification on: they were decided on the leader's entry."}),
		readCopies: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "record_read_copies_total",
			Help: "Copies of a batched delivery record or attempt count read sent because no replica had answered it within 500ms (one gone with its node, or cut off): the first copy to answer is taken."}),
		heldOff: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "held_off_total",
			Help: "Sends put off because another live worker's fresh send claim says it is sending the same notification: this worker waits for its record."}),
		cancelsLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cancels_lost_total",
			Help: "Notifications delivered although a cancel mark was written: the send's claim was replaced meanwhile (every send has a claim: should stay 0)."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "failures_total",
			Help: "Failed requests by class (server, network, timeout, blocked, content, ...)."}, []string{"class"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rate_limited_total",
			Help: "429 Too Many Requests answers received; each pauses the whole sender."}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dead_letters_total",
			Help: "Notifications moved to NOTIFY_DEAD, by reason."}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "retries_total",
			Help: "Retries scheduled after a transient failure, by attempt level (1, 2, 3 = third or later)."}, []string{"level"}),
		redirects: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "redirects_total",
			Help: "Recipients found moved and followed (a Telegram group that became a supergroup)."}),
		crossing: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "crossing_429_total",
			Help: "Requests that may reach the provider inside a 429's pause: admitted before the 429 was read and not answered when it was, or admitted while it was being classified. None is admitted after."}),
		unrecognised: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "unrecognised_answers_total",
			Help: "Permanent answers (an unrecognised 400 or 403) dead-lettered with a description the channel does not know, by reason and code: the table of known answers grows from these."}, []string{"reason", "code"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fallbacks_total",
			Help: "Notifications handed to the next channel of their route, by that channel and the reason."}, []string{"to", "reason"}),
		fallbackMaybeDelivered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fallbacks_after_maybe_delivered_total",
			Help: "Fallbacks whose last request on this channel may have reached the provider (a timeout after it was written): the customer may get both."}),
		eventErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "event_errors_total",
			Help: "Events for the application (delivered, fallback, dead) that could not be published."}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "failovers_total",
			Help: "Times this worker found the pinned worker gone (it did not answer) and unpinned it to take over."}),
		pinChecks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "pin_checks_total",
			Help: "Checks this worker made, as a standby, that the pinned worker is alive."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "takeovers_total",
			Help: "Takeovers begun, and begun again while one ran: messages began to arrive after a quiet period, a new pin or a regained one, and each recipient waited for what another worker may still hold."}),
		deliveryGaps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "delivery_gaps_total",
			Help: "Deliveries of the consumer that never reached this worker while it stayed pinned (a skipped consumer sequence: lost with a connection or on a route between nodes); each began a takeover."}),
		takeoverSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "takeover_duration_seconds",
			Help:    "How long takeovers ran, from their first arrival to their end, begun again or not, by how they ended: count (every unacknowledged message of the consumer was this worker's) or deadline (the ack wait and a grace passed). Meanwhile each lane sends once its check found nothing of it held elsewhere.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"end"}),
		suspectRechecks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "suspect_rechecks_total",
			Help: "Early checks, after a takeover, of whether the messages a recipient waits for were settled by the worker that held them (one in flight when the pin moved is recorded and acked by that worker, and never comes back)."}),
		settlesShortened: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "reconnect_settles_shortened_total",
			Help: "Settles after a NATS reconnect ended early: this worker was pinned before the reconnect and the consumer, asked after it, still named the same pin, so no other worker can have been sending meanwhile."}),
		pinResets: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "pin_resets_total",
			Help: "Pull requests answered \"pin ID mismatch\" (the pin was dropped, by a consumer leader change most often), by how the doubt ended: kept (pinned again, held messages kept), moved (another worker answered as pinned) or timeout; the last two hand back what the worker held."}, []string{"outcome"}),
		answerWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "answer_waits_total",
			Help: "Requests that waited, as they were about to be written, for answers that had begun to arrive to be classified (one may be a 429), by how the wait ended: settled, or timeout after 50 ms."}, []string{"outcome"}),
		sendRate: newRenamedGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "send_rate_requests_per_second",
			Help: "The channel-wide send rate in force, requests per second: the channel's, or less while the provider answers slowly."}, "send_rate"),
		requestTimeout: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "request_timeout_seconds",
			Help: "The request timeout in force: raised while the provider answers slowly."}),
		degradedSlow: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "degraded_slow",
			Help: "1 while the provider answers slowly and the worker sends slower, with a longer timeout."}),
		sheddingBulk: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "shedding_bulk",
			Help: "1 while bulk notifications wait (a 429 storm or a backlog) and transactional ones go."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Requests made to the provider, by outcome (delivered, retry_after, transient, rejected, recipient_dead, redirect, halt)."}, []string{"outcome"}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "breaker_state",
			Help: "Circuit breaker state: 0 closed, 1 half-open, 2 open."}),
		inFlight: newRenamedGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "in_flight_requests",
			Help: "Requests to the provider in flight right now."}, "in_flight"),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "held_messages",
			Help: "Messages held in memory waiting for their turn (chat limits, pause, breaker)."}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "parked_messages",
			Help: "Messages sent back to the stream with a delay (retry backoff, 429, lane overflow) not yet returned."}),
		lanes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lanes",
			Help: "Recipients with messages held, in flight or parked."}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "paused",
			Help: "1 while the bot-wide 429 pause is in force."}),
		halted: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "token_rejected",
			Help: "1 while sending is stopped because the provider rejected the credentials (401)."}),
		queueDepth: newRenamedGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_depth_messages",
			Help: "Notifications of the channel in NOTIFY not yet acknowledged by the worker (pending + ack pending)."}, "queue_depth"),
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
		lookupBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "record_lookup_batch_keys",
			Help:    "Keys per batched read of delivery records: the lookups of the attempts that start together are one request.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
		recordBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "record_write_batch_records",
			Help:    "Delivery records and send claims per atomic batch: the writes of the attempts that reach them while a write is on its way are stored together, with one fsync.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
		recordStalls: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "record_write_stalls_total",
			Help: "Batches of delivery records and send claims not answered within 500 ms, the next batch written beside them: an answer lost while notify_delivered's leader moved, or a slow server."}),
		eventBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "event_batch_events",
			Help:    "Events per atomic batch: the events that wait while a batch is on its way are stored together, with one fsync.",
			Buckets: prometheus.ExponentialBuckets(16, 2, 5)}),
	}
	for _, c := range []prometheus.Collector{m.sent, m.alreadyDelivered, m.cancelled, m.scheduled, m.claimWaits, m.readsBehind, m.readCopies, m.heldOff, m.cancelsLost, m.failures, m.rateLimited, m.dead, m.retries,
		m.redirects, m.crossing, m.unrecognised, m.fallbacks, m.fallbackMaybeDelivered, m.eventErrors, m.failovers, m.pinChecks, m.takeovers, m.deliveryGaps, m.takeoverSeconds, m.suspectRechecks, m.settlesShortened, m.pinResets, m.answerWaits, m.sendRate.Gauge, m.sendRate.old,
		m.requestTimeout, m.degradedSlow, m.sheddingBulk, m.requests, m.breakerState, m.inFlight.Gauge, m.inFlight.old, m.held, m.parked,
		m.lanes, m.paused, m.halted, m.queueDepth.Gauge, m.queueDepth.old, m.deadLetters, m.sendSeconds, m.deliverySeconds, m.recordErrors, m.lookupBatch, m.recordBatch, m.recordStalls, m.eventBatch} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// renamedGauge is a gauge whose former name is still exported, for one
// release, as a deprecated duplicate: Set sets both. docs/RUNBOOK.md lists
// the former names.
type renamedGauge struct {
	prometheus.Gauge
	old prometheus.Gauge
}

// newRenamedGauge returns the gauge opts describes and its duplicate under
// the former name old (same namespace and subsystem), whose help says it is
// deprecated.
func newRenamedGauge(opts prometheus.GaugeOpts, old string) renamedGauge {
	oldOpts := opts
	oldOpts.Name = old
	oldOpts.Help = "Deprecated: renamed " + prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name) + "; this name goes away in the next release. " + opts.Help
	return renamedGauge{Gauge: prometheus.NewGauge(opts), old: prometheus.NewGauge(oldOpts)}
}

// Set sets the gauge and its former name.
func (g renamedGauge) Set(v float64) {
	g.Gauge.Set(v)
	g.old.Set(v)
}
