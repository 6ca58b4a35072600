package chaos

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/tgnotify/tgnotify/internal/system"
)

// collect reads the final state into o; what cannot be read is a problem.
func (r *runner) collect(ctx context.Context, o *Observed) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	problem := func(what string, err error) {
		o.Problems = append(o.Problems, fmt.Sprintf("reading %s: %v", what, err))
	}
	o.Placements = r.pl.Snapshot()
	var err error
	if o.Outbox, err = system.ReadOutbox(ctx, r.s.dbPath); err != nil {
		problem("the outbox", err)
	}
	if r.s.cluster != nil {
		// Every node current first: a read is answered by the leaders.
		if err := r.s.cluster.WaitHealthy(ctx, healthyWait); err != nil {
			problem("the cluster's health", err)
		}
	}
	if o.Stream, err = retried(ctx, func() ([]system.StreamNotification, error) { return system.Notifications(ctx, r.js) }); err != nil {
		problem("NOTIFY", err)
	}
	if o.Events, err = retried(ctx, func() ([]system.Event, error) { return system.Events(ctx, r.js) }); err != nil {
		problem("the events", err)
	}
	if o.Dead, err = retried(ctx, func() ([]system.DeadLetter, error) { return system.DeadLetters(ctx, r.js) }); err != nil {
		problem("NOTIFY_DEAD", err)
	}
	if o.Backlogs, err = retried(ctx, func() ([]system.Backlog, error) { return system.Backlogs(ctx, r.js) }); err != nil {
		problem("the consumers", err)
	}
	if o.Crossings, err = readCrossings(r.s.sup.Dir()); err != nil {
		problem("the telegram workers' logs", err)
	}
	client := &http.Client{Timeout: time.Minute}
	rec, err := system.ReadProviders(ctx, client, r.s.destinations())
	if err != nil {
		problem("the providers' records", err)
	}
	o.Deliveries = rec.Deliveries
	if rec.TelegramStats != nil {
		o.Emulator = *rec.TelegramStats
	}
	if rec.MaxStats != nil {
		o.MaxEmulator = *rec.MaxStats
	}
	if rec.SMSStats != nil {
		o.SMSEmulator = *rec.SMSStats
	}
	r.tl.mu.Lock()
	defer r.tl.mu.Unlock()
	o.Kills = append(o.Kills, r.tl.kills...)
	o.NATSRestarts = append(o.NATSRestarts, r.tl.natsRestart...)
	o.MailpitRestarts = append(o.MailpitRestarts, r.tl.mailpit...)
	o.Outages = append(o.Outages, r.tl.outages...)
	o.ProviderFaults = append(o.ProviderFaults, r.tl.providers...)
	o.Pauses = append(o.Pauses, r.tl.pauses...)
	o.ClusterFaults = append(o.ClusterFaults, r.tl.cluster...)
	o.Blocks = r.tl.blocks
	o.Standby = r.tl.standby
	o.Problems = append(o.Problems, r.tl.problems...)
}

// delivered counts what the providers have accepted so far, for progress
// and for the drain's "nothing new" test.
func (r *runner) delivered(ctx context.Context) (int64, error) {
	var n int64
	for _, u := range []string{r.s.emulatorURL, r.s.maxURL} {
		var st struct {
			Delivered int64 `json:"delivered"`
		}
		if err := system.GetJSON(ctx, r.s.client, u+"/emulator/stats", &st); err != nil {
			return 0, err
		}
		n += st.Delivered
	}
	var sms struct {
		Created int64 `json:"created"`
	}
	if err := system.GetJSON(ctx, r.s.client, r.s.smsURL+"/emulator/stats", &sms); err != nil {
		return 0, err
	}
	var mail struct {
		Total int64 `json:"total"`
	}
	if err := system.GetJSON(ctx, r.s.client, r.s.mailpitURL+"/api/v1/messages?limit=1", &mail); err != nil {
		return 0, err
	}
	return n + sms.Created + mail.Total, nil
}

// readAttempts bounds the reads of one kind of state: a cluster answers a
// request now and then with "no responders" while it places a reader's
// consumer, and the read starts again from the beginning.
const readAttempts = 4

// retried runs read until it succeeds, at most readAttempts times a second
// apart, and returns its last answer.
func retried[T any](ctx context.Context, read func() ([]T, error)) ([]T, error) {
	var out []T
	var err error
	for attempt := 1; ; attempt++ {
		if out, err = read(); err == nil || attempt == readAttempts || ctx.Err() != nil {
			return out, err
		}
		pause(ctx, time.Second)
	}
}
