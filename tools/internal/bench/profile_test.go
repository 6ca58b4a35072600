package bench

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	tgchannel "github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// The benchmarks in this file run one side of a scenario inside the test
// binary, against a nats-server process, so that `go test -cpuprofile`
// profiles exactly the code the scenario measures:
//
//	cd tools
//	TGNOTIFY_BIN=$PWD/../bin go test -run '^$' -bench WorkerCeiling -benchtime 30000x -cpuprofile cpu.out ./internal/bench
//	go tool pprof -top cpu.out
//
// They are not part of the report; BENCHMARKS.md quotes their profiles
// where a goal is missed.

// profileRunner returns a runner whose stacks live in the test's temporary
// directory, or skips when the binaries are not built.
func profileRunner(tb testing.TB) *runner {
	tb.Helper()
	bin := binDir(tb)
	cfg := Smoke(bin, tb.TempDir(), filepath.Join("..", "..", "..", "configs", "nats-server.conf"))
	return &runner{cfg: cfg, progress: testWriter{tb}, report: &Report{}}
}

// BenchmarkWorkerCeiling is scenario 5 with pkg/delivery running in this
// process (wired as cmd/telegram-worker wires it, with scenario 5's flags)
// instead of bin/telegram-worker: b.N messages to distinct chats, limits
// off, on a server with the default sync (5) and one that fsyncs every
// write (5′). The profile holds the worker and the emulator; the
// nats-server is a separate process.
func BenchmarkWorkerCeiling(b *testing.B) {
	b.Run("default-sync", func(b *testing.B) { benchmarkWorkerCeiling(b, syncDefault) })
	b.Run("sync-always", func(b *testing.B) { benchmarkWorkerCeiling(b, syncAlways) })
}

func benchmarkWorkerCeiling(b *testing.B, sync serverSync) {
	r := profileRunner(b)
	ctx := context.Background()
	st, err := r.newStack(ctx, "profile-worker", sync)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.close() })
	if err := st.provision(ctx); err != nil {
		b.Fatal(err)
	}
	if err := st.startEmulator(emulator.Limits{}); err != nil {
		b.Fatal(err)
	}
	if err := preload(ctx, st, "P-", b.N, func(i int) int64 { return int64(9_000_000 + i) }); err != nil {
		b.Fatal(err)
	}
	res, err := jetstream.ProvisionWorker(ctx, st.js, jetstream.WorkerSettings{MaxAckPending: workerMaxAckPending})
	if err != nil {
		b.Fatal(err)
	}
	api, err := botapi.New(emulatorToken, botapi.WithBaseURL(st.emu.url), botapi.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ch, err := tgchannel.New(tgchannel.Config{PaidBroadcast: true, BotRate: 1e6, ChatRate: 1000}, api)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := delivery.New(delivery.Config{MaxInFlight: r.cfg.CeilingInFlight, SingleRecordWrites: sync == syncDefault},
		delivery.Deps{JS: st.js, Resources: res, Channel: ch, Logger: discard(), Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	before := st.clocks()
	go func() { done <- w.Run(runCtx) }()
	err = waitFor(ctx, 10*time.Minute, "for every message to be sent", func() bool { return st.emu.emu.Stats().Delivered >= int64(b.N) })
	if err == nil {
		err = waitFor(ctx, time.Minute, "for every message to be acknowledged", func() bool { return consumerIdle(ctx, st.js) })
	}
	f := before.figures(st.clocks(), b.N)
	b.StopTimer()
	stop()
	if rerr := <-done; rerr != nil {
		b.Fatal(rerr)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(f.rate(), "msgs/s")
	b.ReportMetric(f.cpu(), "cpu-µs/msg")
	b.ReportMetric(f.serverCPU(), "server-cpu-µs/msg")
	b.ReportMetric(counterValue(reg, "tgnotify_worker_event_errors_total"), "event-errors")
	b.ReportMetric(counterValue(reg, "tgnotify_worker_record_errors_total"), "record-errors")
	for name, unit := range map[string]string{
		"tgnotify_worker_record_lookup_batch_keys":   "keys/lookup",
		"tgnotify_worker_record_write_batch_records": "records/write",
	} {
		if n, sum := histogram(reg, name); n > 0 {
			b.ReportMetric(sum/float64(n), unit)
		}
	}
}

// histogram returns the count and sum of a histogram in reg.
func histogram(reg *prometheus.Registry, name string) (uint64, float64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}

// BenchmarkDrainOutbox is scenario 2's outbox side alone: pkg/publisher
// drains b.N rows into NOTIFY on a nats-server process. The profile holds
// the publisher and SQLite.
func BenchmarkDrainOutbox(b *testing.B) {
	r := profileRunner(b)
	ctx := context.Background()
	st, err := r.newStack(ctx, "profile-drain", syncDefault)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.close() })
	db := filepath.Join(st.dir, "drain.db")
	if err := fillOutbox(ctx, db, "P-", b.N, 1000, func(i int) int64 { return int64(1000 + i%drainChats) }); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	f, err := r.drainOutbox(ctx, st, db, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(f.rate(), "msgs/s")
	b.ReportMetric(f.cpu(), "cpu-µs/msg")
}

// binDir returns the directory of the built binaries ($TGNOTIFY_BIN, set by
// make test) or skips the test.
func binDir(tb testing.TB) string {
	tb.Helper()
	return builtbin.Dir(tb, "nats-server", "publisher", "telegram-worker")
}

// testWriter sends progress lines to the test log.
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(string(bytes.TrimSuffix(p, []byte("\n"))))
	return len(p), nil
}

// discard is a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
