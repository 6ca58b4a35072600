package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
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
}

// NewPlan derives the schedule of a run from c.Seed.
func NewPlan(c Config) Plan {
	p := Plan{Seed: c.Seed}
	rng := rand.New(rand.NewPCG(uint64(c.Seed), 0x6368_616f_735f_7467))
	n := int(c.FaultPhase.Seconds() * c.OrderRate)
	p.Private = max(10, n/c.OrdersPerChat)
	p.Orders = planOrders(rng, c, n, p.Private)

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
	for t := between(2*time.Second, c.TelegramFaultEvery); t < c.FaultPhase; {
		e, took := telegramFault(rng, p.Private, between)
		e.At = t
		ev = append(ev, e)
		t += took + around(c.TelegramFaultEvery)
	}
	candidates := rng.Perm(p.Private)
	for i := range min(c.RuntimeBlocks, p.Private/2) {
		chat := privateBase + 1 + int64(candidates[i])
		p.RuntimeBlocked = append(p.RuntimeBlocked, chat)
		ev = append(ev, Event{At: between(c.FaultPhase/20, c.FaultPhase*9/10), Kind: BlockChat, Chat: chat})
	}
	slices.SortStableFunc(ev, func(a, b Event) int { return int(a.At - b.At) })
	p.Events = ev
	return p
}

// faultModes are the outage modes a run draws from.
func faultModes() []emulator.FaultMode {
	return []emulator.FaultMode{emulator.Fault5xx, emulator.FaultJSON5xx, emulator.FaultDrop,
		emulator.FaultSlow, emulator.FaultBlackhole, emulator.FaultDeliverDrop}
}

// telegramFault draws an outage or a 429 storm and how long it lasts.
func telegramFault(rng *rand.Rand, private int, between func(lo, hi time.Duration) time.Duration) (Event, time.Duration) {
	if rng.Float64() < 0.65 {
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
// the worker and meet the faults together.
func planOrders(rng *rand.Rand, c Config, n, private int) []PlannedOrder {
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
		o := shop.Order{ID: fmt.Sprintf("S%d-%05d", c.Seed, i+1), ChatID: chat, Customer: names[rng.IntN(len(names))]}
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
