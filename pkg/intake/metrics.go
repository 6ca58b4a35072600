package intake

import "github.com/prometheus/client_golang/prometheus"

// metrics are the intake's Prometheus metrics, registered on an injected
// registry. docs/RUNBOOK.md says what each means.
type metrics struct {
	updates  *prometheus.CounterVec
	errors   *prometheus.CounterVec
	polling  prometheus.Gauge
	conflict prometheus.Gauge
	acquired prometheus.Counter
	requests *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "tgnotify", "intake"
	m := &metrics{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "updates_total",
			Help: "Bot updates taken in, by kind (my_chat_member, start, other) and result (dead, revived, unchanged, ignored)."}, []string{"kind", "result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Failures of the update intake, by operation: poll (getUpdates), apply (marking a chat), lease (the poller's lease and offset), register (setWebhook)."}, []string{"op"}),
		polling: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "polling",
			Help: "1 while this worker holds the intake lease and polls getUpdates; 0 on a standby."}),
		conflict: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "conflict",
			Help: "1 while Telegram answers getUpdates with 409 Conflict: a webhook is set, or another program polls the bot."}),
		acquired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "lease_acquired_total",
			Help: "Times this worker took the intake lease (at start, or from a poller that stopped renewing it)."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "webhook_requests_total",
			Help: "Requests to the webhook endpoint, by answer: 200, 400, 401 (no or a wrong secret), 405, 500 (to be posted again)."}, []string{"code"}),
	}
	for _, c := range []prometheus.Collector{m.updates, m.errors, m.polling, m.conflict, m.acquired, m.requests} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
