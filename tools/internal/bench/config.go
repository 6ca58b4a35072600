package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Scenarios lists the scenario groups [Run] knows, in the order it runs them.
var Scenarios = []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}

// Config is what the suite runs and how big each scenario is. Start from
// [Defaults] (the sizes issue 7 names) or [Smoke] (tiny sizes for a test).
type Config struct {
	// BinDir holds the binaries `make build` builds: nats-server, the nats
	// CLI, publisher, telegram-worker, tgnotify.
	BinDir string
	// WorkDir is scratch space: databases, the JetStream store, process
	// logs. It is emptied at the start.
	WorkDir string
	// KeepLogs keeps every stack's process logs under WorkDir, not only
	// those of failed runs: to find out where a run's time went.
	KeepLogs bool
	// NATSConfig is the production nats-server configuration
	// (configs/nats-server.conf); servers are started from it with their
	// addresses and store directory replaced, and sync_interval as each
	// scenario says.
	NATSConfig string
	// DeadLettersScript is scripts/dead-letters.sh, the reference of
	// scenario 9.
	DeadLettersScript string
	// Only selects scenario groups ("1".."9"); empty runs all.
	Only []string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer `json:"-"`

	// Runs is how many times each scenario is measured (tools/cmd/bench asks
	// for at least 3).
	Runs int
	// TelegramRuns is the number of runs of scenario 4, which is bound by
	// Telegram's 30 msg/s (1500 messages take 50 s a run).
	TelegramRuns int
	// SyncRuns is the number of runs of the rows measured on a server that
	// fsyncs every write (sync_interval: always, the production setting).
	SyncRuns int

	// EnqueueOrders is how many orders each variant of scenario 1 places
	// per run, in interleaved blocks of EnqueueBlock.
	EnqueueOrders, EnqueueBlock int
	// DrainRows is the outbox size of scenario 2; DrainSyncRows the size
	// of its run on an fsync-always server.
	DrainRows, DrainSyncRows int
	// PubAckOrders is how many orders scenario 3a commits per run, one at
	// a time, PubAckSyncOrders on an fsync-always server; DeliveryOrders
	// the same for 3b. LatencyWarmup of them are not counted.
	PubAckOrders, PubAckSyncOrders, DeliveryOrders, LatencyWarmup int
	// LimitChats is how many chats scenario 4 sends one notification
	// each; HotOthers and HotMessages size the hot-chat run.
	LimitChats, HotOthers, HotMessages int
	// StormOrders is the size of the 429-storm run; a bot-wide pause of
	// StormPause is opened StormPauses times, StormGap apart.
	StormOrders, StormPauses int
	StormPause, StormGap     time.Duration
	// CeilingMessages is the backlog the worker sends in scenario 5, with
	// CeilingInFlight concurrent requests (0, the default: the number the
	// worker derives at the rates scenario 5 sets, delivery.InFlightFor);
	// CeilingSyncMessages on an fsync-always server.
	CeilingMessages, CeilingInFlight, CeilingSyncMessages int
	// MemoryPending and MemoryChats size scenario 6's backlog; the worker's
	// memory is observed for MemoryObserve once it holds all it can.
	MemoryPending, MemoryChats int
	MemoryObserve              time.Duration
	// FailoverRuns is the number of runs of each fault of scenario 7;
	// FailoverRate the orders per second placed during them; each run
	// warms up for FailoverWarmup, then measures a reference window and a
	// fault window of FailoverWindow each.
	FailoverRuns                   int
	FailoverRate                   float64
	FailoverWarmup, FailoverWindow time.Duration
	// EndToEndRate is how many orders a second scenario 8 places, for
	// EndToEndDuration, round robin over EndToEndChats chats.
	EndToEndRate, EndToEndChats int
	EndToEndDuration            time.Duration
	// DLQLetters is how many dead letters scenario 9 lists with tgnotify
	// dlq list; DLQScriptLetters how many of them the script lists (it
	// reads one per nats CLI call).
	DLQLetters, DLQScriptLetters int
}

// Defaults returns the full suite of issue 7, sized to take about a quarter
// of an hour on a two-core machine.
func Defaults() Config {
	return Config{
		BinDir:            "bin",
		WorkDir:           ".bench",
		NATSConfig:        "configs/nats-server.conf",
		DeadLettersScript: "scripts/dead-letters.sh",

		Runs:         5,
		TelegramRuns: 3,
		SyncRuns:     3,

		EnqueueOrders: 5000, EnqueueBlock: 50,
		DrainRows: 100_000, DrainSyncRows: 5_000,
		PubAckOrders: 500, PubAckSyncOrders: 300, DeliveryOrders: 200, LatencyWarmup: 10,
		LimitChats: 1500, HotOthers: 1000, HotMessages: 100,
		StormOrders: 600, StormPauses: 3, StormPause: 3 * time.Second, StormGap: 4 * time.Second,
		CeilingMessages: 50_000, CeilingInFlight: 0, CeilingSyncMessages: 5_000,
		MemoryPending: 1_000_000, MemoryChats: 200_000, MemoryObserve: 12 * time.Second,
		FailoverRuns: 3, FailoverRate: 20, FailoverWarmup: 5 * time.Second, FailoverWindow: 15 * time.Second,
		EndToEndRate: 1000, EndToEndChats: 10_000, EndToEndDuration: time.Minute,
		DLQLetters: 20_000, DLQScriptLetters: 300,
	}
}

// Smoke returns a configuration that runs every scenario end to end at tiny
// sizes, one run each, in seconds: a test that keeps the suite from rotting.
// Its figures mean nothing.
func Smoke(binDir, workDir, natsConfig, deadLettersScript string) Config {
	return Config{
		BinDir: binDir, WorkDir: workDir, NATSConfig: natsConfig, DeadLettersScript: deadLettersScript,

		Runs: 1, TelegramRuns: 1, SyncRuns: 1,

		EnqueueOrders: 20, EnqueueBlock: 5,
		DrainRows: 300, DrainSyncRows: 50,
		PubAckOrders: 8, PubAckSyncOrders: 4, DeliveryOrders: 6, LatencyWarmup: 2,
		LimitChats: 12, HotOthers: 75, HotMessages: 5,
		StormOrders: 40, StormPauses: 1, StormPause: time.Second, StormGap: 300 * time.Millisecond,
		CeilingMessages: 300, CeilingInFlight: 16, CeilingSyncMessages: 50,
		MemoryPending: 600, MemoryChats: 300, MemoryObserve: 500 * time.Millisecond,
		FailoverRuns: 1, FailoverRate: 10, FailoverWarmup: time.Second, FailoverWindow: 3 * time.Second,
		EndToEndRate: 100, EndToEndChats: 50, EndToEndDuration: time.Second,
		DLQLetters: 40, DLQScriptLetters: 5,
	}
}

// Validate reports the first setting that cannot work, naming it.
func (c Config) Validate() error {
	var errs []error
	if c.BinDir == "" || c.WorkDir == "" || c.NATSConfig == "" || c.DeadLettersScript == "" {
		errs = append(errs, errors.New("BinDir, WorkDir, NATSConfig and DeadLettersScript are required"))
	}
	for _, s := range c.Only {
		if !slices.Contains(Scenarios, s) {
			errs = append(errs, fmt.Errorf("unknown scenario %q in Only (want one of %s)", s, strings.Join(Scenarios, ", ")))
		}
	}
	for _, p := range []struct {
		name string
		v    int
	}{
		{"Runs", c.Runs}, {"TelegramRuns", c.TelegramRuns}, {"SyncRuns", c.SyncRuns},
		{"EnqueueOrders", c.EnqueueOrders}, {"EnqueueBlock", c.EnqueueBlock},
		{"DrainRows", c.DrainRows}, {"DrainSyncRows", c.DrainSyncRows},
		{"PubAckOrders", c.PubAckOrders}, {"PubAckSyncOrders", c.PubAckSyncOrders}, {"DeliveryOrders", c.DeliveryOrders},
		{"LimitChats", c.LimitChats}, {"HotOthers", c.HotOthers}, {"HotMessages", c.HotMessages},
		{"StormOrders", c.StormOrders}, {"StormPauses", c.StormPauses},
		{"CeilingMessages", c.CeilingMessages}, {"CeilingSyncMessages", c.CeilingSyncMessages},
		{"MemoryPending", c.MemoryPending}, {"MemoryChats", c.MemoryChats}, {"FailoverRuns", c.FailoverRuns},
		{"EndToEndRate", c.EndToEndRate}, {"EndToEndChats", c.EndToEndChats},
		{"DLQLetters", c.DLQLetters}, {"DLQScriptLetters", c.DLQScriptLetters},
	} {
		if p.v < 1 {
			errs = append(errs, fmt.Errorf("%s: %d must be at least 1", p.name, p.v))
		}
	}
	if c.CeilingInFlight < 0 {
		errs = append(errs, fmt.Errorf("CeilingInFlight: %d must not be negative (0: what the worker derives)", c.CeilingInFlight))
	}
	if c.LatencyWarmup < 0 || c.LatencyWarmup >= min(c.PubAckOrders, c.PubAckSyncOrders, c.DeliveryOrders) {
		errs = append(errs, fmt.Errorf("LatencyWarmup: %d must be below every latency scenario's order count", c.LatencyWarmup))
	}
	if c.MemoryChats > c.MemoryPending {
		errs = append(errs, fmt.Errorf("MemoryChats: %d must not exceed MemoryPending %d", c.MemoryChats, c.MemoryPending))
	}
	if c.StormPause < time.Second || c.StormPause%time.Second != 0 {
		errs = append(errs, fmt.Errorf("StormPause: %v must be whole seconds (Telegram's retry_after)", c.StormPause))
	}
	if c.StormGap <= 0 || c.MemoryObserve <= 0 {
		errs = append(errs, errors.New("StormGap and MemoryObserve must be positive"))
	}
	if c.FailoverRate <= 0 || c.FailoverRate > 25 || c.FailoverWarmup <= 0 || c.FailoverWindow < 2*time.Second {
		errs = append(errs, fmt.Errorf("FailoverRate %v (want (0, 25] a second: under Telegram's 30), FailoverWarmup %v and FailoverWindow %v (at least 2s) are not usable",
			c.FailoverRate, c.FailoverWarmup, c.FailoverWindow))
	}
	if c.EndToEndDuration < time.Second || c.EndToEndDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("EndToEndDuration: %v must be whole seconds", c.EndToEndDuration))
	}
	if c.EndToEndRate > int(time.Second) {
		errs = append(errs, fmt.Errorf("EndToEndRate: %d orders a second is more than one a nanosecond", c.EndToEndRate))
	}
	return errors.Join(errs...)
}

// selected reports whether scenario group s runs.
func (c Config) selected(s string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, s) }
