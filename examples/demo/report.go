package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
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

	// Collected at the end.
	messages    []emulator.Message
	records     []delivery.DeliveryRecord
	dead        []system.DeadLetter
	emuStats    *emulator.Stats
	workerStats *delivery.Stats
	pending     uint64
	ackPending  uint64

	// Computed by check.
	checks    []check
	latencies []time.Duration

	// complete is set once the checks ran: the report is worth printing.
	complete bool

	// Filled in after the processes are stopped.
	stopLines  []string
	stopFailed bool
	leftovers  []string
	elapsed    time.Duration
}

// collect reads the final state: what the emulator received (or, with the
// real Telegram, the worker's delivery records), the dead letters and the
// consumer.
func (r *report) collect(ctx context.Context, js natsjs.JetStream, s *stack) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	var errs []error
	if s.emulatorURL != "" {
		var msgs struct {
			Messages []emulator.Message `json:"messages"`
		}
		if err := system.GetJSON(ctx, client, s.emulatorURL+"/emulator/messages", &msgs); err != nil {
			errs = append(errs, err)
		}
		r.messages = msgs.Messages
		var es emulator.Stats
		if err := system.GetJSON(ctx, client, s.emulatorURL+"/emulator/stats", &es); err != nil {
			errs = append(errs, err)
		} else {
			r.emuStats = &es
		}
	} else {
		recs, err := system.DeliveryRecords(ctx, js)
		if err != nil {
			errs = append(errs, err)
		}
		r.records = recs
	}
	var ws delivery.Stats
	if err := system.GetJSON(ctx, client, s.workerURL+"/stats", &ws); err != nil {
		errs = append(errs, err)
	} else {
		r.workerStats = &ws
	}
	dead, err := system.DeadLetters(ctx, js)
	if err != nil {
		errs = append(errs, err)
	}
	r.dead = dead
	if info, err := system.ConsumerInfo(ctx, js); err != nil {
		errs = append(errs, err)
	} else {
		r.pending, r.ackPending = info.NumPending, uint64(info.NumAckPending)
	}
	return errors.Join(errs...)
}

// orderInText finds the order id in an "order accepted" message.
var orderInText = regexp.MustCompile(`^<b>Order (\S+) accepted</b>`)

// check evaluates the invariants over what was collected.
func (r *report) check() {
	r.checkPlacements()
	if r.cfg.real == nil {
		r.checkEmulatorDeliveries()
	} else {
		r.checkRecords()
	}
	r.checkDeadLetters()
	if r.emuStats != nil {
		c := check{ok: r.emuStats.InAnyPause == 0,
			text: fmt.Sprintf("no request inside a 429 pause: %d (429s received: %d)", r.emuStats.InAnyPause, r.emuStats.RateLimited)}
		r.checks = append(r.checks, c)
	}
	r.checks = append(r.checks, check{ok: r.pending == 0 && r.ackPending == 0,
		text: fmt.Sprintf("pipeline drained: consumer has %d pending, %d unacknowledged", r.pending, r.ackPending)})
}

func (r *report) checkPlacements() {
	var problems []string
	created, repeats := 0, 0
	for _, o := range r.orders {
		p, ok := r.placements[o.order.ID]
		switch {
		case !ok:
			problems = append(problems, o.order.ID+": never placed")
			continue
		case len(p.Errors) > 0:
			problems = append(problems, fmt.Sprintf("%s: %s", o.order.ID, strings.Join(p.Errors, "; ")))
		case p.Created != 1:
			problems = append(problems, fmt.Sprintf("%s: created %d times (201 answers), want once", o.order.ID, p.Created))
		case p.Mismatch:
			problems = append(problems, o.order.ID+": a repeated request returned another created_at")
		}
		created += p.Created
		repeats += p.Repeated
	}
	r.checks = append(r.checks, check{ok: len(problems) == 0,
		text:   fmt.Sprintf("every order created once: %d × 201 Created, %d repeats answered 200", created, repeats),
		detail: problems})
}

// expectations indexes the orders by id, and their notification keys.
func (r *report) expectations() (byID map[string]plannedOrder, byKey map[string]plannedOrder) {
	byID, byKey = map[string]plannedOrder{}, map[string]plannedOrder{}
	for _, o := range r.orders {
		if p := r.placements[o.order.ID]; p.Created == 0 {
			continue // not placed: reported by checkPlacements
		}
		byID[o.order.ID] = o
		byKey[shop.NotificationKey(o.order.ID)] = o
	}
	return byID, byKey
}

func (r *report) checkEmulatorDeliveries() {
	byID, _ := r.expectations()
	got := map[string][]emulator.Message{}
	var unexpected []string
	for _, m := range r.messages {
		sub := orderInText.FindStringSubmatch(m.Text)
		if sub == nil || byID[sub[1]].order.ID == "" {
			unexpected = append(unexpected, fmt.Sprintf("chat %d message %d: %.40q", m.ChatID, m.MessageID, m.Text))
			continue
		}
		got[sub[1]] = append(got[sub[1]], m)
	}
	var problems []string
	want, ok, group := 0, 0, 0
	for id, o := range byID {
		msgs := got[id]
		if o.want != delivered {
			if len(msgs) > 0 {
				problems = append(problems, fmt.Sprintf("%s: chat %d is dead but %d message(s) arrived", id, o.order.ChatID, len(msgs)))
			}
			continue
		}
		want++
		switch {
		case len(msgs) == 0:
			problems = append(problems, fmt.Sprintf("%s: never delivered to chat %d", id, o.wantChat))
		case len(msgs) > 1:
			problems = append(problems, fmt.Sprintf("%s: delivered %d times", id, len(msgs)))
		case msgs[0].ChatID != o.wantChat:
			problems = append(problems, fmt.Sprintf("%s: delivered to chat %d, want %d", id, msgs[0].ChatID, o.wantChat))
		default:
			ok++
			if o.order.ChatID == groupChat {
				group++
			}
			r.latencies = append(r.latencies, msgs[0].Time.Sub(r.placements[id].CreatedAt))
		}
	}
	sort.Strings(problems)
	r.checks = append(r.checks,
		check{ok: len(problems) == 0 && ok == want,
			text:   fmt.Sprintf("every deliverable order delivered exactly once: %d/%d (/emulator/messages)", ok, want),
			detail: problems},
		check{ok: len(unexpected) == 0,
			text:   fmt.Sprintf("no unexpected message: %d not from an order of this run", len(unexpected)),
			detail: unexpected},
	)
	if group > 0 {
		r.checks = append(r.checks, check{ok: true,
			text: fmt.Sprintf("migrated group: %d order(s) for group %d delivered to %d", group, groupChat, supergroupChat)})
	}
}

func (r *report) checkRecords() {
	_, byKey := r.expectations()
	var problems []string
	ok := 0
	seen := map[string]bool{}
	for _, rec := range r.records {
		o, mine := byKey[rec.Key]
		if !mine {
			continue // an earlier demo's record
		}
		seen[rec.Key] = true
		if rec.Recipient != strconv.FormatInt(o.wantChat, 10) {
			problems = append(problems, fmt.Sprintf("%s: delivered to chat %s, want %d", rec.Key, rec.Recipient, o.wantChat))
			continue
		}
		ok++
		r.latencies = append(r.latencies, rec.DeliveredAt.Sub(r.placements[o.order.ID].CreatedAt))
	}
	for key := range byKey {
		if !seen[key] {
			problems = append(problems, key+": no delivery record")
		}
	}
	sent := int64(-1)
	if r.workerStats != nil {
		sent = r.workerStats.Sent
	}
	if sent != int64(len(byKey)) {
		problems = append(problems, fmt.Sprintf("the worker sent %d messages for %d orders", sent, len(byKey)))
	}
	sort.Strings(problems)
	r.checks = append(r.checks, check{ok: len(problems) == 0,
		text:   fmt.Sprintf("every order delivered exactly once: %d/%d delivery records, %d sends", ok, len(byKey), sent),
		detail: problems})
}

func (r *report) checkDeadLetters() {
	_, byKey := r.expectations()
	perKey := map[string][]system.DeadLetter{}
	var problems []string
	for _, dl := range r.dead {
		o, mine := byKey[dl.Key]
		switch {
		case !mine:
			problems = append(problems, fmt.Sprintf("dead letter %d (%s, key %q): %s", dl.Seq, dl.Reason, dl.Key, dl.Description))
			continue
		case o.want != deadLettered:
			problems = append(problems, fmt.Sprintf("%s dead-lettered as %s (%s), want delivered", dl.Key, dl.Reason, dl.Description))
		case dl.Reason != o.wantReason:
			problems = append(problems, fmt.Sprintf("%s dead-lettered as %s, want %s", dl.Key, dl.Reason, o.wantReason))
		}
		perKey[dl.Key] = append(perKey[dl.Key], dl)
	}
	want := 0
	for key, o := range byKey {
		if o.want != deadLettered {
			continue
		}
		want++
		if n := len(perKey[key]); n != 1 {
			problems = append(problems, fmt.Sprintf("%s: %d dead letters, want 1", key, n))
		}
	}
	sort.Strings(problems)
	r.checks = append(r.checks, check{ok: len(problems) == 0,
		text:   fmt.Sprintf("dead letters match the dead chats: %d in NOTIFY_DEAD, %d expected", len(r.dead), want),
		detail: problems})
}

// deadByReason renders the dead letters counted by reason.
func (r *report) deadByReason() string {
	counts := map[string]int{}
	for _, dl := range r.dead {
		counts[dl.Reason]++
	}
	if len(counts) == 0 {
		return "none"
	}
	reasons := make([]string, 0, len(counts))
	for reason := range counts {
		reasons = append(reasons, reason)
	}
	slices.Sort(reasons)
	parts := make([]string, len(reasons))
	for i, reason := range reasons {
		parts[i] = fmt.Sprintf("%s %d", reason, counts[reason])
	}
	return strings.Join(parts, ", ")
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
	fmt.Fprintf(w, "sent to         %s\n", target)
	if r.placeTook > 0 {
		fmt.Fprintf(w, "orders          %d placed through POST /orders in %v\n", len(r.orders), r.placeTook.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "dead letters    %s (from NOTIFY_DEAD)\n", r.deadByReason())
	switch {
	case r.emuStats != nil:
		fmt.Fprintf(w, "429s received   %d (emulator stats; requests inside a pause: %d)\n", r.emuStats.RateLimited, r.emuStats.InAnyPause)
	case r.workerStats != nil:
		fmt.Fprintf(w, "429s received   %d (worker stats)\n", r.workerStats.RateLimited)
	}
	if len(r.latencies) > 0 {
		fmt.Fprintf(w, "latency         commit→delivery p50 %v, p99 %v, max %v over %d messages\n",
			system.Percentile(r.latencies, 50), system.Percentile(r.latencies, 99), system.Percentile(r.latencies, 100), len(r.latencies))
		fmt.Fprintln(w, "                (a chat gets at most 1 message a second and a group 20 a minute: a customer's")
		fmt.Fprintln(w, "                burst of orders waits its turn, and so does the whole burst at 30 a second)")
	}
	if peak, mean, span := r.sendRate(); span > 0 {
		fmt.Fprintf(w, "send rate       peak %.1f/s, mean %.1f/s over %v (Telegram's limit: %d/s per bot)\n", peak, mean, span.Round(100*time.Millisecond), telegramBotLimit)
	}
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

// sendRate returns the peak and mean delivery rate between the first and the
// last sample that saw a delivery.
func (r *report) sendRate() (peak, mean float64, span time.Duration) {
	var first, last *sample
	for i := 1; i < len(r.samples); i++ {
		prev, cur := &r.samples[i-1], &r.samples[i]
		if cur.delivered == prev.delivered {
			continue
		}
		if first == nil {
			first = prev
		}
		last = cur
		if dt := cur.at.Sub(prev.at).Seconds(); dt > 0 {
			peak = max(peak, float64(cur.delivered-prev.delivered)/dt)
		}
	}
	if first == nil {
		return 0, 0, 0
	}
	span = last.at.Sub(first.at)
	return peak, float64(last.delivered-first.delivered) / span.Seconds(), span
}
