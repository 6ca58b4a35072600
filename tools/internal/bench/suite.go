package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Report is what a suite run measured.
type Report struct {
	// Machine is where it ran.
	Machine Machine
	// Config is what ran.
	Config Config
	// Results are the scenarios' rows, in order.
	Results []*Result
	// Plots are the figures to draw (see WritePlots).
	Plots []Plot
	// Elapsed is the wall time of the whole suite.
	Elapsed time.Duration
	// Command is the command that reproduces the report; the caller sets
	// it.
	Command string
	// Versions are what the measured binaries say with -version.
	Versions map[string]string
	// Kept are the scenario groups whose rows and plots come from an
	// earlier run (see Merge), with that run's date.
	Kept map[string]time.Time `json:",omitempty"`
}

// Merge returns rep completed with the rows and plots of prev, an earlier
// report, for every scenario group rep did not run: a run of some groups
// (Config.Only) re-measures those and keeps the rest, each row with its own
// date and load. The rows are in Scenarios order.
func Merge(prev, rep *Report) *Report {
	if prev == nil || len(rep.Config.Only) == 0 {
		return rep
	}
	out := *rep
	out.Results, out.Plots = nil, nil
	out.Kept = map[string]time.Time{}
	ran := func(group string) bool { return slices.Contains(rep.Config.Only, group) }
	for _, g := range Scenarios {
		from := rep
		if !ran(g) {
			from = prev
		}
		for _, r := range from.Results {
			if r.Group() != g {
				continue
			}
			out.Results = append(out.Results, r)
			if from == prev {
				date := prev.Machine.Date
				if d, ok := prev.Kept[g]; ok {
					date = d
				}
				out.Kept[g] = date
			}
		}
		for _, p := range from.Plots {
			if p.Group() == g {
				out.Plots = append(out.Plots, p)
			}
		}
	}
	return &out
}

// measuredBinaries are the binaries of ./bin the suite runs, whose versions
// the report gives.
var measuredBinaries = []string{"nats-server", "nats", "publisher", "telegram-worker", "tgnotify"}

// runner carries the state of one suite run.
type runner struct {
	cfg      Config
	progress io.Writer
	stacks   int
	report   *Report
}

// Run runs the selected scenarios and returns their report. A scenario
// that fails is reported with its error and the suite goes on; Run itself
// fails only when it cannot start (bad configuration, missing binaries) or
// ctx ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("benchmark configuration: %w", err)
	}
	for _, b := range measuredBinaries {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("benchmark needs %s (run make build): %w", filepath.Join(cfg.BinDir, b), err)
		}
	}
	if _, err := os.Stat(cfg.NATSConfig); err != nil {
		return nil, fmt.Errorf("benchmark needs the nats-server configuration: %w", err)
	}
	if _, err := os.Stat(cfg.DeadLettersScript); err != nil {
		return nil, fmt.Errorf("benchmark needs scripts/dead-letters.sh: %w", err)
	}
	if err := os.RemoveAll(cfg.WorkDir); err != nil {
		return nil, fmt.Errorf("emptying the work directory: %w", err)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the work directory: %w", err)
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	r := &runner{cfg: cfg, progress: progress, report: &Report{Machine: DescribeMachine(start), Config: cfg, Versions: map[string]string{}}}
	for _, b := range measuredBinaries {
		r.report.Versions[b] = binaryVersion(ctx, r.bin(b))
	}
	for _, g := range []struct {
		id  string
		run func(context.Context) []*Result
	}{
		{"1", r.enqueue},
		{"2", r.drain},
		{"3", r.latency},
		{"4", r.telegramLimit},
		{"5", r.ceiling},
		{"6", r.memory},
		{"7", r.failover},
		{"8", r.endToEnd},
		{"9", r.deadLetters},
	} {
		if !cfg.selected(g.id) {
			continue
		}
		for _, res := range g.run(ctx) {
			r.report.Results = append(r.report.Results, res)
			r.logf("%s %s: %s", res.ID, res.Title, res.verdict())
		}
		if err := ctx.Err(); err != nil {
			return r.report, err
		}
	}
	r.report.Elapsed = time.Since(start)
	r.report.Machine.LoadAfter = LoadAverage()
	return r.report, nil
}

// bin returns the path of a built binary.
func (r *runner) bin(name string) string { return filepath.Join(r.cfg.BinDir, name) }

// logf writes one progress line, prefixed with the time.
func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "%s  %s  [load %s]\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...), LoadAverage())
}

// measure runs one scenario's runs: each call of run measures one run and
// returns its figures. It stops at the first failing run, keeping the
// figures before it, and times the whole scenario.
func (r *runner) measure(ctx context.Context, res *Result, runs int, run func(ctx context.Context, i int) (RunFigures, error)) *Result {
	start := time.Now()
	defer func() { res.Elapsed = time.Since(start) }()
	res.Load, res.Measured = LoadAverage(), start
	for i := range runs {
		if err := ctx.Err(); err != nil {
			res.fail(err)
			return res
		}
		f, err := run(ctx, i)
		if err != nil {
			res.fail(fmt.Errorf("run %d: %w", i+1, err))
			r.logf("%s %s run %d/%d failed: %v", res.ID, res.Title, i+1, runs, err)
			return res
		}
		res.Runs = append(res.Runs, f)
		r.logf("%s %s run %d/%d: %s", res.ID, res.Title, i+1, runs, res.describeRun(f))
	}
	return res
}

// withStack runs f on a fresh stack and closes it; a process that ended
// unexpectedly or did not stop cleanly fails the run. The stack's data is
// removed afterwards, its logs kept when the run failed.
func (r *runner) withStack(ctx context.Context, name string, sync serverSync, f func(*stack) error) (err error) {
	st, err := r.newStack(ctx, name, sync)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.close(); cerr != nil && err == nil {
			err = cerr
		}
		st.removeData(err != nil || r.cfg.KeepLogs)
	}()
	if err := f(st); err != nil {
		if ferr := st.failure(); ferr != nil {
			return fmt.Errorf("%w (%v)", err, ferr)
		}
		return err
	}
	return st.failure()
}

// binaryVersion returns what a binary prints for -version (--version for
// nats-server and the nats CLI), "unknown" if it prints nothing.
func binaryVersion(ctx context.Context, path string) string {
	flag := "-version"
	if b := filepath.Base(path); b == "nats-server" || b == "nats" {
		flag = "--version"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, path, flag).CombinedOutput()
	if v := strings.TrimSpace(string(out)); v != "" {
		return v
	}
	return "unknown"
}
