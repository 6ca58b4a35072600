package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// memoryGoal is the worker's RSS goal of issue 7, in MiB.
const memoryGoal = 64.0

// workerMaxAckPending is the worker's default -max-ack-pending: the most
// messages it holds at once, whatever the backlog.
const workerMaxAckPending = 10_000

// memory is scenario 6: the worker's peak RSS with a large backlog.
func (r *runner) memory(ctx context.Context) []*Result {
	res := &Result{
		ID: "6", Title: fmt.Sprintf("Worker memory: %s pending notifications across %s chats", group(int64(r.cfg.MemoryPending)), group(int64(r.cfg.MemoryChats))),
		Ours: "worker peak RSS (VmHWM)", Reference: "the goal",
		Unit: "MiB", RefUnit: "MiB",
		Goal:         Goal{Text: "≤ 64 MiB", AtMost: true, Limit: 1},
		ExtraColumns: []string{"VmRSS at end (MiB)", "held", "lanes", "sent meanwhile"},
		Method: fmt.Sprintf("A fresh stack per run: nats-server (%s) holding %d notifications across %d chats, "+
			"published before the worker starts; the emulator enforcing Telegram's limits, so that nearly all stay "+
			"pending; `bin/telegram-worker` with its defaults (it holds at most -max-ack-pending = %d messages in its "+
			"lanes, the rest waits in the stream). Once the worker holds all it will (its /stats `held` stops "+
			"growing), it runs on for %v, covering a round of InProgress keep-alives; figure: VmHWM from "+
			"/proc/<pid>/status, the peak resident set since the process started.",
			syncDefault, r.cfg.MemoryPending, r.cfg.MemoryChats, workerMaxAckPending, r.cfg.MemoryObserve),
	}
	return []*Result{r.measure(ctx, res, r.cfg.Runs, r.memoryRun)}
}

// workerStats is the part of the worker's /stats the benchmark reads.
type workerStats struct {
	Sent  int64 `json:"sent"`
	Held  int   `json:"held"`
	Lanes int   `json:"lanes"`
}

// saveHeapProfile writes the worker's heap profile (after a collection)
// to path. The worker must run with -pprof.
func (st *stack) saveHeapProfile(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.workerURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reading the worker's heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading the worker's heap profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("saving the worker's heap profile: %w", err)
	}
	return f.Close()
}

// stats reads the worker's /stats.
func (st *stack) stats(ctx context.Context) (workerStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.workerURL+"/stats", nil)
	if err != nil {
		return workerStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return workerStats{}, fmt.Errorf("reading the worker's /stats: %w", err)
	}
	defer resp.Body.Close()
	var s workerStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return workerStats{}, fmt.Errorf("decoding the worker's /stats: %w", err)
	}
	return s, nil
}

func (r *runner) memoryRun(ctx context.Context, run int) (f RunFigures, err error) {
	err = r.withStack(ctx, "memory", syncDefault, func(st *stack) error {
		if err := st.provision(ctx); err != nil {
			return err
		}
		if err := st.startEmulator(telegram); err != nil {
			return err
		}
		chats := r.cfg.MemoryChats
		if err := preload(ctx, st, fmt.Sprintf("M%d-", run), r.cfg.MemoryPending, func(i int) int64 { return int64(10_000_000 + i%chats) }); err != nil {
			return err
		}
		// -pprof lets the run save the worker's heap profile (below); it
		// mounts handlers, it allocates nothing while unused.
		if err := st.startWorker(ctx, r.bin("telegram-worker"), "-pprof"); err != nil {
			return err
		}
		// Wait until the worker holds what it can: its share of the
		// backlog, or no growth for two seconds (the stats refresh every
		// second).
		want := int(0.9 * float64(min(workerMaxAckPending, r.cfg.MemoryPending)))
		var last workerStats
		grew := time.Now()
		if err := waitFor(ctx, time.Minute, "for the worker to take its share of the backlog", func() bool {
			s, err := st.stats(ctx)
			if err != nil {
				return false
			}
			if s.Held > last.Held {
				grew = time.Now()
			}
			last = s
			return s.Held >= want || time.Since(grew) > 2*time.Second
		}); err != nil {
			return err
		}
		if err := pace(ctx, r.cfg.MemoryObserve, time.Nanosecond); err != nil {
			return err
		}
		mem, err := ProcessMemory(st.worker.Pid())
		if err != nil {
			return err
		}
		// The heap in use at the end, for the analysis of a missed goal:
		// go tool pprof -top -sample_index=inuse_space <file>.
		heap := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("memory-heap-%d.pb.gz", run))
		if err := st.saveHeapProfile(ctx, heap); err != nil {
			return err
		}
		r.logf("  heap profile of the worker: %s", heap)
		s, err := st.stats(ctx)
		if err != nil {
			return err
		}
		hwm := mib(mem.HWM)
		f = RunFigures{
			Ours: hwm, Reference: memoryGoal, Ratio: ratio(hwm, memoryGoal),
			Extra: []string{fmt.Sprintf("%.1f", mib(mem.RSS)), fmt.Sprint(s.Held), fmt.Sprint(s.Lanes), fmt.Sprint(s.Sent)},
		}
		return nil
	})
	return f, err
}
