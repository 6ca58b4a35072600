package chaos

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

func TestPlanIsDeterministic(t *testing.T) {
	c := ShortConfig()
	c.Seed = 42
	a, b := NewPlan(c), NewPlan(c)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans from one seed differ")
	}
	c.Seed = 43
	if reflect.DeepEqual(a.Events, NewPlan(c).Events) {
		t.Fatal("plans from different seeds are equal")
	}
}

func TestPlanShape(t *testing.T) {
	for _, c := range []Config{ShortConfig(), LongConfig()} {
		t.Run(c.Name, func(t *testing.T) {
			p := NewPlan(c)
			if want := int(c.FaultPhase.Seconds() * c.OrderRate); len(p.Orders) != want {
				t.Errorf("%d orders, want %d", len(p.Orders), want)
			}
			perChat := map[int64]int{}
			var prev time.Duration
			for _, o := range p.Orders {
				if o.At < prev || o.At >= c.FaultPhase {
					t.Fatalf("order %s at %v: out of order or after the phase", o.Order.ID, o.At)
				}
				prev = o.At
				if err := o.Order.Validate(); err != nil {
					t.Fatalf("order %s is invalid: %v", o.Order.ID, err)
				}
				perChat[o.Order.ChatID]++
			}
			for _, chat := range []int64{migratedGroup, plainGroup} {
				if perChat[chat] < 2 {
					t.Errorf("group %d gets %d orders, want several", chat, perChat[chat])
				}
			}
			if !slices.IsSortedFunc(p.Events, func(a, b Event) int { return int(a.At - b.At) }) {
				t.Error("events are not sorted")
			}
			for _, e := range p.Events {
				if e.At < 0 || e.At >= c.FaultPhase {
					t.Errorf("%v at %v is outside the fault phase", e.Kind, e.At)
				}
				if e.Kind == TelegramOutage {
					if e.Outage.Mode == emulator.FaultSlow && e.Outage.Delay >= c.Worker.RequestTimeout {
						t.Errorf("slow outage delay %v reaches the request timeout", e.Outage.Delay)
					}
				}
			}
			minimum := int(c.FaultPhase / c.WorkerKillEvery / 2)
			for _, k := range []Kind{KillPublisher, KillWorker} {
				if n := p.count(k); n < minimum {
					t.Errorf("%d × %v, want at least %d", n, k, minimum)
				}
			}
			for _, k := range []Kind{RestartNATS, TelegramOutage, RateLimitStorm, StartStandby, KillChannelWorker, RestartMailpit, ProviderFault} {
				if p.count(k) == 0 {
					t.Errorf("no %v", k)
				}
			}
			if p.longOutages() == 0 {
				t.Error("no Telegram outage longer than fallback_after")
			}
			for _, e := range p.Events {
				if e.Kind == TelegramOutage && e.Long && (e.Outage.Duration <= c.Channels.FallbackAfter || e.Outage.Probability != 1) {
					t.Errorf("long outage %+v: want every request failing for longer than %v", e.Outage, c.Channels.FallbackAfter)
				}
			}
			for _, ch := range []string{"email", "sms", "max"} {
				share := map[string]float64{"email": c.EmailShare, "sms": c.PhoneShare, "max": c.MaxShare}[ch]
				if got, want := float64(p.customersWith(ch))/float64(p.Private), share; got < want/2 || got > want*2 {
					t.Errorf("%.2f of the customers have a %s address, want about %.2f", got, ch, want)
				}
			}
			for _, o := range p.Orders {
				if cu := p.Customers[o.Order.ChatID]; cu.Email != o.Order.Email || cu.Phone != o.Order.Phone || cu.MaxUserID != o.Order.MaxUserID {
					t.Fatalf("order %s carries %+v, its customer has %+v", o.Order.ID, o.Order, cu)
				}
			}
			if len(p.DeadRecipients["telegram"]) != len(startDead()) {
				t.Errorf("dead Telegram chats %v, want those of startDead", p.DeadRecipients["telegram"])
			}
			if p.count(BlockChat) != c.RuntimeBlocks || len(p.RuntimeBlocked) != c.RuntimeBlocks {
				t.Errorf("%d blocks of %v, want %d", p.count(BlockChat), p.RuntimeBlocked, c.RuntimeBlocks)
			}
			for _, chat := range p.RuntimeBlocked {
				if perChat[chat] == 0 {
					t.Logf("chat %d is blocked during the run but gets no orders", chat)
				}
			}
		})
	}
}

// A cluster run keeps the seed's base schedule and adds node kills,
// step-downs and partitions; every nats-server restart names a node.
func TestClusterPlan(t *testing.T) {
	c := ShortConfig()
	c.Seed = 11
	base := NewPlan(c)
	c.Cluster = true
	p := NewPlan(c)
	if !reflect.DeepEqual(base.Orders, p.Orders) {
		t.Fatal("-cluster changed the orders")
	}
	var kept []Event
	for _, e := range p.Events {
		switch e.Kind {
		case KillNode, StepDown, Partition:
			continue
		case RestartNATS:
			if !slices.Contains(clusterNodes(), e.Node) {
				t.Errorf("restart at %v names node %q", e.At, e.Node)
			}
			e.Node = ""
		}
		kept = append(kept, e)
	}
	if !reflect.DeepEqual(kept, base.Events) {
		t.Error("-cluster changed the base schedule")
	}
	if base.clustered() || !p.clustered() {
		t.Errorf("clustered: base %v, cluster %v", base.clustered(), p.clustered())
	}
	for _, k := range []Kind{KillNode, StepDown, Partition} {
		if p.count(k) == 0 {
			t.Errorf("no %v", k)
		}
	}
	for _, e := range p.Events {
		switch e.Kind {
		case KillNode, Partition:
			if !slices.Contains(clusterNodes(), e.Node) || e.Delay <= 0 {
				t.Errorf("%v %+v: want a node and a duration", e.Kind, e)
			}
		case StepDown:
			if !slices.ContainsFunc(stepDownTargets(), func(w struct {
				target string
				weight float64
			}) bool {
				return w.target == e.Target
			}) {
				t.Errorf("step-down of %q", e.Target)
			}
		}
	}
}
