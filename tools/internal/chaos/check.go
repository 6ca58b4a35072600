package chaos

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// Observed is everything the checks look at: the plan, what the shop
// answered, the final state of the outbox, the streams, the consumer and the
// emulator, and what the fault runner did.
type Observed struct {
	Plan       Plan
	Placements map[string]system.Placement
	Outbox     []OutboxRow
	Stream     []StreamMsg
	Dead       []system.DeadLetter
	Messages   []emulator.Message
	Emulator   emulator.Stats
	// Pending and AckPending are the consumer's counts at the end.
	Pending, AckPending uint64
	Kills               []KillRecord
	NATSRestarts        []NATSRestart
	Outages             []OutageRecord
	Pauses              []PauseRecord
	Blocks              map[int64]time.Time
	Standby             int
	Worker              WorkerSettings
	// Problems are fault actions that could not be carried out and
	// collection errors; Failures are processes that ended by themselves.
	Problems []string
	Failures []string
	// Drain is empty when the pipeline drained in time.
	Drain string
	// StopLines and StopFailed describe the final graceful stop;
	// Leftovers are processes still running after it.
	StopLines  []string
	StopFailed bool
	Leftovers  []string
}

// Check is one invariant and whether it held.
type Check struct {
	OK     bool
	Text   string
	Detail []string
}

// Duplicate causes.
const (
	// CauseAnswerDropped: the first copy was delivered and its answer
	// dropped (deliver-drop), so the worker retried.
	CauseAnswerDropped = "answer dropped by Telegram (deliver-drop)"
	// CauseWorkerKilled: a worker was SIGKILLed after Telegram accepted the
	// first copy and before the copy was recorded: the window the design
	// cannot close.
	CauseWorkerKilled = "worker SIGKILLed between the copies (accepted, not yet recorded)"
)

// Figures are the numbers of a run.
type Figures struct {
	Orders, Accepted, Posts, Repeats int
	Chats                            int
	PublisherKills, WorkerKills      int
	KillsBy                          map[string]int
	NATSRestarts, HardNATSRestarts   int
	Outages                          map[string]int
	Pauses, Blocks, StandbyStarts    int
	Delivered, DeliveredOnce         int
	DeadByReason                     map[string]int
	StreamMsgs                       int
	// Duplicates counts extra copies at Telegram by cause. KillGaps are,
	// for each explained by a worker kill, the kill's time minus the
	// accepted copy's (negative: the request was on the wire as the worker
	// died).
	Duplicates map[string]int
	KillGaps   []time.Duration
	// DuplicateLog describes every extra copy with its cause.
	DuplicateLog []string
	// DeliveredAndDead counts orders delivered and later dead-lettered
	// (the answer of the delivery was lost), by cause.
	DeliveredAndDead map[string]int
	OrderViolations  int
	Latency          []time.Duration // commit → first copy at Telegram
	OutageFailing    int64
	OutageBound      int64
	Emulator         emulator.Stats
}

// Result is the outcome of the checks.
type Result struct {
	Checks  []Check
	Figures Figures
}

// Passed reports whether every check held.
func (r Result) Passed() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// orderInText finds the order id in an "order accepted" message.
var orderInText = regexp.MustCompile(`^<b>Order (\S+) accepted</b>`)

// expectation is what must become of one accepted order.
type expectation struct {
	order  PlannedOrder
	key    string
	chat   int64 // the order's chat
	target int64 // where its message must arrive
	// deadReason, when set, is the only acceptable outcome: one dead
	// letter with that reason and no message.
	deadReason string
	// blockedAt is set for a chat blocked during the run: delivered before
	// it, or dead-lettered as blocked.
	blockedAt time.Time
	outboxID  int64
	createdAt time.Time
}

// outcome is what became of one order.
type outcome struct {
	copies []emulator.Message
	dead   []system.DeadLetter
}

// Evaluate runs every check over o.
func Evaluate(o Observed) Result {
	var r Result
	f := &r.Figures
	f.Orders = len(o.Plan.Orders)
	f.Emulator = o.Emulator
	f.KillsBy = map[string]int{}
	for _, k := range o.Kills {
		f.KillsBy[k.Process]++
		if k.Process == namePublisher {
			f.PublisherKills++
		} else {
			f.WorkerKills++
		}
	}
	f.NATSRestarts = len(o.NATSRestarts)
	for _, n := range o.NATSRestarts {
		if n.Hard {
			f.HardNATSRestarts++
		}
	}
	f.Outages = map[string]int{}
	for _, x := range o.Outages {
		f.Outages[string(x.Outage.Mode)]++
	}
	f.Pauses, f.Blocks, f.StandbyStarts = len(o.Pauses), len(o.Blocks), o.Standby
	f.StreamMsgs = len(o.Stream)

	exp := r.checkPlacements(o)
	r.checkOutbox(o, exp)
	r.checkStream(o, exp)
	outcomes := r.checkOutcomes(o, exp)
	r.checkDuplicates(o, exp, outcomes)
	r.checkOrder(exp, outcomes)
	r.checkPauses(o)
	r.checkBreaker(o)
	r.checkPending(o)
	r.checkProcesses(o)
	return r
}

func (r *Result) add(ok bool, text string, detail []string) {
	sort.Strings(detail)
	r.Checks = append(r.Checks, Check{OK: ok, Text: text, Detail: detail})
}

// checkPlacements checks that every order was created exactly once and
// returns the expectations of the accepted ones, by key.
func (r *Result) checkPlacements(o Observed) map[string]*expectation {
	f := &r.Figures
	dead := startDead()
	exp := map[string]*expectation{}
	var problems []string
	chats := map[int64]bool{}
	for _, po := range o.Plan.Orders {
		p, ok := o.Placements[po.Order.ID]
		switch {
		case !ok:
			problems = append(problems, po.Order.ID+": never placed")
			continue
		case len(p.Errors) > 0:
			problems = append(problems, fmt.Sprintf("%s: %s", po.Order.ID, strings.Join(p.Errors, "; ")))
		case p.Created != 1:
			problems = append(problems, fmt.Sprintf("%s: created %d times (201 answers), want once", po.Order.ID, p.Created))
		case p.Mismatch:
			problems = append(problems, po.Order.ID+": a repeated request returned another created_at")
		}
		f.Posts += p.Created + p.Repeated
		f.Repeats += p.Repeated
		if p.Created == 0 {
			continue
		}
		f.Accepted++
		chat := po.Order.ChatID
		chats[chat] = true
		e := &expectation{order: po, key: shop.NotificationKey(po.Order.ID), chat: chat, target: chat, deadReason: dead[chat]}
		if chat == migratedGroup {
			e.target = supergroup
		}
		if at, ok := o.Blocks[chat]; ok {
			e.blockedAt = at
		}
		exp[e.key] = e
	}
	f.Chats = len(chats)
	r.add(len(problems) == 0,
		fmt.Sprintf("every order created exactly once: %d accepted of %d, %d repeated requests answered 200", f.Accepted, f.Orders, f.Repeats),
		problems)
	return exp
}

// checkOutbox checks that the outbox holds exactly the accepted orders and
// that every row was published.
func (r *Result) checkOutbox(o Observed, exp map[string]*expectation) {
	var problems []string
	seen := map[string]bool{}
	for _, row := range o.Outbox {
		e, ok := exp[row.Key]
		if !ok {
			problems = append(problems, fmt.Sprintf("outbox row %d has key %q of no accepted order", row.ID, row.Key))
			continue
		}
		seen[row.Key] = true
		e.outboxID, e.createdAt = row.ID, row.CreatedAt
		if row.Chat != e.chat {
			problems = append(problems, fmt.Sprintf("outbox row %d (%s) is for chat %d, want %d", row.ID, row.Key, row.Chat, e.chat))
		}
	}
	for key := range exp {
		if !seen[key] {
			problems = append(problems, key+": accepted but not in the outbox")
		}
	}
	pending := pendingRows(o.Outbox)
	if pending > 0 {
		problems = append(problems, fmt.Sprintf("%d outbox rows still pending (not published)", pending))
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("outbox: one row per accepted order, all published (%d rows, backlog %d)", len(o.Outbox), pending), problems)
}

// checkStream checks that NOTIFY holds every accepted notification exactly
// once, and each chat's in outbox (commit) order.
func (r *Result) checkStream(o Observed, exp map[string]*expectation) {
	byKey := map[string][]StreamMsg{}
	var problems []string
	for _, m := range o.Stream {
		if _, ok := exp[m.Key]; !ok {
			problems = append(problems, fmt.Sprintf("NOTIFY #%d has key %q of no accepted order", m.Seq, m.Key))
			continue
		}
		byKey[m.Key] = append(byKey[m.Key], m)
	}
	byChat := map[int64][]*expectation{}
	for key, e := range exp {
		n := len(byKey[key])
		switch {
		case n == 0:
			problems = append(problems, key+": accepted but never stored in NOTIFY")
		case n > 1:
			problems = append(problems, fmt.Sprintf("%s: stored %d times in NOTIFY (sequences %v)", key, n, seqs(byKey[key])))
		}
		if n > 0 {
			byChat[e.chat] = append(byChat[e.chat], e)
		}
	}
	reordered := 0
	for chat, es := range byChat {
		slices.SortFunc(es, func(a, b *expectation) int { return int(a.outboxID - b.outboxID) })
		for i := 1; i < len(es); i++ {
			a, b := byKey[es[i-1].key][0], byKey[es[i].key][0]
			if a.Seq > b.Seq {
				reordered++
				problems = append(problems, fmt.Sprintf("chat %d: %s (outbox #%d) stored at #%d after %s (outbox #%d) at #%d",
					chat, es[i-1].key, es[i-1].outboxID, a.Seq, es[i].key, es[i].outboxID, b.Seq))
			}
		}
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("NOTIFY: every accepted notification stored once, each chat's in commit order (%d messages, %d reordered)", len(o.Stream), reordered),
		problems)
}

func seqs(ms []StreamMsg) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

// checkOutcomes checks that every accepted order was delivered to its chat
// or dead-lettered with the reason its chat calls for, and nothing else
// reached Telegram or NOTIFY_DEAD.
func (r *Result) checkOutcomes(o Observed, exp map[string]*expectation) map[string]*outcome {
	f := &r.Figures
	f.DeadByReason = map[string]int{}
	out := map[string]*outcome{}
	var problems, unexpected []string
	for _, m := range o.Messages {
		sub := orderInText.FindStringSubmatch(m.Text)
		key := ""
		if sub != nil {
			key = shop.NotificationKey(sub[1])
		}
		if _, ok := exp[key]; !ok {
			unexpected = append(unexpected, fmt.Sprintf("chat %d message %d: %.50q", m.ChatID, m.MessageID, m.Text))
			continue
		}
		oc := out[key]
		if oc == nil {
			oc = &outcome{}
			out[key] = oc
		}
		oc.copies = append(oc.copies, m)
	}
	for _, dl := range o.Dead {
		f.DeadByReason[dl.Reason]++
		if _, ok := exp[dl.Key]; !ok {
			unexpected = append(unexpected, fmt.Sprintf("dead letter #%d (%s) with key %q of no accepted order: %s", dl.Seq, dl.Reason, dl.Key, dl.Description))
			continue
		}
		oc := out[dl.Key]
		if oc == nil {
			oc = &outcome{}
			out[dl.Key] = oc
		}
		oc.dead = append(oc.dead, dl)
	}
	for key, e := range exp {
		oc := out[key]
		if oc == nil {
			problems = append(problems, fmt.Sprintf("%s (chat %d): neither delivered nor dead-lettered", key, e.chat))
			continue
		}
		for _, m := range oc.copies {
			if m.ChatID != e.target {
				problems = append(problems, fmt.Sprintf("%s: delivered to chat %d, want %d", key, m.ChatID, e.target))
			}
		}
		if len(oc.copies) > 0 {
			f.Delivered++
			if len(oc.copies) == 1 && len(oc.dead) == 0 {
				f.DeliveredOnce++
			}
			f.Latency = append(f.Latency, oc.copies[0].Time.Sub(e.createdAt))
		}
		switch {
		case len(oc.dead) > 1:
			problems = append(problems, fmt.Sprintf("%s: %d dead letters, want at most 1", key, len(oc.dead)))
		case e.deadReason != "":
			if len(oc.copies) > 0 {
				problems = append(problems, fmt.Sprintf("%s: chat %d is %s but %d message(s) arrived", key, e.chat, e.deadReason, len(oc.copies)))
			}
			if len(oc.dead) == 1 && oc.dead[0].Reason != e.deadReason {
				problems = append(problems, fmt.Sprintf("%s: dead-lettered as %s, want %s", key, oc.dead[0].Reason, e.deadReason))
			}
			if len(oc.dead) == 0 {
				problems = append(problems, fmt.Sprintf("%s: chat %d is %s but there is no dead letter", key, e.chat, e.deadReason))
			}
		case len(oc.dead) == 1:
			want := "max_attempts" // a healthy chat may exhaust its attempts in a long outage
			if !e.blockedAt.IsZero() {
				want = "blocked"
			}
			if reason := oc.dead[0].Reason; reason != want && reason != "max_attempts" {
				problems = append(problems, fmt.Sprintf("%s (chat %d): dead-lettered as %s (%s)", key, e.chat, reason, oc.dead[0].Description))
			}
		}
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("every accepted order delivered or dead-lettered with its chat's reason: %d delivered, %d dead-lettered (%s)",
			f.Delivered, len(o.Dead), reasons(f.DeadByReason)),
		problems)
	r.add(len(unexpected) == 0, fmt.Sprintf("nothing else reached Telegram or NOTIFY_DEAD: %d unexpected", len(unexpected)), unexpected)
	return out
}

func reasons(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// killSlack is how much earlier than a copy's acceptance a kill may be
// recorded and still explain a second copy: a request already on the wire
// when its worker died is still accepted, as at Telegram (the emulator, like
// a server, does not notice the closed connection before it reads the
// request), after its simulated latency (25±15 ms) and any scheduling delay
// of a loaded machine. A slow outage adds its delay to that (inFlight).
const killSlack = 500 * time.Millisecond

// inFlight returns how long before its acceptance at t a request may have
// been sent: killSlack, plus the delay of a slow outage running then.
func inFlight(t time.Time, outages []OutageRecord) time.Duration {
	d := killSlack
	for _, o := range outages {
		if o.Outage.Mode == emulator.FaultSlow && !t.Before(o.Start) && !t.After(o.End.Add(o.Outage.Delay)) {
			d = max(d, killSlack+o.Outage.Delay)
		}
	}
	return d
}

// explain finds why a copy was followed by another delivery attempt of the
// same notification: its answer was dropped, or a worker was killed after it
// was sent (and before before, when not zero). gap is the kill's time minus
// the copy's: negative when the request was on the wire as its worker died.
func explain(first emulator.Message, before time.Time, kills []KillRecord, outages []OutageRecord) (cause string, gap time.Duration) {
	if first.ResponseDropped {
		return CauseAnswerDropped, 0
	}
	sent := first.Time.Add(-inFlight(first.Time, outages))
	for _, k := range kills {
		if k.Process == namePublisher || k.At.Before(sent) {
			continue
		}
		if !before.IsZero() && k.At.After(before) {
			continue
		}
		return CauseWorkerKilled, k.At.Sub(first.Time)
	}
	return "", 0
}

// checkDuplicates classifies every extra copy at Telegram, and every order
// both delivered and dead-lettered, by cause; one without a cause is a
// violation.
func (r *Result) checkDuplicates(o Observed, exp map[string]*expectation, out map[string]*outcome) {
	f := &r.Figures
	f.Duplicates, f.DeliveredAndDead = map[string]int{}, map[string]int{}
	kills := slices.Clone(o.Kills)
	slices.SortFunc(kills, func(a, b KillRecord) int { return a.At.Compare(b.At) })
	var problems []string
	extra := 0
	for key, oc := range out {
		if _, ok := exp[key]; !ok {
			continue
		}
		for i := 1; i < len(oc.copies); i++ {
			extra++
			prev, cur := oc.copies[i-1], oc.copies[i]
			cause, gap := explain(prev, cur.Time, kills, o.Outages)
			if cause == "" {
				problems = append(problems, fmt.Sprintf("%s: copy %d at %s and copy %d at %s (chat %d), no dropped answer or worker kill between them",
					key, i, prev.Time.Format("15:04:05.000"), i+1, cur.Time.Format("15:04:05.000"), cur.ChatID))
				continue
			}
			f.Duplicates[cause]++
			f.DuplicateLog = append(f.DuplicateLog, fmt.Sprintf("%s chat %d: copies at %s and %s: %s",
				key, cur.ChatID, prev.Time.Format("15:04:05.000"), cur.Time.Format("15:04:05.000"), cause))
			if cause == CauseWorkerKilled {
				f.KillGaps = append(f.KillGaps, gap)
				f.DuplicateLog[len(f.DuplicateLog)-1] += fmt.Sprintf(" (kill %+v from the first copy)", gap.Round(time.Millisecond))
			}
		}
		if len(oc.copies) > 0 && len(oc.dead) > 0 {
			last := oc.copies[len(oc.copies)-1]
			cause, gap := explain(last, oc.dead[0].DeadAt, kills, o.Outages)
			if cause == "" {
				problems = append(problems, fmt.Sprintf("%s: delivered at %s and dead-lettered as %s at %s, no dropped answer or worker kill between",
					key, last.Time.Format("15:04:05.000"), oc.dead[0].Reason, oc.dead[0].DeadAt.Format("15:04:05.000")))
				continue
			}
			f.DeliveredAndDead[cause]++
			f.DuplicateLog = append(f.DuplicateLog, fmt.Sprintf("%s chat %d: delivered at %s, dead-lettered as %s at %s: %s",
				key, last.ChatID, last.Time.Format("15:04:05.000"), oc.dead[0].Reason, oc.dead[0].DeadAt.Format("15:04:05.000"), cause))
			if cause == CauseWorkerKilled {
				f.KillGaps = append(f.KillGaps, gap)
			}
		}
	}
	explained := 0
	for _, n := range f.Duplicates {
		explained += n
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("duplicates at Telegram only where explained: %d extra copies, %d explained (%d answer dropped, %d worker killed)",
			extra, explained, f.Duplicates[CauseAnswerDropped], f.Duplicates[CauseWorkerKilled]),
		problems)
}

// checkOrder checks that each chat received its orders in commit order
// (the first copy of each), and that a chat blocked during the run has its
// deliveries before its dead letters.
func (r *Result) checkOrder(exp map[string]*expectation, out map[string]*outcome) {
	byChat := map[int64][]*expectation{}
	for _, e := range exp {
		byChat[e.chat] = append(byChat[e.chat], e)
	}
	var problems []string
	for chat, es := range byChat {
		slices.SortFunc(es, func(a, b *expectation) int { return int(a.outboxID - b.outboxID) })
		var last *expectation
		var lastTime time.Time
		var firstDead *expectation
		for _, e := range es {
			oc := out[e.key]
			if oc == nil {
				continue
			}
			if len(oc.copies) == 0 {
				if len(oc.dead) > 0 && firstDead == nil && !e.blockedAt.IsZero() {
					firstDead = e
				}
				continue
			}
			t := oc.copies[0].Time
			if last != nil && t.Before(lastTime) {
				r.Figures.OrderViolations++
				problems = append(problems, fmt.Sprintf("chat %d: %s (outbox #%d) arrived at %s, before %s (outbox #%d) at %s",
					chat, e.key, e.outboxID, t.Format("15:04:05.000"), last.key, last.outboxID, lastTime.Format("15:04:05.000")))
			}
			if firstDead != nil && len(oc.dead) == 0 && !e.blockedAt.IsZero() {
				r.Figures.OrderViolations++
				problems = append(problems, fmt.Sprintf("chat %d: %s (outbox #%d) delivered after the earlier %s (outbox #%d) was dead-lettered",
					chat, e.key, e.outboxID, firstDead.key, firstDead.outboxID))
			}
			last, lastTime = e, t
		}
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("every chat received its messages in commit order: %d chats, %d violations", len(byChat), r.Figures.OrderViolations),
		problems)
}

// checkPauses checks that no request was sent inside an announced 429
// pause, that is after the 429 announcing it had been answered. The
// emulator logs each such request with its chat ("request sent inside an
// announced 429 pause").
func (r *Result) checkPauses(o Observed) {
	s := o.Emulator
	r.add(s.SentInAnyPause == 0,
		fmt.Sprintf("no request sent inside an announced 429 pause: sent_in_any_pause %d (429s %d, crossed the 429 on the wire %d, in flight when announced %d, punished %d)",
			s.SentInAnyPause, s.RateLimited, s.SentCrossing429, s.InAnyPause, s.InPause),
		nil)
}

// checkBreaker checks that each full outage made at most as many calls fail
// as the circuit breaker allows.
func (r *Result) checkBreaker(o Observed) {
	f := &r.Figures
	var problems []string
	n := 0
	for _, x := range o.Outages {
		if x.Outage.Mode == emulator.FaultSlow || x.Outage.Probability < 1 {
			continue
		}
		n++
		bound := breakerBound(o.Worker, x.Lives)
		f.OutageFailing += x.Failing
		f.OutageBound += bound
		if x.Failing > bound {
			problems = append(problems, fmt.Sprintf("%s outage at %s for %v: %d failed calls, the breaker allows %d (%d worker processes)",
				x.Outage.Mode, x.Start.Format("15:04:05"), x.End.Sub(x.Start).Round(time.Millisecond), x.Failing, bound, len(x.Lives)))
		}
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("calls during outages bounded by the breaker: %d failed calls in %d full outages, bound %d", f.OutageFailing, n, f.OutageBound),
		problems)
}

// checkPending checks that nothing is left: the consumer has nothing
// pending or unacknowledged, and the pipeline drained in time.
func (r *Result) checkPending(o Observed) {
	var problems []string
	if o.Drain != "" {
		problems = append(problems, o.Drain)
	}
	r.add(len(problems) == 0 && o.Pending == 0 && o.AckPending == 0,
		fmt.Sprintf("nothing left pending: consumer %d pending, %d unacknowledged", o.Pending, o.AckPending), problems)
}

// checkProcesses checks that no process died by itself, every fault was
// carried out, and every process stopped cleanly at the end.
func (r *Result) checkProcesses(o Observed) {
	r.add(len(o.Failures) == 0, fmt.Sprintf("no process ended by itself: %d did", len(o.Failures)), slices.Clone(o.Failures))
	r.add(len(o.Problems) == 0, fmt.Sprintf("every fault carried out and the state read: %d problems", len(o.Problems)), slices.Clone(o.Problems))
	detail := slices.Clone(o.StopLines)
	for _, l := range o.Leftovers {
		detail = append(detail, "still running: "+l)
	}
	ok := !o.StopFailed && len(o.Leftovers) == 0
	if ok {
		detail = nil
	}
	r.add(ok, "every process stopped cleanly (SIGTERM, exit 0) and none is left", detail)
}
