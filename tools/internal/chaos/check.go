package chaos

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
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	maxemu "github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
	smsemu "github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// Observed is everything the checks look at: the plan, what the shop
// answered, the final state of the outbox, the streams, the consumers and
// the providers (the Bot API, MAX and SMS emulators and Mailpit), and what
// the fault runner did.
type Observed struct {
	Plan       Plan
	Placements map[string]system.Placement
	Outbox     []system.OutboxRow
	// Stream is every notification in NOTIFY: the originals and the
	// copies handed to the next channel of their route.
	Stream []system.StreamNotification
	// Events are the delivered, fallback and dead events in NOTIFY.
	Events []system.Event
	Dead   []system.DeadLetter
	// Deliveries are the copies every provider accepted.
	Deliveries  []system.Delivery
	Emulator    emulator.Stats
	MaxEmulator maxemu.Stats
	SMSEmulator smsemu.Stats
	// Backlogs are the channels' consumers at the end.
	Backlogs        []system.Backlog
	Kills           []KillRecord
	NATSRestarts    []NATSRestart
	MailpitRestarts []MailpitRestart
	Outages         []OutageRecord
	ProviderFaults  []ProviderFaultRecord
	Pauses          []PauseRecord
	Blocks          map[int64]time.Time
	Standby         int
	// ClusterFaults are a cluster run's node kills, step-downs and
	// partitions (its node restarts are in NATSRestarts).
	ClusterFaults []ClusterFault `json:",omitempty"`
	// Crossings are the 429s the telegram workers logged, with the
	// requests each had admitted before it read the 429.
	Crossings []CrossingRecord `json:",omitempty"`
	// FaultStart and FaultEnd bound the fault phase.
	FaultStart, FaultEnd time.Time
	Worker               WorkerSettings
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
	// dropped (deliver-drop), so the worker retried, or moved on to the
	// next channel.
	CauseAnswerDropped = "answer dropped by the provider (deliver-drop)"
	// CauseWorkerKilled: a worker of the first copy's channel was
	// SIGKILLed after the provider accepted the copy and before the copy
	// was recorded: the window the design cannot close.
	CauseWorkerKilled = "worker SIGKILLed between the copies (accepted, not yet recorded)"
	// CauseSMTPStopped: Mailpit was stopped after it took the message and
	// before its answer to the final dot reached the email worker, which
	// sent it again.
	CauseSMTPStopped = "Mailpit stopped before its answer reached the worker"
)

// Figures are the numbers of a run.
type Figures struct {
	Orders, Accepted, Posts, Repeats int
	Chats                            int
	PublisherKills, WorkerKills      int
	ChannelWorkerKills               int
	KillsBy                          map[string]int
	NATSRestarts, HardNATSRestarts   int
	MailpitRestarts, HardMailpit     int
	Outages                          map[string]int
	LongOutages                      int
	ProviderFaults                   map[string]int
	Pauses, Blocks, StandbyStarts    int
	// Delivered counts the orders delivered; DeliveredBy by the channel
	// that delivered them; DeliveredOnce those with exactly one copy over
	// every provider and no give-up on the delivering channel.
	Delivered, DeliveredOnce int
	DeliveredBy              map[string]int
	// DeadOrders counts the orders no channel could deliver.
	DeadOrders int
	// Fallbacks counts moves to the next channel, by "from→to reason".
	Fallbacks    map[string]int
	DeadByReason map[string]int
	// Events counts the pipeline's events by name (delivered, fallback,
	// dead); DeliveredNoEvent the orders delivered without a delivered
	// event, which the application then never hears of.
	Events           map[string]int
	DeliveredNoEvent []string
	// FoundDelivered lists the orders a channel gave up on and handed on
	// although it had delivered them, whose next channel then found them
	// delivered and sent nothing: the success was recorded after the
	// give-up was decided (its worker cut off from NATS for longer than
	// the give-up waits, pkg/delivery holder.go), and the next channel
	// read it before sending. One copy, and a delivered event by the
	// first channel.
	FoundDelivered []string
	// HandedOnUndead counts channels that handed a notification on
	// without its dead letter (a worker killed in between, or JetStream
	// refusing the dead letter, and the next channel delivered first);
	// UndeadByNATS those explained by NATS failing then.
	HandedOnUndead, UndeadByNATS int
	StreamMsgs                   int
	// Duplicates counts extra copies over every provider by cause.
	// KillGaps are, for each explained by a worker kill, the kill's time
	// minus the accepted copy's (negative: the request was on the wire as
	// the worker died).
	Duplicates map[string]int
	KillGaps   []time.Duration
	// DuplicateLog describes every extra copy with its cause.
	DuplicateLog []string
	// DeliveredAndDead counts channels that delivered a notification and
	// then gave up on it (the answer was lost), by cause.
	DeliveredAndDead map[string]int
	OrderViolations  int
	// SentInPauseToDeadSender counts Telegram requests sent inside a pause
	// whose 429 was written only to a worker already killed (checkPauses).
	SentInPauseToDeadSender int64
	// SentInPauseCrossed counts those the worker that read the 429 had in
	// flight with the answered request, by its log (checkPauses).
	SentInPauseCrossed int64
	// PauseCrossed and PauseDeadSender count the same per channel
	// (telegram, max, sms).
	PauseCrossed, PauseDeadSender map[string]int64
	Latency                       []time.Duration // commit → first copy
	// Silences are the fault phase's longest stretches without any
	// delivery while an order waited, longest first (at most
	// maxSilences), each with the faults under way then.
	Silences []SilenceFigure
	// Cluster sums up a cluster run's faults (nil on one server).
	Cluster       *ClusterFigures `json:",omitempty"`
	OutageFailing int64
	OutageBound   int64
	Emulator      emulator.Stats
	MaxEmulator   maxemu.Stats
	SMSEmulator   smsemu.Stats
}

// SilenceFigure is one silence of the fault phase and the faults under way
// during it or just before.
type SilenceFigure struct {
	system.Silence
	// Offset is its start from the start of the fault phase.
	Offset time.Duration
	During []string
}

// maxSilences is how many silences a report lists.
const maxSilences = 5

// ClusterFigures sum up a cluster run's faults.
type ClusterFigures struct {
	// NodeRestarts counts the nats-server restarts, each of one node
	// (HardRestarts of them with SIGKILL).
	NodeRestarts, HardRestarts int
	// NodeKills counts the SIGKILLs of a node, LeaderKills those of
	// NOTIFY's leader.
	NodeKills, LeaderKills int
	// Partitions counts the partitions by what they did to the node's
	// clients ("kept", "refuse", "blackhole"); LeaderPartitions those of
	// NOTIFY's leader.
	Partitions       map[string]int
	LeaderPartitions int
	// StepDowns counts the step-downs by target.
	StepDowns map[string]int
	// Elections are the times from losing NOTIFY's leader (killed or cut
	// off) to its next leader; StepDownElections from a step-down of
	// NOTIFY to its next leader.
	Elections, StepDownElections []time.Duration
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

// expectation is what must become of one accepted order.
type expectation struct {
	order PlannedOrder
	key   string
	chat  int64 // the order's chat
	// target is where a Telegram copy must arrive (the supergroup for the
	// migrated group).
	target int64
	// tokens are the order's recipients by channel (subject tokens).
	tokens map[string]string
	// route is the notification's route, from its outbox row.
	route []string
	// blockedAt is set for a chat blocked during the run.
	blockedAt time.Time
	outboxID  int64
	createdAt time.Time
}

// hop is a channel giving up on a notification.
type hop struct {
	channel, reason string
	at              time.Time
	// undead: handed on without a dead letter.
	undead bool
}

// outcome is what became of one order.
type outcome struct {
	// copies are its copies at every provider, by time.
	copies []system.Delivery
	// dead are its dead letters by channel.
	dead map[string][]system.DeadLetter
	// handedOn are the copies handed to the next channel, by the channel
	// they came from.
	handedOn   map[string]system.StreamNotification
	deadEvents int
	// Computed by the walk along the route.
	gaveUp []hop
	by     string // the channel that delivered it; "" if none did
	isDead bool   // every channel of its route gave up
	// foundDelivered: by gave up on it too, but its own late success
	// overtook the give-up (FoundDelivered).
	foundDelivered bool
}

// Evaluate runs every check over o.
func Evaluate(o Observed) Result {
	var r Result
	f := &r.Figures
	f.Orders = len(o.Plan.Orders)
	f.Emulator, f.MaxEmulator, f.SMSEmulator = o.Emulator, o.MaxEmulator, o.SMSEmulator
	f.KillsBy = map[string]int{}
	for _, k := range o.Kills {
		f.KillsBy[k.Process]++
		switch {
		case k.Process == namePublisher:
			f.PublisherKills++
		case workerOf(k.Process, "telegram"):
			f.WorkerKills++
		default:
			f.ChannelWorkerKills++
		}
	}
	f.NATSRestarts = len(o.NATSRestarts)
	for _, n := range o.NATSRestarts {
		if n.Hard {
			f.HardNATSRestarts++
		}
	}
	f.MailpitRestarts = len(o.MailpitRestarts)
	for _, n := range o.MailpitRestarts {
		if n.Hard {
			f.HardMailpit++
		}
	}
	f.Outages = map[string]int{}
	for _, x := range o.Outages {
		f.Outages[string(x.Outage.Mode)]++
		if x.Long {
			f.LongOutages++
		}
	}
	f.ProviderFaults = map[string]int{}
	for _, x := range o.ProviderFaults {
		what := x.Fault.Mode
		if what == "" {
			what = "429"
		}
		f.ProviderFaults[x.Fault.Channel+" "+what]++
	}
	f.Pauses, f.Blocks, f.StandbyStarts = len(o.Pauses), len(o.Blocks), o.Standby
	f.StreamMsgs = len(o.Stream)

	exp := r.checkPlacements(o)
	r.checkOutbox(o, exp)
	r.checkStream(o, exp)
	outcomes := r.checkOutcomes(o, exp)
	r.checkDuplicates(o, exp, outcomes)
	r.checkOrder(exp, outcomes)
	r.checkEventsTold()
	r.checkPauses(o)
	r.checkBreaker(o)
	r.checkPending(o)
	r.checkProcesses(o)
	f.Silences = silences(o, exp, outcomes)
	if o.Plan.clustered() {
		f.Cluster = clusterFigures(o)
	}
	return r
}

// silences finds the fault phase's longest silences: stretches without any
// copy accepted by any provider while an order that was delivered waited.
func silences(o Observed, exp map[string]*expectation, out map[string]*outcome) []SilenceFigure {
	var deliveries []time.Time
	for _, d := range o.Deliveries {
		deliveries = append(deliveries, d.At)
	}
	var waits []system.Wait
	for key, e := range exp {
		if oc := out[key]; oc != nil && oc.by != "" && len(oc.copies) > 0 && !e.createdAt.IsZero() {
			waits = append(waits, system.Wait{From: e.createdAt, To: oc.copies[0].At})
		}
	}
	var figs []SilenceFigure
	for i, s := range system.Silences(waits, deliveries, o.FaultStart, o.FaultEnd) {
		if i == maxSilences {
			break
		}
		figs = append(figs, SilenceFigure{Silence: s, Offset: s.From.Sub(o.FaultStart), During: faultsDuring(o, s.From, s.To)})
	}
	return figs
}

// faultsDuring names the faults under way in [from, to], or ending at most
// a few seconds before it (a process killed then is still starting; a
// node restarted then is still catching up).
func faultsDuring(o Observed, from, to time.Time) []string {
	const before = 3 * time.Second
	var out []string
	overlaps := func(start, end time.Time) bool { return !start.After(to) && !end.Add(before).Before(from) }
	for _, k := range o.Kills {
		if overlaps(k.At, k.At) {
			out = append(out, "kill "+k.Process)
		}
	}
	for _, n := range o.NATSRestarts {
		if overlaps(n.Down, n.Up) {
			out = append(out, strings.TrimSpace("restart nats-server "+n.Node))
		}
	}
	for _, c := range o.ClusterFaults {
		if !overlaps(c.Start, c.End) {
			continue
		}
		switch c.Kind {
		case StepDown:
			out = append(out, "step-down "+c.Target)
		default:
			out = append(out, c.Kind.String()+" "+c.Node+leaderNote(c.WasLeader))
		}
	}
	for _, x := range o.Outages {
		if overlaps(x.Start, x.End) {
			out = append(out, "Telegram outage "+string(x.Outage.Mode))
		}
	}
	for _, p := range o.Pauses {
		if overlaps(p.At, p.At.Add(time.Duration(p.Pause.RetryAfter)*time.Second)) {
			out = append(out, "429 pause")
		}
	}
	for _, m := range o.MailpitRestarts {
		if overlaps(m.Down, m.Up) {
			out = append(out, "restart Mailpit")
		}
	}
	for _, x := range o.ProviderFaults {
		if overlaps(x.Start, x.End) {
			out = append(out, x.Fault.Channel+" fault")
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// clusterFigures sums up a cluster run's faults.
func clusterFigures(o Observed) *ClusterFigures {
	c := &ClusterFigures{Partitions: map[string]int{}, StepDowns: map[string]int{}}
	for _, n := range o.NATSRestarts {
		c.NodeRestarts++
		if n.Hard {
			c.HardRestarts++
		}
	}
	for _, f := range o.ClusterFaults {
		switch f.Kind {
		case KillNode:
			c.NodeKills++
			if f.WasLeader {
				c.LeaderKills++
			}
		case Partition:
			clients := f.Clients
			if clients == "" {
				clients = "kept"
			}
			c.Partitions["clients "+clients]++
			if f.WasLeader {
				c.LeaderPartitions++
			}
		case StepDown:
			c.StepDowns[f.Target]++
			if f.Target == jetstream.StreamNotify && f.Leader != "" {
				c.StepDownElections = append(c.StepDownElections, f.Elected)
			}
			continue
		}
		if f.WasLeader && f.Leader != "" {
			c.Elections = append(c.Elections, f.Elected)
		}
	}
	return c
}

func (r *Result) add(ok bool, text string, detail []string) {
	sort.Strings(detail)
	r.Checks = append(r.Checks, Check{OK: ok, Text: text, Detail: detail})
}

// tokensOf returns the order's recipient on each channel it has an address
// for.
func tokensOf(o shop.Order) map[string]string {
	n := notify.Notification{Key: shop.NotificationKey(o.ID), ChatID: o.ChatID, MaxUserID: o.MaxUserID, Email: o.Email, Phone: o.Phone}
	out := map[string]string{}
	for _, ch := range n.DefaultRoute() {
		if t, err := n.Recipient(ch); err == nil {
			out[string(ch)] = t
		}
	}
	return out
}

// defaultRoute is the route of the order's addresses.
func defaultRoute(o shop.Order) []string {
	n := notify.Notification{ChatID: o.ChatID, MaxUserID: o.MaxUserID, Email: o.Email, Phone: o.Phone}
	var out []string
	for _, ch := range n.DefaultRoute() {
		out = append(out, string(ch))
	}
	return out
}

// checkPlacements checks that every order was created exactly once and
// returns the expectations of the accepted ones, by key.
func (r *Result) checkPlacements(o Observed) map[string]*expectation {
	f := &r.Figures
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
		e := &expectation{order: po, key: shop.NotificationKey(po.Order.ID), chat: chat, target: chat, tokens: tokensOf(po.Order)}
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

// checkOutbox checks that the outbox holds exactly the accepted orders,
// each with the route of its addresses (Telegram left out once the shop
// heard the chat is dead), and that every row was published.
func (r *Result) checkOutbox(o Observed, exp map[string]*expectation) {
	var problems []string
	seen := map[string]bool{}
	left := 0
	for _, row := range o.Outbox {
		e, ok := exp[row.Key]
		if !ok {
			problems = append(problems, fmt.Sprintf("outbox row %d has key %q of no accepted order", row.ID, row.Key))
			continue
		}
		seen[row.Key] = true
		e.outboxID, e.createdAt, e.route = row.ID, row.CreatedAt, row.Route
		full := defaultRoute(e.order.Order)
		switch {
		case slices.Equal(row.Route, full):
		case len(full) > 1 && full[0] == "telegram" && slices.Equal(row.Route, full[1:]):
			left++ // the shop knew the chat was dead
		default:
			problems = append(problems, fmt.Sprintf("outbox row %d (%s) has route %v, want %v (or without telegram)", row.ID, row.Key, row.Route, full))
			continue
		}
		if row.Channel != row.Route[0] || row.Token != e.tokens[row.Channel] {
			problems = append(problems, fmt.Sprintf("outbox row %d (%s) is for %s %s, want %s %s", row.ID, row.Key, row.Channel, row.Token, row.Route[0], e.tokens[row.Route[0]]))
		}
	}
	for key := range exp {
		if !seen[key] {
			problems = append(problems, key+": accepted but not in the outbox")
		}
	}
	pending := system.PendingRows(o.Outbox)
	if pending > 0 {
		problems = append(problems, fmt.Sprintf("%d outbox rows still pending (not published)", pending))
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("outbox: one row per accepted order with the route of its addresses (%d without Telegram: the chat was known dead), all published (%d rows, backlog %d)",
			left, len(o.Outbox), pending), problems)
}

// checkStream checks that NOTIFY holds every accepted notification once on
// the first channel of its route, each recipient's in outbox (commit)
// order, and at most one copy handed to each later channel, by the channel
// before it.
func (r *Result) checkStream(o Observed, exp map[string]*expectation) {
	originals := map[string][]system.StreamNotification{}
	handed := map[string]int{}
	var problems []string
	copies := 0
	for _, m := range o.Stream {
		e, ok := exp[m.Key]
		if !ok {
			problems = append(problems, fmt.Sprintf("NOTIFY #%d has key %q of no accepted order", m.Seq, m.Key))
			continue
		}
		if m.FallbackFrom == "" {
			originals[m.Key] = append(originals[m.Key], m)
			continue
		}
		copies++
		handed[m.Key+"/"+m.Channel]++
		i := slices.Index(e.route, m.Channel)
		switch {
		case handed[m.Key+"/"+m.Channel] > 1:
			problems = append(problems, fmt.Sprintf("%s: handed to %s more than once (NOTIFY #%d)", m.Key, m.Channel, m.Seq))
		case i < 1 || e.route[i-1] != m.FallbackFrom:
			problems = append(problems, fmt.Sprintf("%s: handed from %s to %s (NOTIFY #%d), not the next channel of route %v", m.Key, m.FallbackFrom, m.Channel, m.Seq, e.route))
		case m.Recipient != e.tokens[m.Channel]:
			problems = append(problems, fmt.Sprintf("%s: handed to %s recipient %s, want %s", m.Key, m.Channel, m.Recipient, e.tokens[m.Channel]))
		}
	}
	bySubject := map[string][]*expectation{}
	for key, e := range exp {
		ms := originals[key]
		switch {
		case len(ms) == 0:
			problems = append(problems, key+": accepted but never stored in NOTIFY")
			continue
		case len(ms) > 1:
			problems = append(problems, fmt.Sprintf("%s: stored %d times in NOTIFY (sequences %v)", key, len(ms), seqs(ms)))
		}
		if len(e.route) > 0 && (ms[0].Channel != e.route[0] || ms[0].Recipient != e.tokens[e.route[0]]) {
			problems = append(problems, fmt.Sprintf("%s: stored on %s, want the first channel of route %v", key, ms[0].Subject, e.route))
		}
		bySubject[ms[0].Subject] = append(bySubject[ms[0].Subject], e)
	}
	reordered := 0
	for subject, es := range bySubject {
		slices.SortFunc(es, func(a, b *expectation) int { return int(a.outboxID - b.outboxID) })
		for i := 1; i < len(es); i++ {
			a, b := originals[es[i-1].key][0], originals[es[i].key][0]
			if a.Seq > b.Seq {
				reordered++
				problems = append(problems, fmt.Sprintf("%s: %s (outbox #%d) stored at #%d after %s (outbox #%d) at #%d",
					subject, es[i-1].key, es[i-1].outboxID, a.Seq, es[i].key, es[i].outboxID, b.Seq))
			}
		}
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("NOTIFY: every accepted notification stored once on its first channel, each recipient's in commit order, handed on at most once per channel (%d originals, %d handed on, %d reordered)",
			len(o.Stream)-copies, copies, reordered),
		problems)
}

func seqs(ms []system.StreamNotification) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

// allowedReasons are the reasons channel may give up on a notification to
// recipient: the one its recipient calls for (dead from the start, or a
// chat blocked during the run), or a transient one — out of attempts in a
// long outage, or, on any channel but the last, past fallback_after.
func allowedReasons(o Observed, e *expectation, channel string, last bool) []string {
	rs := []string{"max_attempts"}
	if !last {
		rs = append(rs, "fallback_timeout")
	}
	if reason := o.Plan.DeadRecipients[channel][e.tokens[channel]]; reason != "" {
		rs = append(rs, reason)
	}
	if channel == "telegram" && !e.blockedAt.IsZero() {
		rs = append(rs, "blocked")
	}
	return rs
}

// checkOutcomes walks each accepted order's route: every channel either
// gave up on the notification — one dead letter with a reason its
// recipient allows — and handed it to the next, or delivered it; the last
// channel's give-up leaves it dead, with one dead event. It checks that
// every copy went to the order's recipient on its channel, that each email
// has the Message-ID derived from the key, and that nothing else reached a
// provider or NOTIFY_DEAD.
func (r *Result) checkOutcomes(o Observed, exp map[string]*expectation) map[string]*outcome {
	f := &r.Figures
	f.DeadByReason, f.DeliveredBy, f.Fallbacks = map[string]int{}, map[string]int{}, map[string]int{}
	out := map[string]*outcome{}
	get := func(key string) *outcome {
		oc := out[key]
		if oc == nil {
			oc = &outcome{dead: map[string][]system.DeadLetter{}, handedOn: map[string]system.StreamNotification{}}
			out[key] = oc
		}
		return oc
	}
	var problems, unexpected []string
	for _, d := range o.Deliveries {
		e, ok := exp[d.Key]
		if !ok {
			unexpected = append(unexpected, fmt.Sprintf("%s %s %s: %q", d.Channel, d.Recipient, d.Ref, d.Text))
			continue
		}
		oc := get(d.Key)
		oc.copies = append(oc.copies, d)
		want := e.tokens[d.Channel]
		if d.Channel == "telegram" {
			want = strconv.FormatInt(e.target, 10)
		}
		if d.Recipient != want {
			problems = append(problems, fmt.Sprintf("%s: delivered by %s to %s, want %s", d.Key, d.Channel, d.Recipient, want))
		}
		if d.Channel == "email" && d.Ref != email.MessageID(d.Key, messageIDDomain) {
			problems = append(problems, fmt.Sprintf("%s: email with Message-ID %s, want %s", d.Key, d.Ref, email.MessageID(d.Key, messageIDDomain)))
		}
	}
	for _, dl := range o.Dead {
		f.DeadByReason[dl.Reason]++
		ch, _, _, err := jetstream.ParseDeadLetterSubject(dl.Subject)
		if _, ok := exp[dl.Key]; !ok || err != nil {
			unexpected = append(unexpected, fmt.Sprintf("dead letter #%d (%s) with key %q of no accepted order: %s", dl.Seq, dl.Reason, dl.Key, dl.Description))
			continue
		}
		oc := get(dl.Key)
		oc.dead[ch] = append(oc.dead[ch], dl)
	}
	for _, m := range o.Stream {
		if _, ok := exp[m.Key]; ok && m.FallbackFrom != "" {
			get(m.Key).handedOn[m.FallbackFrom] = m
		}
	}
	f.Events = map[string]int{}
	delivEvents := map[string]bool{}
	delivEventBy := map[string]map[string]bool{} // key → channels its delivered events name
	for _, ev := range o.Events {
		if _, ok := exp[ev.Key]; !ok {
			continue
		}
		f.Events[ev.Event.Event]++
		switch ev.Event.Event {
		case delivery.EventDead:
			get(ev.Key).deadEvents++
		case delivery.EventDelivered:
			delivEvents[ev.Key] = true
			if delivEventBy[ev.Key] == nil {
				delivEventBy[ev.Key] = map[string]bool{}
			}
			delivEventBy[ev.Key][ev.Event.Channel] = true
		}
	}
	for key, e := range exp {
		oc := get(key)
		slices.SortFunc(oc.copies, func(a, b system.Delivery) int { return a.At.Compare(b.At) })
		if e.route == nil {
			continue // reported by checkOutbox
		}
		for i, ch := range e.route {
			dls := oc.dead[ch]
			handed, isHanded := oc.handedOn[ch]
			n := 0
			for _, c := range oc.copies {
				if c.Channel == ch {
					n++
				}
			}
			if len(dls) > 1 {
				problems = append(problems, fmt.Sprintf("%s: %d dead letters on %s, want at most one", key, len(dls), ch))
			}
			if len(dls) == 0 && !isHanded {
				switch {
				case n > 0:
					oc.by = ch
				case foundDelivered(oc, e.route[:i], delivEventBy[key]) != "":
					oc.by, oc.foundDelivered = foundDelivered(oc, e.route[:i], delivEventBy[key]), true
					f.FoundDelivered = append(f.FoundDelivered, key)
				default:
					problems = append(problems, fmt.Sprintf("%s (chat %d): %s neither delivered it nor gave up on it (route %v)", key, e.chat, ch, e.route))
				}
				break
			}
			h := hop{channel: ch}
			switch {
			case len(dls) > 0:
				h.reason, h.at = dls[0].Reason, dls[0].DeadAt
			default:
				h.reason, h.at, h.undead = handed.FallbackReason, handed.At, true
				f.HandedOnUndead++
			}
			oc.gaveUp = append(oc.gaveUp, h)
			last := i == len(e.route)-1
			if allowed := allowedReasons(o, e, ch, last); !slices.Contains(allowed, h.reason) {
				problems = append(problems, fmt.Sprintf("%s (chat %d): %s gave up as %s, want %s", key, e.chat, ch, h.reason, strings.Join(allowed, " or ")))
			}
			if !last {
				f.Fallbacks[fmt.Sprintf("%s→%s %s", ch, e.route[i+1], h.reason)]++
			}
		}
		oc.isDead = oc.by == "" && len(oc.gaveUp) == len(e.route)
		if oc.by != "" {
			// Nothing after the channel that delivered it.
			after := e.route[slices.Index(e.route, oc.by)+1:]
			for _, ch := range after {
				if len(oc.dead[ch]) > 0 {
					problems = append(problems, fmt.Sprintf("%s: dead-lettered on %s after %s delivered it", key, ch, oc.by))
				}
				if _, ok := oc.handedOn[ch]; ok {
					problems = append(problems, fmt.Sprintf("%s: handed on by %s after %s delivered it", key, ch, oc.by))
				}
			}
		}
		for _, c := range oc.copies {
			if !slices.Contains(e.route, c.Channel) || oc.by != "" && slices.Index(e.route, c.Channel) > slices.Index(e.route, oc.by) {
				problems = append(problems, fmt.Sprintf("%s: a copy by %s, off its path (route %v, delivered by %q)", key, c.Channel, e.route, oc.by))
			}
		}
		switch {
		case oc.isDead && oc.deadEvents != 1:
			problems = append(problems, fmt.Sprintf("%s (chat %d): dead on every channel of %v, %d dead events, want 1", key, e.chat, e.route, oc.deadEvents))
		case !oc.isDead && oc.deadEvents != 0:
			problems = append(problems, fmt.Sprintf("%s: %d dead events, but %s delivered it", key, oc.deadEvents, oc.by))
		}
		switch {
		case oc.by != "":
			f.Delivered++
			f.DeliveredBy[oc.by]++
			if !delivEvents[key] {
				f.DeliveredNoEvent = append(f.DeliveredNoEvent, key)
			}
			if len(oc.copies) == 1 {
				f.DeliveredOnce++
			}
		case oc.isDead:
			f.DeadOrders++
		}
		if len(oc.copies) > 0 {
			f.Latency = append(f.Latency, oc.copies[0].At.Sub(e.createdAt))
		}
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("every accepted order delivered by a channel of its route after each earlier one gave up with an allowed reason, or dead on every channel with one dead event: %d delivered (%s), %d dead",
			f.Delivered, reasons(f.DeliveredBy), f.DeadOrders),
		problems)
	r.add(len(unexpected) == 0, fmt.Sprintf("nothing else reached a provider or NOTIFY_DEAD: %d unexpected", len(unexpected)), unexpected)
	return out
}

// foundDelivered returns the channel of earlier (the channels before the
// one that neither delivered nor gave up) that delivered the notification
// although it gave up on it, when the next channel can have found it
// delivered: the last of them with a copy, if a delivered event names it.
func foundDelivered(oc *outcome, earlier []string, eventBy map[string]bool) string {
	for i := len(earlier) - 1; i >= 0; i-- {
		ch := earlier[i]
		if slices.ContainsFunc(oc.copies, func(c system.Delivery) bool { return c.Channel == ch }) {
			if eventBy[ch] {
				return ch
			}
			return ""
		}
	}
	return ""
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

// inFlight returns how long before its acceptance at t a request on channel
// may have been sent: killSlack, plus the delay of a slow outage of that
// channel's provider running then.
func inFlight(channel string, t time.Time, o Observed) time.Duration {
	d := killSlack
	if channel == "telegram" {
		for _, x := range o.Outages {
			if x.Outage.Mode == emulator.FaultSlow && !t.Before(x.Start) && !t.After(x.End.Add(x.Outage.Delay)) {
				d = max(d, killSlack+x.Outage.Delay)
			}
		}
	}
	for _, x := range o.ProviderFaults {
		if x.Fault.Channel == channel && x.Fault.Mode == "slow" && !t.Before(x.Start) && !t.After(x.End.Add(x.Fault.Delay)) {
			d = max(d, killSlack+x.Fault.Delay)
		}
	}
	return d
}

// explain finds why a copy was followed by another delivery attempt of the
// same notification (on its channel or the next): the provider dropped its
// answer, a worker of its channel was killed after it was sent, or, for an
// email, Mailpit was stopped after it took the message — each before
// before, when not zero. gap is the kill's time minus the copy's: negative
// when the request was on the wire as its worker died.
func explain(first system.Delivery, before time.Time, o Observed) (cause string, gap time.Duration) {
	if first.AnswerLost {
		return CauseAnswerDropped, 0
	}
	sent := first.At.Add(-inFlight(first.Channel, first.At, o))
	for _, k := range o.Kills {
		if !workerOf(k.Process, first.Channel) || k.At.Before(sent) {
			continue
		}
		if !before.IsZero() && k.At.After(before) {
			continue
		}
		return CauseWorkerKilled, k.At.Sub(first.At)
	}
	if first.Channel == "email" {
		for _, m := range o.MailpitRestarts {
			if m.Down.Before(sent) || !before.IsZero() && m.Down.After(before) {
				continue
			}
			return CauseSMTPStopped, 0
		}
	}
	return "", 0
}

// checkDuplicates classifies every extra copy over the providers, and every
// channel that delivered a notification and then gave up on it, by cause;
// one without a cause is a violation.
func (r *Result) checkDuplicates(o Observed, exp map[string]*expectation, out map[string]*outcome) {
	f := &r.Figures
	f.Duplicates, f.DeliveredAndDead = map[string]int{}, map[string]int{}
	kills := slices.Clone(o.Kills)
	slices.SortFunc(kills, func(a, b KillRecord) int { return a.At.Compare(b.At) })
	o.Kills = kills
	var problems []string
	extra := 0
	for key, oc := range out {
		if _, ok := exp[key]; !ok {
			continue
		}
		for i := 1; i < len(oc.copies); i++ {
			extra++
			prev, cur := oc.copies[i-1], oc.copies[i]
			cause, gap := explain(prev, cur.At, o)
			if cause == "" {
				problems = append(problems, fmt.Sprintf("%s: copy %d by %s at %s and copy %d by %s at %s, no dropped answer, worker kill or Mailpit stop between them",
					key, i, prev.Channel, prev.At.Format("15:04:05.000"), i+1, cur.Channel, cur.At.Format("15:04:05.000")))
				continue
			}
			f.Duplicates[cause]++
			line := fmt.Sprintf("%s: copies by %s at %s and by %s at %s: %s",
				key, prev.Channel, prev.At.Format("15:04:05.000"), cur.Channel, cur.At.Format("15:04:05.000"), cause)
			if cause == CauseWorkerKilled {
				f.KillGaps = append(f.KillGaps, gap)
				line += fmt.Sprintf(" (kill %+v from the first copy)", gap.Round(time.Millisecond))
			}
			f.DuplicateLog = append(f.DuplicateLog, line)
		}
		for _, h := range oc.gaveUp {
			var last *system.Delivery
			for i := range oc.copies {
				if oc.copies[i].Channel == h.channel {
					last = &oc.copies[i]
				}
			}
			if last == nil {
				continue
			}
			if oc.foundDelivered && h.channel == oc.by {
				// Its late success overtook the give-up, and the next
				// channel sent nothing (FoundDelivered): one copy.
				f.DuplicateLog = append(f.DuplicateLog, fmt.Sprintf("%s: delivered by %s at %s, then it gave up as %s at %s; the next channel found it delivered and sent nothing",
					key, h.channel, last.At.Format("15:04:05.000"), h.reason, h.at.Format("15:04:05.000")))
				continue
			}
			cause, gap := explain(*last, h.at, o)
			if cause == "" {
				problems = append(problems, fmt.Sprintf("%s: delivered by %s at %s, then it gave up as %s at %s, no dropped answer, worker kill or Mailpit stop between",
					key, h.channel, last.At.Format("15:04:05.000"), h.reason, h.at.Format("15:04:05.000")))
				continue
			}
			f.DeliveredAndDead[cause]++
			f.DuplicateLog = append(f.DuplicateLog, fmt.Sprintf("%s: delivered by %s at %s, then it gave up as %s at %s: %s",
				key, h.channel, last.At.Format("15:04:05.000"), h.reason, h.at.Format("15:04:05.000"), cause))
			if cause == CauseWorkerKilled {
				f.KillGaps = append(f.KillGaps, gap)
			}
		}
		for _, h := range oc.gaveUp {
			if !h.undead {
				continue
			}
			// Handed on, and no dead letter: the worker died between the
			// two steps, or JetStream did not take the dead letter (NATS
			// restarting, a leader being elected); when the message came
			// back, the worker found the next channel's delivery record.
			explained := false
			for _, k := range kills {
				if workerOf(k.Process, h.channel) && !k.At.Before(h.at.Add(-killSlack)) {
					explained = true
					break
				}
			}
			if !explained && natsFaultAround(o, h.at) {
				explained = true
				f.UndeadByNATS++
			}
			if !explained {
				problems = append(problems, fmt.Sprintf("%s: %s handed it on at %s without a dead letter, and no %s worker was killed after, nor was NATS failing then",
					key, h.channel, h.at.Format("15:04:05.000"), h.channel))
			}
		}
	}
	explained := 0
	for _, n := range f.Duplicates {
		explained += n
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("duplicates only where explained: %d extra copies over all providers, %d explained (%d answer dropped, %d worker killed, %d Mailpit stopped)",
			extra, explained, f.Duplicates[CauseAnswerDropped], f.Duplicates[CauseWorkerKilled], f.Duplicates[CauseSMTPStopped]),
		problems)
}

// deadLetterWait is how long after a hand-over the dead letter may still be
// refused: the worker's publish timeout, and a retry or two.
const deadLetterWait = 15 * time.Second

// natsFaultAround reports whether NATS was failing at t or in the
// deadLetterWait after it: the server (or a node) restarting or killed, a
// node cut off, a leader stepping down — the cluster electing, or catching
// up, until every node is current again.
func natsFaultAround(o Observed, t time.Time) bool {
	hit := func(start, end time.Time) bool {
		return !start.After(t.Add(deadLetterWait)) && !end.Before(t.Add(-killSlack))
	}
	for _, n := range o.NATSRestarts {
		if hit(n.Down, n.Up.Add(electionWait)) {
			return true
		}
	}
	for _, c := range o.ClusterFaults {
		if hit(c.Start, c.End.Add(c.Healthy).Add(c.Elected)) {
			return true
		}
	}
	return false
}

// checkOrder checks that, on every channel, each recipient received its
// notifications in commit order (the first copy of each), comparing
// notifications that took the same route; and that a chat blocked during
// the run has no Telegram delivery after a Telegram dead letter.
func (r *Result) checkOrder(exp map[string]*expectation, out map[string]*outcome) {
	type lane struct{ channel, recipient, route string }
	lanes := map[lane][]*expectation{}
	for _, e := range exp {
		oc := out[e.key]
		if oc == nil {
			continue
		}
		seen := map[string]bool{}
		for _, c := range oc.copies {
			if seen[c.Channel] {
				continue
			}
			seen[c.Channel] = true
			l := lane{c.Channel, c.Recipient, strings.Join(e.route, ",")}
			lanes[l] = append(lanes[l], e)
		}
	}
	firstCopy := func(e *expectation, channel string) system.Delivery {
		for _, c := range out[e.key].copies {
			if c.Channel == channel {
				return c
			}
		}
		return system.Delivery{}
	}
	var problems []string
	for l, es := range lanes {
		slices.SortFunc(es, func(a, b *expectation) int { return int(a.outboxID - b.outboxID) })
		var last *expectation
		var lastTime time.Time
		for _, e := range es {
			t := firstCopy(e, l.channel).At
			if last != nil && t.Before(lastTime) {
				r.Figures.OrderViolations++
				problems = append(problems, fmt.Sprintf("%s %s: %s (outbox #%d) arrived at %s, before %s (outbox #%d) at %s",
					l.channel, l.recipient, e.key, e.outboxID, t.Format("15:04:05.000"), last.key, last.outboxID, lastTime.Format("15:04:05.000")))
			}
			last, lastTime = e, t
		}
	}
	// A chat blocked during the run: once Telegram dead-lettered one of its
	// notifications as blocked, it delivers none of the later ones. (One
	// that moved on for taking too long says nothing of the chat.)
	byChat := map[int64][]*expectation{}
	for _, e := range exp {
		if !e.blockedAt.IsZero() {
			byChat[e.chat] = append(byChat[e.chat], e)
		}
	}
	for chat, es := range byChat {
		slices.SortFunc(es, func(a, b *expectation) int { return int(a.outboxID - b.outboxID) })
		var firstDead *expectation
		for _, e := range es {
			oc := out[e.key]
			if oc == nil {
				continue
			}
			delivered := firstCopy(e, "telegram").Channel != ""
			if !delivered && firstDead == nil && slices.ContainsFunc(oc.dead["telegram"], func(d system.DeadLetter) bool { return d.Reason == "blocked" }) {
				firstDead = e
			}
			if delivered && firstDead != nil {
				r.Figures.OrderViolations++
				problems = append(problems, fmt.Sprintf("chat %d: %s (outbox #%d) delivered by Telegram after the earlier %s (outbox #%d) was dead-lettered there",
					chat, e.key, e.outboxID, firstDead.key, firstDead.outboxID))
			}
		}
	}
	r.add(len(problems) == 0,
		fmt.Sprintf("every recipient received its notifications in commit order, on every channel: %d recipients, %d violations", len(lanes), r.Figures.OrderViolations),
		problems)
}

// checkEventsTold checks that the application was told of every delivered
// order: a delivered event in NOTIFY for each (checkOutcomes collects
// those without one).
func (r *Result) checkEventsTold() {
	f := &r.Figures
	slices.Sort(f.DeliveredNoEvent)
	r.add(len(f.DeliveredNoEvent) == 0,
		fmt.Sprintf("the application was told of every delivered order: %d delivered, %d without a delivered event", f.Delivered, len(f.DeliveredNoEvent)),
		f.DeliveredNoEvent)
}

// checkBreaker checks that each full Telegram outage made at most as many
// calls fail as the circuit breaker allows.
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
		fmt.Sprintf("calls during Telegram outages bounded by the breaker: %d failed calls in %d full outages, bound %d", f.OutageFailing, n, f.OutageBound),
		problems)
}

// checkPending checks that nothing is left: no channel's consumer has
// anything pending or unacknowledged, and the pipeline drained in time.
func (r *Result) checkPending(o Observed) {
	var problems []string
	if o.Drain != "" {
		problems = append(problems, o.Drain)
	}
	complete := len(o.Backlogs) == len(system.Channels())
	if !complete {
		problems = append(problems, fmt.Sprintf("%d of %d consumers read", len(o.Backlogs), len(system.Channels())))
	}
	r.add(len(problems) == 0 && complete && system.Empty(o.Backlogs),
		fmt.Sprintf("nothing left pending: every channel's consumer empty (left: %s)", system.BacklogText(o.Backlogs)), problems)
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
