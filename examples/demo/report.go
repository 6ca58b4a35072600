package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// check is one invariant and whether it held.
type check struct {
	ok     bool
	text   string
	detail []string
}

// report gathers what happened and what was checked.
type report struct {
	cfg        *config
	orders     []plannedOrder
	placements map[string]system.Placement
	samples    []sample
	placedAt   time.Time
	placeTook  time.Duration
	started    int
	failures   []procs.Failure
	fatal      string
	// outageStart and outageEnd bound the Telegram outage (zero without).
	outageStart, outageEnd time.Time
	// burstStart is when the burst's placing began.
	burstStart time.Time
	// cluster is what -cluster did to NATS during the burst (nil on one
	// server).
	cluster *clusterLog

	// Collected at the end.
	providers   system.ProviderRecords
	records     []delivery.DeliveryRecord
	dead        []system.DeadLetter
	events      []system.Event
	outbox      []system.OutboxRow
	statuses    map[string]shop.PlacedOrder // GET /orders/{id}, by order id
	workerStats map[string]*delivery.Stats  // by channel
	backlogs    []system.Backlog

	// Computed by check.
	checks    []check
	latencies []time.Duration
	// silences are the burst's stretches without any delivery while a
	// notification waited, longest first.
	silences []system.Silence
	// paths says how each order's notification went, by order id.
	paths map[string]*path

	// complete is set once the checks ran: the report is worth printing.
	complete bool

	// Filled in after the processes are stopped.
	stopLines  []string
	stopFailed bool
	leftovers  []string
	elapsed    time.Duration
}

// path is what became of one order's notification.
type path struct {
	route []string
	// gaveUp are the channels that gave up on it, in route order, with
	// their reasons.
	gaveUp []hop
	// copies are its copies at the providers.
	copies []system.Delivery
	// by is the channel that delivered it ("" when none did).
	by   string
	dead bool
}

// hop is a channel giving up on a notification.
type hop struct {
	channel, reason string
}

// String renders the path, e.g. "telegram: blocked → max: blocked → email".
func (p *path) String() string {
	var parts []string
	for _, h := range p.gaveUp {
		parts = append(parts, h.channel+": "+h.reason)
	}
	switch {
	case p.by != "":
		parts = append(parts, p.by)
	case p.dead:
		parts = append(parts, "dead")
	}
	return strings.Join(parts, " → ")
}

// collect reads the final state: what every provider accepted, the
// delivery records, the dead letters, the events, the outbox, the shop's
// view of each order and the consumers.
func (r *report) collect(ctx context.Context, js natsjs.JetStream, s *stack) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	var errs []error
	var err error
	r.providers, err = system.ReadProviders(ctx, client, s.destinations())
	errs = append(errs, err)
	r.records, err = system.DeliveryRecords(ctx, js)
	errs = append(errs, err)
	r.dead, err = system.DeadLetters(ctx, js)
	errs = append(errs, err)
	r.events, err = system.Events(ctx, js)
	errs = append(errs, err)
	r.outbox, err = system.ReadOutbox(ctx, s.shopDB)
	errs = append(errs, err)
	r.backlogs, err = system.Backlogs(ctx, js)
	errs = append(errs, err)
	r.workerStats = map[string]*delivery.Stats{}
	for ch, u := range s.workerURLs {
		var ws delivery.Stats
		if err := system.GetJSON(ctx, client, u+"/stats", &ws); err != nil {
			errs = append(errs, err)
			continue
		}
		r.workerStats[ch] = &ws
	}
	errs = append(errs, r.collectStatuses(ctx, js, client, s.shopURL))
	return errors.Join(errs...)
}

// collectStatuses waits (a few seconds at most) until the shop has applied
// every event, then reads each order back with GET /orders/{id}.
func (r *report) collectStatuses(ctx context.Context, js natsjs.JetStream, client *http.Client, shopURL string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := js.Consumer(ctx, jetstream.StreamNotify, shop.EventsConsumer)
		if err == nil {
			info, err := c.Info(ctx)
			if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
				break
			}
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	r.statuses = map[string]shop.PlacedOrder{}
	var mu sync.Mutex
	var errs []error
	ids := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				var p shop.PlacedOrder
				err := system.GetJSON(ctx, client, shopURL+"/orders/"+url.PathEscape(id), &p)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					r.statuses[id] = p
				}
				mu.Unlock()
			}
		})
	}
	for _, o := range r.orders {
		if r.placements[o.order.ID].Created > 0 {
			ids <- o.order.ID
		}
	}
	close(ids)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("reading %d orders back from the shop: %w", len(errs), errs[0])
	}
	return nil
}

// passed reports whether every invariant held.
func (r *report) passed() bool {
	if r.fatal != "" || r.stopFailed || len(r.leftovers) > 0 || len(r.failures) > 0 {
		return false
	}
	for _, c := range r.checks {
		if !c.ok {
			return false
		}
	}
	return len(r.checks) > 0
}

// maxDetail bounds the lines printed under a failed check.
const maxDetail = 10

// print writes the report.
func (r *report) print(w io.Writer) {
	r.printChecks(w)
	r.printEnd(w)
}

// printChecks writes what happened and the checks of the pipeline.
func (r *report) printChecks(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "================ tgnotify demo report ================")
	target := "the Bot API emulator (Telegram's limits on)"
	if r.cfg.real != nil {
		target = fmt.Sprintf("the real Telegram, chat %d", r.cfg.real.chatID)
	}
	fmt.Fprintf(w, "sent to         %s; MAX and SMS (Twilio) emulators; Mailpit (SMTP)\n", target)
	if r.placeTook > 0 {
		fmt.Fprintf(w, "orders          %d placed through POST /orders in %v", len(r.orders)-r.cfg.outageOrders, r.placeTook.Round(time.Millisecond))
		if r.cfg.outageOrders > 0 {
			fmt.Fprintf(w, "; %d more while Telegram was down", r.cfg.outageOrders)
		}
		fmt.Fprintln(w)
	}
	r.printPaths(w)
	fmt.Fprintf(w, "dead letters    %s (from NOTIFY_DEAD: one per channel that gave up)\n", r.deadByReason())
	if s := r.providers.TelegramStats; s != nil {
		fmt.Fprintf(w, "429s received   %d (Telegram emulator; requests inside a pause: %d)\n", s.RateLimited, s.InAnyPause)
	} else if ws := r.workerStats["telegram"]; ws != nil {
		fmt.Fprintf(w, "429s received   %d (telegram worker)\n", ws.RateLimited)
	}
	if len(r.latencies) > 0 {
		fmt.Fprintf(w, "latency         commit→delivery p50 %v, p99 %v, max %v over %d notifications\n",
			system.Percentile(r.latencies, 50), system.Percentile(r.latencies, 99), system.Percentile(r.latencies, 100), len(r.latencies))
		fmt.Fprintln(w, "                (a chat gets at most 1 message a second and a group 20 a minute: a customer's")
		fmt.Fprintln(w, "                burst of orders waits its turn, and so does the whole burst at 30 a second)")
	}
	if len(r.silences) > 0 {
		l := r.silences[0]
		fmt.Fprintf(w, "silence         longest %v without any delivery while orders waited during the burst (%.1fs–%.1fs into it, %d waiting)\n",
			l.Duration().Round(time.Millisecond), l.From.Sub(r.burstStart).Seconds(), l.To.Sub(r.burstStart).Seconds(), l.Waiting)
	}
	if r.cluster != nil {
		r.cluster.print(w)
	}
	if peak, mean, span := r.sendRate(); span > 0 {
		fmt.Fprintf(w, "send rate       Telegram peak %.1f/s, mean %.1f/s over %v (Telegram's limit: %d/s per bot)\n", peak, mean, span.Round(100*time.Millisecond), telegramBotLimit)
	}
	r.printShop(w)
	fmt.Fprintln(w, "checks")
	for _, c := range r.checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  [%s] %s\n", mark, c.text)
		for i, d := range c.detail {
			if i == maxDetail {
				fmt.Fprintf(w, "         … and %d more\n", len(c.detail)-maxDetail)
				break
			}
			fmt.Fprintf(w, "         %s\n", d)
		}
	}
}

// printPaths writes the deliveries per channel and, for each kind of order,
// the ways its notifications went.
func (r *report) printPaths(w io.Writer) {
	byChannel := map[string]int{}
	for _, rec := range r.records {
		byChannel[rec.Channel]++
	}
	fmt.Fprintf(w, "deliveries      %s (notify_delivered records, by channel)\n", countText(byChannel, system.Channels()))
	ways := map[kind]map[string]int{}
	var kinds []kind
	for _, o := range r.orders {
		p := r.paths[o.order.ID]
		if p == nil {
			continue
		}
		if ways[o.kind] == nil {
			ways[o.kind] = map[string]int{}
			kinds = append(kinds, o.kind)
		}
		ways[o.kind][p.String()]++
	}
	fmt.Fprintln(w, "by kind         what became of each kind of order (channel: reason it gave up → …):")
	for _, k := range kinds {
		var parts []string
		for _, way := range slices.Sorted(maps.Keys(ways[k])) {
			parts = append(parts, fmt.Sprintf("%s ×%d", way, ways[k][way]))
		}
		fmt.Fprintf(w, "                %-50s %s\n", string(k)+":", strings.Join(parts, "; "))
	}
}

// printShop shows, for one order of each kind, what the shop's
// GET /orders/{id} says of its notification.
func (r *report) printShop(w io.Writer) {
	if len(r.statuses) == 0 {
		return
	}
	fmt.Fprintln(w, "the shop        GET /orders/{id} → \"notification\", one order of each kind:")
	seen := map[kind]bool{}
	for _, o := range r.orders {
		st, ok := r.statuses[o.order.ID]
		if !ok || seen[o.kind] {
			continue
		}
		seen[o.kind] = true
		n := st.Notification
		line := fmt.Sprintf(`{"status":%q`, n.Status)
		if n.Channel != "" {
			line += fmt.Sprintf(`,"channel":%q`, n.Channel)
		}
		if n.Reason != "" {
			line += fmt.Sprintf(`,"reason":%q`, n.Reason)
		}
		if n.At != nil {
			line += fmt.Sprintf(`,"at":%q`, n.At.Format("15:04:05.000"))
		}
		way := ""
		if p := r.paths[o.order.ID]; p != nil {
			way = ": " + p.String()
		}
		fmt.Fprintf(w, "                %-12s %s}  (%s%s)\n", o.order.ID, line, o.kind, way)
	}
}

// printEnd writes how the processes ended and the result.
func (r *report) printEnd(w io.Writer) {
	procOK := len(r.failures) == 0 && !r.stopFailed && len(r.leftovers) == 0
	mark := "ok  "
	if !procOK {
		mark = "FAIL"
	}
	fmt.Fprintf(w, "  [%s] %d processes: no unexpected exit, all stopped cleanly, none left running\n", mark, r.started)
	for _, f := range r.failures {
		fmt.Fprintf(w, "         %s\n", f.Error())
	}
	for _, l := range r.stopLines {
		fmt.Fprintf(w, "         %s\n", l)
	}
	for _, l := range r.leftovers {
		fmt.Fprintf(w, "         still running: %s\n", l)
	}
	if r.fatal != "" {
		fmt.Fprintf(w, "  [FAIL] %s\n", r.fatal)
	}
	result := "PASS"
	if !r.passed() {
		result = "FAIL"
	}
	fmt.Fprintf(w, "RESULT: %s in %v\n", result, r.elapsed.Round(100*time.Millisecond))
}

// sendRate returns the peak and mean Telegram delivery rate between the
// first and the last sample that saw one.
func (r *report) sendRate() (peak, mean float64, span time.Duration) {
	var first, last *sample
	for i := 1; i < len(r.samples); i++ {
		prev, cur := &r.samples[i-1], &r.samples[i]
		if cur.telegram == prev.telegram {
			continue
		}
		if first == nil {
			first = prev
		}
		last = cur
		if dt := cur.at.Sub(prev.at).Seconds(); dt > 0 {
			peak = max(peak, float64(cur.telegram-prev.telegram)/dt)
		}
	}
	if first == nil {
		return 0, 0, 0
	}
	span = last.at.Sub(first.at)
	return peak, float64(last.telegram-first.telegram) / span.Seconds(), span
}
