package emulator_test

import (
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

func TestMaxMessagesKeepsTheNewest(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{MaxMessages: 3})
	for i := range 5 {
		e.clock.Advance(time.Nanosecond)
		if a := e.send(int64(i+1), "x"); !a.OK {
			t.Fatal(a.Description)
		}
	}
	msgs := e.emu.Messages()
	if len(msgs) != 3 || msgs[0].ChatID != 3 || msgs[2].ChatID != 5 {
		t.Fatalf("kept %+v, want chats 3, 4, 5 in order", msgs)
	}
	if !msgs[0].Time.Before(msgs[1].Time) {
		t.Errorf("times %v, %v not increasing at ns precision", msgs[0].Time, msgs[1].Time)
	}
	if s := e.emu.Stats(); s.Delivered != 5 || s.MessagesKept != 3 {
		t.Errorf("Delivered %d, MessagesKept %d; want 5, 3", s.Delivered, s.MessagesKept)
	}
	if got := e.emu.ChatMessages(4); len(got) != 1 || got[0].ChatID != 4 {
		t.Errorf("ChatMessages(4) = %+v", got)
	}
}

// TestManyMessages records 100k messages to 100k chats with limits on (paid
// broadcast, so the bot bucket does not bind) and checks they are all kept.
// Under the race detector it records 20k, which takes as long.
func TestManyMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("records 100k messages")
	}
	t.Parallel()
	e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	for i := range n {
		if i%1000 == 0 {
			e.clock.Advance(time.Second) // stay within 1000/s
		}
		if a := e.sendPaid(int64(i+1), "order shipped"); !a.OK {
			t.Fatalf("message %d: %d %s", i, a.status, a.Description)
		}
	}
	if got := len(e.emu.Messages()); got != n {
		t.Errorf("kept %d messages, want %d", got, n)
	}
	if got := len(e.emu.ChatMessages(int64(n / 2))); got != 1 {
		t.Errorf("ChatMessages = %d messages, want 1", got)
	}
}
