package chaos

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// The chats of a run. Private chats are privateBase+1 … privateBase+n.
const (
	privateBase int64 = 2_000_000
	// migratedGroup is a basic group that became a supergroup before the
	// run: the Bot API answers 400 with migrate_to_chat_id and the worker
	// resends to supergroup.
	migratedGroup int64 = -5001
	supergroup    int64 = -1005001
	// plainGroup is a group limited to 20 messages a minute.
	plainGroup int64 = -6001
)

// startDead returns the chats that cannot receive messages from the start,
// with the dead-letter reason the worker must give them.
func startDead() map[int64]string {
	return map[int64]string{3_000_001: "blocked", 3_000_002: "blocked", 3_000_003: "deactivated"}
}

// Addresses of a run's customers besides their Telegram chat. Emails at
// bounceDomain are refused by Mailpit (550 5.1.0: a hard bounce).
const (
	mailDomain   = "mail.example"
	bounceDomain = "bounce.example"
	maxUserBase  = int64(8_000_000)
)

// Customer is what a chat's customer gives besides the chat: every order of
// the chat carries the same addresses, so that order per recipient can be
// checked on every channel.
type Customer struct {
	Email     string `json:",omitempty"`
	Phone     string `json:",omitempty"`
	MaxUserID int64  `json:",omitempty"`
}

// Kind is what an event does.
type Kind int

// Event kinds.
const (
	// KillPublisher sends SIGKILL to the publisher and starts it again after
	// Event.Delay.
	KillPublisher Kind = iota + 1
	// KillWorker sends SIGKILL to a running worker (Event.Pick chooses
	// which) and starts it again after Event.Delay.
	KillWorker
	// StartStandby starts the second worker, which waits as the standby.
	StartStandby
	// StopStandby stops the second worker with SIGTERM.
	StopStandby
	// RestartNATS stops nats-server (SIGKILL if Event.Hard, else SIGTERM)
	// and starts it again on the same store and port after Event.Delay.
	RestartNATS
	// TelegramOutage starts Event.Outage at the emulator and ends it after
	// its duration.
	TelegramOutage
	// RateLimitStorm opens Event.Pauses at the emulator one after another:
	// each makes the next request of its scope get a 429.
	RateLimitStorm
	// BlockChat makes Event.Chat block the bot.
	BlockChat
	// KillChannelWorker sends SIGKILL to the worker of Event.Channel (max,
	// email or sms) and starts it again after Event.Delay.
	KillChannelWorker
	// RestartMailpit stops Mailpit (SIGKILL if Event.Hard, else SIGTERM)
	// and starts it again on the same ports and database after
	// Event.Delay.
	RestartMailpit
	// ProviderFault runs Event.Provider at the MAX or SMS emulator: an
	// outage or a 429 pause.
	ProviderFault
	// KillNode (cluster runs) sends SIGKILL to a nats-server node — NOTIFY's
	// leader when Event.Pick < 0.5, else Event.Node — and starts it again
	// on its store after Event.Delay.
	KillNode
	// StepDown (cluster runs) asks the leader of Event.Target (a stream,
	// or "consumer:<name>" for one of NOTIFY's consumers) to step down.
	StepDown
	// Partition (cluster runs) cuts a node — NOTIFY's leader when
	// Event.Pick < 0.5, else Event.Node — off from the other two for
	// Event.Delay; Event.Clients says what becomes of its clients.
	Partition
)

// String names the kind in reports.
func (k Kind) String() string {
	switch k {
	case KillPublisher:
		return "kill publisher"
	case KillWorker:
		return "kill worker"
	case StartStandby:
		return "start standby"
	case StopStandby:
		return "stop standby"
	case RestartNATS:
		return "restart nats-server"
	case TelegramOutage:
		return "Telegram outage"
	case RateLimitStorm:
		return "429 storm"
	case BlockChat:
		return "block chat"
	case KillChannelWorker:
		return "kill channel worker"
	case RestartMailpit:
		return "restart Mailpit"
	case ProviderFault:
		return "MAX/SMS fault"
	case KillNode:
		return "kill node"
	case StepDown:
		return "step-down"
	case Partition:
		return "partition"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Event is one scheduled fault.
type Event struct {
	// At is the offset from the start of the fault phase.
	At   time.Duration
	Kind Kind
	// Delay is how long a killed process stays down.
	Delay time.Duration
	// Hard restarts nats-server with SIGKILL instead of SIGTERM.
	Hard bool
	// Pick in [0, 1) chooses the worker to kill when two run: below 0.75
	// the active one.
	Pick float64
	// Outage is the Telegram outage of TelegramOutage.
	Outage emulator.Outage
	// Pauses are the 429s of RateLimitStorm, with the gap after each.
	Pauses []StormPause
	// Chat is the chat of BlockChat.
	Chat int64
	// Channel is the channel whose worker KillChannelWorker kills.
	Channel string `json:",omitempty"`
	// Long marks a Telegram outage longer than the workers'
	// fallback_after.
	Long bool `json:",omitempty"`
	// Provider is the fault of ProviderFault.
	Provider ProviderOutage `json:",omitzero"`
	// Node is the cluster node a RestartNATS, KillNode or Partition
	// concerns (KillNode and Partition may pick NOTIFY's leader instead).
	Node string `json:",omitempty"`
	// Target is what StepDown steps down.
	Target string `json:",omitempty"`
	// Clients is what a Partition does to the node's clients: "" leaves
	// their connections working (they are on the node's side), "refuse"
	// closes them at once, "blackhole" holds them open and passes nothing.
	Clients string `json:",omitempty"`
}

// ProviderOutage is a fault of the MAX or the SMS emulator: an outage
// (Mode set), or a 429 pause of RetryAfter seconds.
type ProviderOutage struct {
	// Channel is max or sms.
	Channel     string
	Mode        string        `json:",omitempty"`
	Probability float64       `json:",omitempty"`
	Duration    time.Duration `json:",omitempty"`
	Delay       time.Duration `json:",omitempty"`
	RetryAfter  int64         `json:",omitempty"`
}

// StormPause is one scripted 429 of a storm.
type StormPause struct {
	Pause emulator.PauseRequest
	// After is how long the storm waits before its next pause.
	After time.Duration
}

// Repeat says whether an order's POST is sent again.
type Repeat int

// Repeat kinds.
const (
	NoRepeat Repeat = iota
	// RepeatNow posts the order twice at once.
	RepeatNow
	// RepeatLate posts it again after the fault phase.
	RepeatLate
)

// PlannedOrder is an order of the run.
type PlannedOrder struct {
	Order shop.Order
	// At is when it is placed, from the start of the fault phase.
	At     time.Duration
	Repeat Repeat
}

// Plan is a run's schedule: the orders and the faults, both from the seed.
type Plan struct {
	Seed   int64
	Orders []PlannedOrder
	// Events are sorted by At.
	Events []Event
	// Private is the number of private chats.
	Private int
	// RuntimeBlocked are the chats a BlockChat event blocks.
	RuntimeBlocked []int64
	// Customers are the addresses of each chat's customer besides the
	// chat, by chat; a chat without any is absent.
	Customers map[int64]Customer
	// DeadRecipients are the recipients that cannot receive from the
	// start, by channel and recipient token, with the reason the channel
	// must give them: Telegram's blocked and deactivated chats, MAX users
	// who stopped the bot, emails that bounce, phones that unsubscribed.
	DeadRecipients map[string]map[string]string
}

// NewPlan derives the schedule of a run from c.Seed.
func NewPlan(c Config) Plan {
	p := Plan{Seed: c.Seed}
	rng := rand.New(rand.NewPCG(uint64(c.Seed), 0x6368_616f_735f_7467))
	n := int(c.FaultPhase.Seconds() * c.OrderRate)
	p.Private = max(10, n/c.OrdersPerChat)
	p.Customers, p.DeadRecipients = planCustomers(rng, c, p.Private)
	p.Orders = planOrders(rng, c, n, p.Private, p.Customers)

	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	around := func(mean time.Duration) time.Duration { return between(mean*3/10, mean*17/10) }
	var ev []Event
	for t := around(c.PublisherKillEvery); t < c.FaultPhase; t += around(c.PublisherKillEvery) {
		ev = append(ev, Event{At: t, Kind: KillPublisher, Delay: between(0, 2*time.Second)})
	}
	for t := around(c.WorkerKillEvery); t < c.FaultPhase; t += around(c.WorkerKillEvery) {
		ev = append(ev, Event{At: t, Kind: KillWorker, Delay: between(200*time.Millisecond, 3*time.Second), Pick: rng.Float64()})
	}
	for t := around(c.StandbyOff); t < c.FaultPhase; {
		ev = append(ev, Event{At: t, Kind: StartStandby})
		t += around(c.StandbyOn)
		if t >= c.FaultPhase {
			break
		}
		ev = append(ev, Event{At: t, Kind: StopStandby})
		t += around(c.StandbyOff)
	}
	for t := around(c.NATSRestartEvery); t < c.FaultPhase; t += around(c.NATSRestartEvery) {
		ev = append(ev, Event{At: t, Kind: RestartNATS, Delay: between(500*time.Millisecond, 3*time.Second), Hard: rng.Float64() < c.HardNATSFraction})
	}
	outages := 0
	for t := between(2*time.Second, c.TelegramFaultEvery); t < c.FaultPhase; {
		e, took := telegramFault(rng, c, p.Private, outages, between)
		e.At = t
		ev = append(ev, e)
		if e.Kind == TelegramOutage {
			outages++
		}
		t += took + around(c.TelegramFaultEvery)
	}
	channels := []string{string(notify.ChannelMax), string(notify.ChannelEmail), string(notify.ChannelSMS)}
	for t := around(c.ChannelWorkerKillEvery); t < c.FaultPhase; t += around(c.ChannelWorkerKillEvery) {
		ev = append(ev, Event{At: t, Kind: KillChannelWorker, Channel: channels[rng.IntN(len(channels))],
			Delay: between(200*time.Millisecond, 3*time.Second)})
	}
	for t := around(c.MailpitRestartEvery); t < c.FaultPhase; t += around(c.MailpitRestartEvery) {
		ev = append(ev, Event{At: t, Kind: RestartMailpit, Hard: rng.Float64() < 0.5, Delay: between(time.Second, 8*time.Second)})
	}
	for t := between(3*time.Second, c.ProviderFaultEvery); t < c.FaultPhase; {
		e, took := providerFault(rng, between)
		e.At = t
		ev = append(ev, e)
		t += took + around(c.ProviderFaultEvery)
	}
	candidates := rng.Perm(p.Private)
	for i := range min(c.RuntimeBlocks, p.Private/2) {
		chat := privateBase + 1 + int64(candidates[i])
		p.RuntimeBlocked = append(p.RuntimeBlocked, chat)
		ev = append(ev, Event{At: between(c.FaultPhase/20, c.FaultPhase*9/10), Kind: BlockChat, Chat: chat})
	}
	if c.Cluster {
		ev = planCluster(c, ev)
	}
	slices.SortStableFunc(ev, func(a, b Event) int { return int(a.At - b.At) })
	p.Events = ev
	return p
}

// clusterNodes are the nodes of a cluster run.
func clusterNodes() []string { return []string{"n1", "n2", "n3"} }

// stepDownTargets are what StepDown events step down, with their weights:
// the work stream, the three buckets' streams and the telegram workers'
// consumer.
func stepDownTargets() []struct {
	target string
	weight float64
} {
	return []struct {
		target string
		weight float64
	}{
		{"NOTIFY", 0.4}, {"KV_notify_delivered", 0.15}, {"KV_notify_chats", 0.15}, {"KV_notify_attempts", 0.1},
		{"consumer:telegram-worker", 0.2},
	}
}

// planCluster adds a cluster run's faults to the base schedule ev: each
// nats-server restart is given a node, and node kills, leader step-downs
// and partitions are drawn. They come from a generator of their own, so
// the base schedule of a seed is the same with and without -cluster.
func planCluster(c Config, ev []Event) []Event {
	rng := rand.New(rand.NewPCG(uint64(c.Seed), 0x636c_7573_7465_7221))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	around := func(mean time.Duration) time.Duration { return between(mean*3/10, mean*17/10) }
	nodes := clusterNodes()
	for i := range ev {
		if ev[i].Kind == RestartNATS {
			ev[i].Node = nodes[rng.IntN(len(nodes))]
		}
	}
	for t := around(c.NodeKillEvery); t < c.FaultPhase; t += around(c.NodeKillEvery) {
		ev = append(ev, Event{At: t, Kind: KillNode, Node: nodes[rng.IntN(len(nodes))], Pick: rng.Float64(),
			Delay: between(500*time.Millisecond, 5*time.Second)})
	}
	for t := around(c.StepDownEvery); t < c.FaultPhase; t += around(c.StepDownEvery) {
		r, target := rng.Float64(), ""
		for _, w := range stepDownTargets() {
			if target == "" && r < w.weight {
				target = w.target
			}
			r -= w.weight
		}
		if target == "" {
			target = "NOTIFY"
		}
		ev = append(ev, Event{At: t, Kind: StepDown, Target: target})
	}
	for t := around(c.PartitionEvery); t < c.FaultPhase; t += around(c.PartitionEvery) {
		e := Event{At: t, Kind: Partition, Node: nodes[rng.IntN(len(nodes))], Pick: rng.Float64(),
			Delay: between(3*time.Second, 12*time.Second)}
		switch r := rng.Float64(); {
		case r < 0.25:
			e.Clients = "refuse"
		case r < 0.5:
			e.Clients = "blackhole"
		}
		ev = append(ev, e)
	}
	return ev
}

// faultModes are the outage modes a run draws from.
func faultModes() []emulator.FaultMode {
	return []emulator.FaultMode{emulator.Fault5xx, emulator.FaultJSON5xx, emulator.FaultDrop,
		emulator.FaultSlow, emulator.FaultBlackhole, emulator.FaultDeliverDrop}
}

// telegramFault draws an outage or a 429 storm and how long it lasts;
// prior is the number of outages before it. A share of the outages
// (c.LongOutageFraction: the second, then one in 1/fraction) fail every
// request for longer than the workers' fallback_after, so that even a
// short run has one.
func telegramFault(rng *rand.Rand, c Config, private, prior int, between func(lo, hi time.Duration) time.Duration) (Event, time.Duration) {
	if rng.Float64() < 0.65 {
		if every := longEvery(c.LongOutageFraction); every > 0 && prior%every == 1%every {
			modes := []emulator.FaultMode{emulator.Fault5xx, emulator.FaultJSON5xx, emulator.FaultDrop, emulator.FaultBlackhole}
			o := emulator.Outage{Mode: modes[rng.IntN(len(modes))], Probability: 1,
				Duration: c.Channels.FallbackAfter + between(3*time.Second, 8*time.Second)}
			return Event{Kind: TelegramOutage, Outage: o, Long: true}, o.Duration
		}
		modes := faultModes()
		o := emulator.Outage{Mode: modes[rng.IntN(len(modes))], Probability: 1, Duration: between(2*time.Second, 8*time.Second)}
		if rng.Float64() < 0.25 {
			o.Probability = 0.3 + 0.4*rng.Float64()
		}
		if o.Mode == emulator.FaultSlow {
			// Below the worker's request timeout: a slow answer, not a
			// timeout (a timed-out request may have been delivered).
			o.Delay = between(time.Second, 2500*time.Millisecond)
		}
		return Event{Kind: TelegramOutage, Outage: o}, o.Duration
	}
	e := Event{Kind: RateLimitStorm}
	var took time.Duration
	for range 1 + rng.IntN(3) {
		pr := emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 1 + rng.Int64N(4)}
		if rng.Float64() < 0.4 {
			pr = emulator.PauseRequest{Scope: emulator.ScopeChat, ChatID: privateBase + 1 + rng.Int64N(int64(private)), RetryAfter: 1 + rng.Int64N(3)}
		}
		after := time.Duration(pr.RetryAfter)*time.Second + between(0, time.Second)
		e.Pauses = append(e.Pauses, StormPause{Pause: pr, After: after})
		took += after
	}
	return e, took
}

// longEvery is how many outages there are per long one, 0 for none.
func longEvery(fraction float64) int {
	if fraction <= 0 {
		return 0
	}
	return max(1, int(math.Round(1/fraction)))
}

// providerFault draws a fault of the MAX or SMS emulator — an outage of
// 2–6 s in one of the modes both emulators share, or a 429 pause of 1–3 s
// — and how long it lasts.
func providerFault(rng *rand.Rand, between func(lo, hi time.Duration) time.Duration) (Event, time.Duration) {
	ch := string(notify.ChannelMax)
	if rng.IntN(2) == 0 {
		ch = string(notify.ChannelSMS)
	}
	if rng.Float64() < 0.3 {
		f := ProviderOutage{Channel: ch, RetryAfter: 1 + rng.Int64N(3)}
		return Event{Kind: ProviderFault, Provider: f}, time.Duration(f.RetryAfter) * time.Second
	}
	modes := []string{"5xx", "drop", "slow", "blackhole", "deliver-drop"}
	f := ProviderOutage{Channel: ch, Mode: modes[rng.IntN(len(modes))], Probability: 1, Duration: between(2*time.Second, 6*time.Second)}
	if rng.Float64() < 0.3 {
		f.Probability = 0.3 + 0.4*rng.Float64()
	}
	if f.Mode == "slow" {
		f.Delay = between(500*time.Millisecond, 2*time.Second)
	}
	return Event{Kind: ProviderFault, Provider: f}, f.Duration
}

// planCustomers draws the addresses of each private chat's customer
// besides the chat, and the recipients that cannot receive from the start:
// a few emails bounce, a few phones unsubscribed, a few MAX users stopped
// the bot. Of the chats dead from the start, 3000001's customer has an
// email and 3000003's a phone (3000002's has neither: dead letter and dead
// event on Telegram).
func planCustomers(rng *rand.Rand, c Config, private int) (map[int64]Customer, map[string]map[string]string) {
	cs := map[int64]Customer{}
	dead := map[string]map[string]string{}
	mark := func(ch notify.Channel, token, reason string) {
		if dead[string(ch)] == nil {
			dead[string(ch)] = map[string]string{}
		}
		dead[string(ch)][token] = reason
	}
	for chat, reason := range startDead() {
		mark(notify.ChannelTelegram, strconv.FormatInt(chat, 10), reason)
	}
	cs[3_000_001] = Customer{Email: "c3000001@" + mailDomain}
	cs[3_000_003] = Customer{Phone: "+15553000003"}
	for i := 1; i <= private; i++ {
		chat := privateBase + int64(i)
		var cu Customer
		if rng.Float64() < c.EmailShare {
			domain := mailDomain
			if rng.Float64() < 0.04 {
				domain = bounceDomain
			}
			cu.Email = fmt.Sprintf("c%d@%s", chat, domain)
			if domain == bounceDomain {
				mark(notify.ChannelEmail, "e"+notify.HashAddress(strings.ToLower(cu.Email)), "hard_bounce")
			}
		}
		if rng.Float64() < c.PhoneShare {
			cu.Phone = fmt.Sprintf("+1555%07d", chat%10_000_000)
			if rng.Float64() < 0.04 {
				mark(notify.ChannelSMS, "p"+notify.HashAddress(cu.Phone), "unsubscribed")
			}
		}
		if rng.Float64() < c.MaxShare {
			cu.MaxUserID = maxUserBase + int64(i)
			if rng.Float64() < 0.05 {
				mark(notify.ChannelMax, "u"+strconv.FormatInt(cu.MaxUserID, 10), "blocked")
			}
		}
		if cu != (Customer{}) {
			cs[chat] = cu
		}
	}
	return cs, dead
}

// catalog makes the orders look like orders; an item name with markup
// characters checks the shop's escaping on the way.
func catalog() []shop.Item {
	return []shop.Item{
		{Name: "Sencha 100 g", PriceCents: 890}, {Name: "Filter papers", PriceCents: 320},
		{Name: "Cold brew bottle", PriceCents: 1590}, {Name: "Biscotti <almond>", PriceCents: 410},
		{Name: "Milk frother & whisk", PriceCents: 2450}, {Name: "Gift card", PriceCents: 5000},
	}
}

// planOrders draws n orders over private private chats, the groups (half a
// percent each: a group takes 20 messages a minute, and its backlog must
// drain within the run) and the chats that are dead from the start. About a third of the orders follow
// their predecessor to the same chat, so chats get bursts that queue up in
// the worker and meet the faults together. Each order carries its chat
// customer's other addresses.
func planOrders(rng *rand.Rand, c Config, n, private int, customers map[int64]Customer) []PlannedOrder {
	dead := make([]int64, 0, 3)
	for chat := range startDead() {
		dead = append(dead, chat)
	}
	slices.Sort(dead)
	items := catalog()
	names := []string{"Ada", "Bram", "Céline", "Dara", "Elif", "Femi", "Greta", "Hiro"}
	orders := make([]PlannedOrder, 0, n)
	var prev int64
	for i := range n {
		burst := rng.Float64() < 0.3
		var chat int64
		switch r := rng.Float64(); {
		case burst && prev > privateBase && prev <= privateBase+int64(private):
			chat = prev
		case r < 0.005:
			chat = migratedGroup
		case r < 0.01:
			chat = plainGroup
		case r < 0.03:
			chat = dead[rng.IntN(len(dead))]
		default:
			chat = privateBase + 1 + rng.Int64N(int64(private))
		}
		prev = chat
		cu := customers[chat]
		o := shop.Order{ID: fmt.Sprintf("S%d-%05d", c.Seed, i+1), ChatID: chat, Customer: names[rng.IntN(len(names))],
			Email: cu.Email, Phone: cu.Phone, MaxUserID: cu.MaxUserID}
		for range 1 + rng.IntN(3) {
			it := items[rng.IntN(len(items))]
			it.Qty = 1 + rng.Int64N(3)
			o.Items = append(o.Items, it)
		}
		po := PlannedOrder{Order: o, At: time.Duration(float64(i) / c.OrderRate * float64(time.Second))}
		switch r := rng.Float64(); {
		case r < c.RepeatFraction:
			po.Repeat = RepeatNow
		case r < c.RepeatFraction+c.LateRepeatFraction:
			po.Repeat = RepeatLate
		}
		orders = append(orders, po)
	}
	return orders
}

// clustered reports whether the plan is a cluster run's.
func (p Plan) clustered() bool {
	for _, e := range p.Events {
		switch e.Kind {
		case KillNode, StepDown, Partition:
			return true
		}
	}
	return false
}

// count returns how many events of kind k the plan holds.
func (p Plan) count(k Kind) int {
	n := 0
	for _, e := range p.Events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// customersWith counts the customers with an address on channel (email,
// sms, max).
func (p Plan) customersWith(channel string) int {
	n := 0
	for _, c := range p.Customers {
		switch {
		case channel == "email" && c.Email != "", channel == "sms" && c.Phone != "", channel == "max" && c.MaxUserID != 0:
			n++
		}
	}
	return n
}

// longOutages counts the Telegram outages longer than fallback_after.
func (p Plan) longOutages() int {
	n := 0
	for _, e := range p.Events {
		if e.Kind == TelegramOutage && e.Long {
			n++
		}
	}
	return n
}
