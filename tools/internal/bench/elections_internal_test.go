package bench

import (
	"errors"
	"testing"
	"time"
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
