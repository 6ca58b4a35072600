package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// check evaluates the invariants over what was collected.
func (r *report) check() {
	r.checkPlacements()
	r.checkOutcomes()
	r.checkEmails()
	r.checkRecordsAndEvents()
	if r.cfg.real != nil {
		r.checkRealSends()
	}
	if r.cfg.outageOrders > 0 {
		r.checkOutage()
	}
	r.checkShop()
	r.checkPauses()
	r.measureSilences()
	if r.cluster != nil {
		r.checks = append(r.checks, r.cluster.check())
	}
	r.checks = append(r.checks, check{ok: system.Empty(r.backlogs) && len(r.backlogs) == len(system.Channels()),
		text: fmt.Sprintf("pipeline drained: every channel's consumer empty (left: %s)", system.BacklogText(r.backlogs))})
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

// placed returns the orders the shop accepted, by notification key.
func (r *report) placed() map[string]plannedOrder {
	byKey := map[string]plannedOrder{}
	for _, o := range r.orders {
		if p := r.placements[o.order.ID]; p.Created == 0 {
			continue // not placed: reported by checkPlacements
		}
		byKey[shop.NotificationKey(o.order.ID)] = o
	}
	return byKey
}

// deliveries returns the copies at the providers. With the real Telegram,
// whose messages the demo cannot read, the telegram worker's delivery
// records stand for its copies.
func (r *report) deliveries() []system.Delivery {
	ds := slices.Clone(r.providers.Deliveries)
	if r.cfg.real != nil {
		for _, rec := range r.records {
			if rec.Channel == "telegram" {
				ds = append(ds, system.Delivery{Channel: rec.Channel, Recipient: rec.Recipient, Key: rec.Key,
					OrderID: strings.TrimSuffix(strings.TrimPrefix(rec.Key, "order:"), ":accepted"), At: rec.DeliveredAt, Ref: rec.ProviderID})
			}
		}
	}
	return ds
}

// checkOutcomes checks that every order was delivered by exactly one
// channel — one its kind allows, after every earlier channel of its route
// gave up on it with a reason — or dead-lettered on every channel of its
// route, and that nothing else reached a provider or NOTIFY_DEAD.
func (r *report) checkOutcomes() {
	byKey := r.placed()
	routes := map[string][]string{}
	for _, row := range r.outbox {
		routes[row.Key] = row.Route
	}
	r.paths = map[string]*path{}
	var unexpected []string
	for _, d := range r.deliveries() {
		o, mine := byKey[d.Key]
		if !mine {
			unexpected = append(unexpected, fmt.Sprintf("%s %s %s: %q", d.Channel, d.Recipient, d.Ref, d.Text))
			continue
		}
		r.path(o).copies = append(r.path(o).copies, d)
	}
	deadOn := map[string]map[string][]string{} // key → channel → reasons
	for _, dl := range r.dead {
		ch, _, _, err := jetstream.ParseDeadLetterSubject(dl.Subject)
		if _, mine := byKey[dl.Key]; !mine || err != nil {
			unexpected = append(unexpected, fmt.Sprintf("dead letter %d (%s, key %q): %s", dl.Seq, dl.Reason, dl.Key, dl.Description))
			continue
		}
		if deadOn[dl.Key] == nil {
			deadOn[dl.Key] = map[string][]string{}
		}
		deadOn[dl.Key][ch] = append(deadOn[dl.Key][ch], dl.Reason)
	}
	deadEvents := map[string]int{}
	for _, ev := range r.events {
		if ev.Event.Event == delivery.EventDead {
			deadEvents[ev.Key]++
		}
	}

	var problems []string
	counts := map[string]int{}
	for key, o := range byKey {
		id := o.order.ID
		p := r.path(o)
		p.route = routes[key]
		if p.route == nil {
			problems = append(problems, id+": no outbox row (or an unreadable payload)")
			continue
		}
		// Walk the route: each channel either gave up on the notification
		// (one dead letter, a reason its kind allows) or delivered it.
		for _, ch := range p.route {
			reasons := deadOn[key][ch]
			var mine []system.Delivery
			for _, d := range p.copies {
				if d.Channel == ch {
					mine = append(mine, d)
				}
			}
			switch {
			case len(reasons) > 1:
				problems = append(problems, fmt.Sprintf("%s: %d dead letters on %s (%v), want at most 1", id, len(reasons), ch, reasons))
			case len(reasons) == 1 && len(mine) > 0:
				problems = append(problems, fmt.Sprintf("%s: delivered by %s and dead-lettered there as %s", id, ch, reasons[0]))
			case len(reasons) == 1 && p.by != "":
				problems = append(problems, fmt.Sprintf("%s: dead-lettered on %s (%s) after %s delivered it", id, ch, reasons[0], p.by))
			case len(reasons) == 1:
				p.gaveUp = append(p.gaveUp, hop{ch, reasons[0]})
				if !slices.Contains(o.reasons[ch], reasons[0]) {
					problems = append(problems, fmt.Sprintf("%s (%s): %s gave up as %s, want %s", id, o.kind, ch, reasons[0], orNone(o.reasons[ch])))
				}
			case len(mine) > 0 && p.by == "":
				p.by = ch
			case len(mine) == 0 && p.by == "":
				problems = append(problems, fmt.Sprintf("%s (%s): %s neither delivered it nor gave up on it (path so far: %s)", id, o.kind, ch, p))
			}
		}
		p.dead = p.by == "" && len(p.gaveUp) == len(p.route)
		switch {
		case len(p.copies) > 1:
			problems = append(problems, fmt.Sprintf("%s: %d copies (%s), want one", id, len(p.copies), channelsOf(p.copies)))
		case len(p.copies) == 1 && !slices.Contains(p.route, p.copies[0].Channel):
			problems = append(problems, fmt.Sprintf("%s: delivered by %s, not on its route %v", id, p.copies[0].Channel, p.route))
		}
		switch {
		case o.want == delivered && p.by == "":
			problems = append(problems, fmt.Sprintf("%s (%s): never delivered (%s)", id, o.kind, p))
		case o.want == delivered && !slices.Contains(o.may, p.by):
			problems = append(problems, fmt.Sprintf("%s (%s): delivered by %s, want %s", id, o.kind, p.by, strings.Join(o.may, " or ")))
		case o.want == deadLettered && p.by != "":
			problems = append(problems, fmt.Sprintf("%s (%s): delivered by %s, want dead-lettered", id, o.kind, p.by))
		case o.want == deadLettered && deadEvents[key] != 1:
			problems = append(problems, fmt.Sprintf("%s (%s): %d dead events, want 1", id, o.kind, deadEvents[key]))
		case o.want == delivered && deadEvents[key] != 0:
			problems = append(problems, fmt.Sprintf("%s: delivered by %s but %d dead events", id, p.by, deadEvents[key]))
		}
		if len(p.copies) == 1 {
			d := p.copies[0]
			if msg := r.wrongRecipient(o, d); msg != "" {
				problems = append(problems, id+": "+msg)
			}
			r.latencies = append(r.latencies, d.At.Sub(r.placements[id].CreatedAt))
		}
		switch {
		case p.by != "":
			counts[p.by]++
		case p.dead:
			counts["dead"]++
		}
	}
	sort.Strings(problems)
	sort.Strings(unexpected)
	r.checks = append(r.checks,
		check{ok: len(problems) == 0,
			text: fmt.Sprintf("every order delivered by exactly one channel (%s), or dead-lettered on each channel of its route (%d)",
				countText(counts, system.Channels()), counts["dead"]),
			detail: problems},
		check{ok: len(unexpected) == 0,
			text:   fmt.Sprintf("nothing else reached a provider or NOTIFY_DEAD: %d unexpected", len(unexpected)),
			detail: unexpected},
	)
}

// path returns the path of o's notification, creating it.
func (r *report) path(o plannedOrder) *path {
	p := r.paths[o.order.ID]
	if p == nil {
		p = &path{}
		r.paths[o.order.ID] = p
	}
	return p
}

// wrongRecipient says what is wrong with the recipient of copy d of o, or
// "" when it went where it should.
func (r *report) wrongRecipient(o plannedOrder, d system.Delivery) string {
	switch d.Channel {
	case "telegram":
		if d.Recipient != strconv.FormatInt(o.wantChat, 10) {
			return fmt.Sprintf("delivered to chat %s, want %d", d.Recipient, o.wantChat)
		}
	case "max":
		if want := "u" + strconv.FormatInt(o.order.MaxUserID, 10); d.Recipient != want {
			return fmt.Sprintf("delivered to MAX %s, want %s", d.Recipient, want)
		}
	case "email":
		if !strings.EqualFold(d.Address, o.order.Email) {
			return fmt.Sprintf("emailed to %s, want %s", d.Address, o.order.Email)
		}
	case "sms":
		if d.Address != o.order.Phone {
			return fmt.Sprintf("SMS to %s, want %s", d.Address, o.order.Phone)
		}
	}
	return ""
}

// checkEmails checks every email Mailpit received: one per order the email
// channel delivered, its Message-ID derived from the key, its subject the
// order's.
func (r *report) checkEmails() {
	var problems []string
	n := 0
	for _, d := range r.providers.Deliveries {
		if d.Channel != "email" || d.Key == "" {
			continue
		}
		n++
		if want := email.MessageID(d.Key, mailDomain); d.Ref != want {
			problems = append(problems, fmt.Sprintf("%s: Message-ID %s, want %s", d.OrderID, d.Ref, want))
		}
		if want := "Order " + d.OrderID + " accepted"; d.Subject != want {
			problems = append(problems, fmt.Sprintf("%s: subject %q, want %q", d.OrderID, d.Subject, want))
		}
	}
	r.checks = append(r.checks, check{ok: len(problems) == 0,
		text:   fmt.Sprintf("emails in Mailpit: %d, each with the Message-ID derived from its key and the subject \"Order <id> accepted\"", n),
		detail: problems})
}

// checkRecordsAndEvents checks that the delivery records in
// notify_delivered name the channel that delivered each order, and that
// the pipeline told the application once what became of each
// (notify.events.delivered or .dead), and of each move to the next channel.
func (r *report) checkRecordsAndEvents() {
	byKey := r.placed()
	var problems []string
	records := map[string]delivery.DeliveryRecord{}
	for _, rec := range r.records {
		if _, mine := byKey[rec.Key]; mine {
			records[rec.Key] = rec
		}
	}
	final := map[string][]system.Event{}
	fallbacks := 0
	for _, ev := range r.events {
		switch ev.Event.Event {
		case delivery.EventDelivered, delivery.EventDead:
			final[ev.Key] = append(final[ev.Key], ev)
		case delivery.EventFallback:
			fallbacks++
		}
	}
	moves := 0
	for key, o := range byKey {
		p := r.paths[o.order.ID]
		if p == nil {
			continue
		}
		moves += len(p.gaveUp)
		if p.dead {
			moves-- // the last channel's give-up is a dead end, not a move
		}
		rec, ok := records[key]
		switch {
		case p.by != "" && !ok:
			problems = append(problems, o.order.ID+": delivered by "+p.by+" without a delivery record")
		case p.by != "" && rec.Channel != p.by:
			problems = append(problems, fmt.Sprintf("%s: delivered by %s, the record says %s", o.order.ID, p.by, rec.Channel))
		case p.by == "" && ok:
			problems = append(problems, fmt.Sprintf("%s: a delivery record (%s) but no copy", o.order.ID, rec.Channel))
		}
		evs := final[key]
		switch {
		case len(evs) != 1:
			problems = append(problems, fmt.Sprintf("%s: %d final events, want 1", o.order.ID, len(evs)))
		case p.by != "" && (evs[0].Event.Event != delivery.EventDelivered || evs[0].Channel != p.by):
			problems = append(problems, fmt.Sprintf("%s: event %s on %s, want delivered on %s", o.order.ID, evs[0].Event.Event, evs[0].Channel, p.by))
		}
	}
	if fallbacks != moves {
		problems = append(problems, fmt.Sprintf("%d fallback events for %d moves to the next channel", fallbacks, moves))
	}
	sort.Strings(problems)
	r.checks = append(r.checks, check{ok: len(problems) == 0,
		text: fmt.Sprintf("delivery records name the channel (%d records); one delivered or dead event per order, one fallback event per move (%d)",
			len(records), fallbacks),
		detail: problems})
}

// checkRealSends checks, with the real Telegram, that the worker made
// exactly one send per order.
func (r *report) checkRealSends() {
	sent := int64(-1)
	if ws := r.workerStats["telegram"]; ws != nil {
		sent = ws.Sent
	}
	n := int64(len(r.placed()))
	r.checks = append(r.checks, check{ok: sent == n,
		text: fmt.Sprintf("the telegram worker sent %d messages for %d orders", sent, n)})
}

// checkOutage checks what the Telegram outage must show: every order placed
// during it went by SMS, after Telegram gave up on it for taking longer
// than fallback_after, and Telegram got no copy, then or afterwards.
func (r *report) checkOutage() {
	var problems []string
	n, bySMS := 0, 0
	for _, o := range r.orders {
		if !o.outage || r.placements[o.order.ID].Created == 0 {
			continue
		}
		n++
		p := r.paths[o.order.ID]
		if p == nil {
			continue
		}
		if p.by == "sms" {
			bySMS++
		}
		for _, d := range p.copies {
			if d.Channel == "telegram" {
				problems = append(problems, fmt.Sprintf("%s: a Telegram copy at %s", o.order.ID, d.At.Format("15:04:05.000")))
			}
		}
	}
	took := r.outageEnd.Sub(r.outageStart).Round(100 * time.Millisecond)
	r.checks = append(r.checks, check{ok: len(problems) == 0 && bySMS == n && n == r.cfg.outageOrders,
		text: fmt.Sprintf("Telegram down for %v (fallback_after %s): %d/%d orders with a phone delivered by SMS, no Telegram copy",
			took, demoFallbackAfter, bySMS, r.cfg.outageOrders),
		detail: problems})
}

// checkShop checks that the shop, following the pipeline's events, shows
// each order's notification as it ended: delivered on its channel, or dead.
func (r *report) checkShop() {
	var problems []string
	ok := 0
	for _, o := range r.orders {
		p := r.paths[o.order.ID]
		st, read := r.statuses[o.order.ID]
		if p == nil || !read {
			continue
		}
		n := st.Notification
		switch {
		case p.by != "" && (n.Status != shop.StatusDelivered || n.Channel != p.by):
			problems = append(problems, fmt.Sprintf("%s: the shop says %s/%s, want delivered/%s", o.order.ID, n.Status, n.Channel, p.by))
		case p.dead && n.Status != shop.StatusDead:
			problems = append(problems, fmt.Sprintf("%s: the shop says %s, want dead", o.order.ID, n.Status))
		default:
			ok++
		}
	}
	sort.Strings(problems)
	r.checks = append(r.checks, check{ok: len(problems) == 0 && ok == len(r.placed()),
		text:   fmt.Sprintf("the shop's GET /orders/{id} shows how each notification ended: %d/%d", ok, len(r.placed())),
		detail: problems})
}

// checkPauses checks that no provider got a request inside a 429 pause it
// had announced.
func (r *report) checkPauses() {
	p := r.providers
	if p.TelegramStats == nil && p.MaxStats == nil && p.SMSStats == nil {
		return
	}
	var inPause int64
	var parts []string
	if s := p.TelegramStats; s != nil {
		inPause += s.InAnyPause
		parts = append(parts, fmt.Sprintf("Telegram %d after %d 429s", s.InAnyPause, s.RateLimited))
	}
	if s := p.MaxStats; s != nil {
		inPause += s.SentInPause
		parts = append(parts, fmt.Sprintf("MAX %d after %d", s.SentInPause, s.RateLimited))
	}
	if s := p.SMSStats; s != nil {
		inPause += s.InPause
		parts = append(parts, fmt.Sprintf("SMS %d after %d", s.InPause, s.RateLimited))
	}
	r.checks = append(r.checks, check{ok: inPause == 0,
		text: fmt.Sprintf("no request inside a 429 pause: %d (%s)", inPause, strings.Join(parts, ", "))})
}

// deadByReason renders the dead letters counted by reason.
func (r *report) deadByReason() string {
	counts := map[string]int{}
	for _, dl := range r.dead {
		counts[dl.Reason]++
	}
	return countText(counts, nil)
}

// countText renders counts by name: first the names of order (those with a
// count), then the others sorted; "none" when empty.
func countText(counts map[string]int, order []string) string {
	var parts []string
	done := map[string]bool{}
	for _, k := range order {
		done[k] = true
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if !done[k] && counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func channelsOf(ds []system.Delivery) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Channel)
	}
	return strings.Join(s, ", ")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no give-up"
	}
	return strings.Join(s, " or ")
}

// measureSilences finds the burst's stretches without any delivery while a
// notification waited: from the start of the burst to the Telegram outage
// (during which waiting for fallback_after is the point).
func (r *report) measureSilences() {
	var deliveries []time.Time
	for _, d := range r.deliveries() {
		deliveries = append(deliveries, d.At)
	}
	var waits []system.Wait
	for _, o := range r.orders {
		p := r.paths[o.order.ID]
		pl, placed := r.placements[o.order.ID]
		if p == nil || !placed || pl.CreatedAt.IsZero() || len(p.copies) == 0 {
			continue
		}
		first := p.copies[0].At
		for _, c := range p.copies[1:] {
			if c.At.Before(first) {
				first = c.At
			}
		}
		waits = append(waits, system.Wait{From: pl.CreatedAt, To: first})
	}
	r.silences = system.Silences(waits, deliveries, r.burstStart, r.outageStart)
}
