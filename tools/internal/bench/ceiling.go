package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// paidLimit is Telegram's bot-wide limit with allow_paid_broadcast, the
// reference of scenario 5.
const paidLimit = 1000.0

// ceilingFlags run the worker in paid-broadcast mode with limits far above
// anything it can reach, so that only the worker itself limits the rate.
// Against a server with the default sync the worker writes its delivery
// records one by one, as it should be configured there: atomic batches
// save fsyncs only on a server that makes them.
// inFlight 0 leaves the attempts in flight to the worker.
func ceilingFlags(inFlight int, sync serverSync) []string {
	flags := []string{"-paid-broadcast", "-bot-rate", "1000000", "-chat-rate", "1000"}
	if inFlight > 0 {
		flags = append(flags, "-max-in-flight", strconv.Itoa(inFlight))
	}
	if sync == syncDefault {
		flags = append(flags, "-single-record-writes")
	}
	return flags
}

// inFlightNote names the attempts in flight of a run: inFlight, or with 0
// what the worker derives itself at scenario 5's rates (delivery.InFlightFor:
// its most, which depends on whether it writes in atomic batches).
func inFlightNote(inFlight int, sync serverSync) string {
	if inFlight > 0 {
		return fmt.Sprintf("%d requests in flight", inFlight)
	}
	return fmt.Sprintf("%d requests in flight, the number the worker derives itself at these rates",
		delivery.InFlightFor(rate.Inf, sync == syncDefault))
}

// ceiling is scenario 5: the worker's own ceiling with the limits off.
func (r *runner) ceiling(ctx context.Context) []*Result {
	var out []*Result
	for _, v := range []struct {
		id   string
		sync serverSync
		msgs int
		runs int
	}{
		{"5", syncDefault, r.cfg.CeilingMessages, r.cfg.Runs},
		{"5′", syncAlways, r.cfg.CeilingSyncMessages, r.cfg.SyncRuns},
	} {
		res := &Result{
			ID: v.id, Title: fmt.Sprintf("Worker ceiling: %s messages, limits off, %s", group(int64(v.msgs)), v.sync),
			Ours: "worker send rate", Reference: "Telegram's paid-broadcast limit",
			Unit: "msg/s", RefUnit: "msg/s",
			Goal: Goal{Text: "≥ 5×", Limit: 5},
			ExtraColumns: []string{
				"raw async publish (msg/s)", "ratio to raw publish", "fsynced writes per message",
				"worker CPU µs/msg", "nats-server CPU µs/msg", "emulator CPU µs/msg",
				fmt.Sprintf("CPU-bound ceiling on %d cores (msg/s)", runtime.NumCPU()),
			},
			Method: fmt.Sprintf("A fresh stack per run: nats-server (%s) holding %d notifications to distinct chats, "+
				"published before the worker starts; the emulator in this process with its limits off and no latency; "+
				"`bin/telegram-worker %s` (paid-broadcast mode, limits far above reach, %s). "+
				"Rate: (messages − 1) / (last − first send) from the emulator's timestamps; the run also checks that "+
				"each message was sent once and that the consumer ends with nothing pending or unacknowledged. CPU per "+
				"message: the worker process's CPU time (/proc/<pid>/stat, from its start until every message is acked and every delivered event stored) / messages; likewise the "+
				"nats-server's and this process's (the emulator) over the same span. Their sum bounds what %d cores "+
				"can do: cores / (sum of CPU per message). **Raw async publish**: the run's preload, the same %d "+
				"notifications published into the empty NOTIFY of the same server with nats.go `PublishMsgAsync` "+
				"(`jetstream.NotificationMsg`) and timed to the last PubAck: how fast this server stores one message "+
				"per notification, the worker's reference under the same sync setting. **Fsynced writes per message**: "+
				"the nats-server's fsync and fdatasync calls and its files opened with O_SYNC, counted with "+
				"`perf stat` (syscalls tracepoints) over the same span, per message sent "+
				"(— where perf is not available).",
				v.sync, v.msgs, strings.Join(ceilingFlags(r.cfg.CeilingInFlight, v.sync), " "), inFlightNote(r.cfg.CeilingInFlight, v.sync), runtime.NumCPU(), v.msgs),
		}
		var cpu [3][]float64 // worker, nats-server, emulator: µs per message
		var raw, syncs []float64
		out = append(out, r.measure(ctx, res, v.runs, func(ctx context.Context, run int) (RunFigures, error) {
			f, c, err := r.ceilingRun(ctx, v.sync, run, v.msgs)
			if err == nil {
				for i := range cpu {
					cpu[i] = append(cpu[i], c.cpu[i])
				}
				raw, syncs = append(raw, c.raw), append(syncs, c.syncs)
			}
			return f, err
		}))
		if len(res.Runs) > 0 {
			perRaw := Summarize(ratios(res.column(func(f RunFigures) float64 { return f.Ours }), raw))
			res.Notes = append(res.Notes, fmt.Sprintf("Against raw JetStream async publish of the same notifications on "+
				"the same server (%s msg/s, median): %.2f× (%.2f–%.2f). Fsynced writes per message sent: %s.",
				fmtNum(Summarize(raw).Median), perRaw.Median, perRaw.Min, perRaw.Max, fmtSyncs(Summarize(syncs).Median)))
			w, s, e := Summarize(cpu[0]).Median, Summarize(cpu[1]).Median, Summarize(cpu[2]).Median
			cores := float64(runtime.NumCPU())
			res.Notes = append(res.Notes, fmt.Sprintf("Median CPU per message: worker %.0f µs, nats-server %.0f µs, "+
				"emulator %.0f µs, %.0f µs in all: %.0f cores can send at most %s msg/s, whatever the code's "+
				"concurrency, and less while other work takes CPU. The emulator stands in for Telegram, which in "+
				"production does not share the machine: without it the bound would be %s msg/s.",
				w, s, e, w+s+e, cores, fmtNum(cores*1e6/(w+s+e)), fmtNum(cores*1e6/(w+s))))
		}
	}
	return out
}

// ceilingFigures are what a ceiling run measured besides its figures.
type ceilingFigures struct {
	// cpu is the CPU per message of the worker, the nats-server and the
	// emulator, in µs.
	cpu [3]float64
	// raw is the rate of the preload, raw async publishing, in msg/s.
	raw float64
	// syncs is the nats-server's synced writes per message sent; NaN
	// without perf.
	syncs float64
}

// ceilingRun measures one run.
func (r *runner) ceilingRun(ctx context.Context, sync serverSync, run, n int) (f RunFigures, c ceilingFigures, err error) {
	c.syncs = math.NaN()
	err = r.withStack(ctx, "ceiling", sync, func(st *stack) error {
		if err := st.provision(ctx); err != nil {
			return err
		}
		if err := st.startEmulator(emulator.Limits{}); err != nil {
			return err
		}
		start := time.Now()
		if err := preload(ctx, st, fmt.Sprintf("C%d-", run), n, func(i int) int64 { return int64(9_000_000 + i) }); err != nil {
			return err
		}
		c.raw = float64(n) / time.Since(start).Seconds()
		counter, perr := startSyncCounter(st.nats.Pid(), st.dir)
		if perr == nil {
			defer counter.close()
			if perr = counter.enable(ctx); perr != nil {
				counter.close()
				counter = nil
			}
		}
		if perr != nil {
			r.logf("no count of fsynced writes: %v", perr)
		}
		before := st.clocks()
		if err := st.startWorker(ctx, r.bin("telegram-worker"), ceilingFlags(r.cfg.CeilingInFlight, sync)...); err != nil {
			return err
		}
		timeout := time.Duration(n)*time.Millisecond + 2*time.Minute // at 1000 msg/s, with room
		if err := waitFor(ctx, timeout, "for every message to be sent", func() bool {
			return st.emu.emu.Stats().Delivered >= int64(n)
		}); err != nil {
			return err
		}
		if err := waitFor(ctx, time.Minute, "for every message to be acknowledged", func() bool {
			return consumerIdle(ctx, st.js)
		}); err != nil {
			return err
		}
		// The worker publishes its events without waiting for them: the
		// run ends when the last one is stored.
		var events uint64
		if err := waitFor(ctx, time.Minute, "for every delivered event to be stored", func() bool {
			events, _ = subjectMsgs(ctx, st.js, jetstream.SubjectDelivered)
			return events >= uint64(n)
		}); err != nil {
			return fmt.Errorf("NOTIFY holds %d delivered events, want one per message, %d: %w", events, n, err)
		}
		after := st.clocks()
		if counter != nil {
			if synced, err := counter.stop(ctx); err == nil {
				c.syncs = float64(synced) / float64(n)
			} else {
				r.logf("no count of fsynced writes: %v", err)
			}
		}
		worker, err := ProcessCPU(st.worker.Pid())
		if err != nil {
			return err
		}
		msgs := st.emu.emu.Messages()
		if got := st.emu.emu.Stats().Delivered; got != int64(n) || len(msgs) != n {
			return fmt.Errorf("the emulator accepted %d messages (%d kept), want each of %d once", got, len(msgs), n)
		}
		sends := sendTimes(msgs)
		rate := rateOf(sends)
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
		w, s, e := per(worker), per(after.nats-before.nats), per(after.self-before.self)
		c.cpu = [3]float64{w, s, e}
		bound := float64(runtime.NumCPU()) * 1e6 / (w + s + e)
		f = RunFigures{
			Ours: rate, Reference: paidLimit, Ratio: ratio(rate, paidLimit),
			Extra: []string{
				fmtNum(c.raw), fmt.Sprintf("%.2f", ratio(rate, c.raw)), fmtSyncs(c.syncs),
				fmt.Sprintf("%.0f", w), fmt.Sprintf("%.0f", s), fmt.Sprintf("%.0f", e), fmt.Sprintf("%.0f", bound),
			},
		}
		return nil
	})
	return f, c, err
}

// fmtSyncs formats synced writes per message; — when not counted.
func fmtSyncs(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

// ratios returns a[i]/b[i].
func ratios(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = ratio(a[i], b[i])
	}
	return out
}
