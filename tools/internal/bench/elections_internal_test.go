package bench

import (
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestDescribeElectionsSlowestFirst(t *testing.T) {
	es := []election{
		{group: raftGroup{stream: "KV_notify_chats"}, after: 4200 * time.Millisecond},
		{group: raftGroup{stream: "NOTIFY", consumer: "telegram-worker"}, after: 8960 * time.Millisecond},
		{group: raftGroup{stream: "KV_notify_delivered"}, err: errors.New("no new leader")},
		{group: raftGroup{stream: "NOTIFY_DEAD"}, after: 6 * time.Second},
	}
	got := describeElections(es)
	want := "; it also led KV_notify_delivered: no new leader, NOTIFY/telegram-worker 9.0 s, NOTIFY_DEAD 6.0 s, KV_notify_chats 4.2 s"
	if got != want {
		t.Fatalf("describeElections =\n%q\nwant\n%q", got, want)
	}
	if got := describeElections(nil); got != "" {
		t.Fatalf("describeElections(nil) = %q, want nothing", got)
	}
}

func TestConsumerLedByCountsOnlyDurables(t *testing.T) {
	on := func(durable, leader string) *natsjs.ConsumerInfo {
		return &natsjs.ConsumerInfo{Config: natsjs.ConsumerConfig{Durable: durable}, Cluster: &natsjs.ClusterInfo{Leader: leader}}
	}
	cases := []struct {
		name string
		ci   *natsjs.ConsumerInfo
		want bool
	}{
		{"durable on the node", on("telegram-worker", "n1"), true},
		{"durable elsewhere", on("telegram-worker", "n2"), false},
		{"ephemeral KV watch on the node", on("", "n1"), false},
		{"no cluster info", &natsjs.ConsumerInfo{Config: natsjs.ConsumerConfig{Durable: "x"}}, false},
	}
	for _, c := range cases {
		if got := consumerLedBy(c.ci, "n1"); got != c.want {
			t.Errorf("%s: consumerLedBy = %v, want %v", c.name, got, c.want)
		}
	}
}
