// Command bench runs the benchmark suite of issue 7 (tools/internal/bench)
// and writes BENCHMARKS.md with the PNG plots it references. `make bench`
// runs it after `make build`:
//
//	bin/bench -out BENCHMARKS.md -plots docs/bench
//
// Every figure is a ratio against the reference it approaches, measured side
// by side in the same run, reported as the median over several runs with the
// minimum and maximum. The last section of the report, the analysis of
// missed goals, is analysis.md next to this file, embedded at build time.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tgnotify/tgnotify/tools/internal/bench"
)

//go:embed analysis.md
var analysis string

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// usageError is a bad command line.
type usageError struct{ error }

// minRuns is the fewest runs a median with a spread is worth reporting.
const minRuns = 3

func run(args []string, stdout, stderr io.Writer) error {
	cfg := bench.Defaults()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "BENCHMARKS.md", "`file` the report is written to")
	plots := fs.String("plots", "docs/bench", "`directory` the PNG plots are written to; the report links them relative to -out")
	results := fs.String("results", "docs/bench/results.json", "`file` the measurements are saved to (JSON), for -render")
	render := fs.Bool("render", false, "measure nothing: render -out and the plots again from -results (after editing analysis.md)")
	command := fs.String("command", "", "the command the report says reproduces it (default: this command line)")
	only := fs.String("only", "", "comma-separated scenario groups to run, of "+strings.Join(bench.Scenarios, ",")+" (default all)")
	smoke := fs.Bool("smoke", false, "tiny sizes and one run each: check the harness, not the figures (implies -out and -plots under -work)")
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "`directory` of the binaries make build builds")
	fs.StringVar(&cfg.WorkDir, "work", cfg.WorkDir, "scratch `directory` (emptied first): stores, databases, logs")
	fs.BoolVar(&cfg.KeepLogs, "keep-logs", false, "keep every run's process logs under -work, not only those of failed runs")
	fs.StringVar(&cfg.NATSConfig, "nats-config", cfg.NATSConfig, "production nats-server configuration `file` the servers start from")
	fs.StringVar(&cfg.DeadLettersScript, "dead-letters-script", cfg.DeadLettersScript, "`file` scripts/dead-letters.sh, the reference of scenario 9")
	fs.IntVar(&cfg.Runs, "runs", cfg.Runs, "runs of each scenario (at least 3)")
	fs.IntVar(&cfg.TelegramRuns, "telegram-runs", cfg.TelegramRuns, "runs of scenario 4, bound by Telegram's 30 msg/s (at least 3)")
	fs.IntVar(&cfg.SyncRuns, "sync-runs", cfg.SyncRuns, "runs of the rows on an fsync-always server (at least 3)")
	fs.IntVar(&cfg.EnqueueOrders, "enqueue-orders", cfg.EnqueueOrders, "orders per variant and run in scenario 1")
	fs.IntVar(&cfg.DrainRows, "drain-rows", cfg.DrainRows, "outbox rows drained in scenario 2")
	fs.IntVar(&cfg.DrainSyncRows, "drain-sync-rows", cfg.DrainSyncRows, "outbox rows drained in scenario 2 on an fsync-always server")
	fs.IntVar(&cfg.PubAckOrders, "puback-orders", cfg.PubAckOrders, "orders per run in scenario 3a")
	fs.IntVar(&cfg.DeliveryOrders, "delivery-orders", cfg.DeliveryOrders, "orders per run in scenario 3b")
	fs.IntVar(&cfg.LimitChats, "limit-chats", cfg.LimitChats, "notifications (one per chat) in scenario 4a")
	fs.IntVar(&cfg.CeilingMessages, "ceiling-messages", cfg.CeilingMessages, "messages the worker sends in scenario 5")
	fs.IntVar(&cfg.CeilingSyncMessages, "ceiling-sync-messages", cfg.CeilingSyncMessages, "messages the worker sends in scenario 5 on an fsync-always server")
	fs.IntVar(&cfg.CeilingInFlight, "ceiling-in-flight", cfg.CeilingInFlight, "the worker's -max-in-flight in scenario 5 (0: what the worker derives, 512 with atomic batches, 256 with -single-record-writes)")
	fs.IntVar(&cfg.MemoryPending, "memory-pending", cfg.MemoryPending, "pending notifications in scenario 6")
	fs.IntVar(&cfg.MemoryChats, "memory-chats", cfg.MemoryChats, "chats they spread over in scenario 6")
	fs.IntVar(&cfg.FailoverRuns, "failover-runs", cfg.FailoverRuns, "runs of each fault of scenario 7 (at least 3)")
	fs.Float64Var(&cfg.FailoverRate, "failover-rate", cfg.FailoverRate, "orders per second during scenario 7's runs")
	fs.IntVar(&cfg.EndToEndRate, "end-to-end-rate", cfg.EndToEndRate, "orders per second the shop places in scenario 8")
	fs.DurationVar(&cfg.EndToEndDuration, "end-to-end-duration", cfg.EndToEndDuration, "how long the shop places them in scenario 8 (whole seconds)")
	fs.IntVar(&cfg.EndToEndChats, "end-to-end-chats", cfg.EndToEndChats, "chats the orders of scenario 8 go to, round robin")
	fs.IntVar(&cfg.DLQLetters, "dlq-letters", cfg.DLQLetters, "dead letters tgnotify dlq list lists in scenario 9")
	fs.IntVar(&cfg.DLQScriptLetters, "dlq-script-letters", cfg.DLQScriptLetters, "of them, how many scripts/dead-letters.sh list lists in scenario 9 (one nats call each)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: bench [flags]

Runs the benchmark suite (issue 7) against the binaries in -bin and writes the
report to -out and its plots to -plots. A full run takes about 35 minutes on a
two-core machine (33.5 on 2026-12-02); make bench runs it after make build.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if *render {
		rep, err := bench.LoadReport(*results)
		if err != nil {
			return err
		}
		return write(rep, *out, *plots, stdout)
	}
	if *smoke {
		cfg = bench.Smoke(cfg.BinDir, cfg.WorkDir, cfg.NATSConfig, cfg.DeadLettersScript)
		*out = filepath.Join(cfg.WorkDir, "BENCHMARKS.md")
		*plots = filepath.Join(cfg.WorkDir, "plots")
		*results = filepath.Join(cfg.WorkDir, "results.json")
	} else if min(cfg.Runs, cfg.TelegramRuns, cfg.SyncRuns, cfg.FailoverRuns) < minRuns {
		return usageError{fmt.Errorf("-runs, -telegram-runs, -sync-runs and -failover-runs must be at least %d: a median needs a spread", minRuns)}
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	if *command == "" {
		*command = strings.Join(append([]string{"bin/bench"}, args...), " ")
	}
	cfg.Progress = stdout
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	// The work directory is emptied by Run: refuse to write the report or
	// plots into it unless this is a smoke run, which puts them there.
	if !*smoke {
		for _, p := range []string{*out, *plots, *results} {
			if inside(p, cfg.WorkDir) {
				return usageError{fmt.Errorf("%s is inside the work directory %s, which the suite empties", p, cfg.WorkDir)}
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err // nothing is written for an interrupted or impossible run
	}
	rep.Command = *command
	if len(cfg.Only) > 0 && !*smoke {
		// -only re-measures some groups: the others keep the rows of the
		// last run saved in -results.
		prev, err := bench.LoadReport(*results)
		switch {
		case err == nil:
			rep = bench.Merge(prev, rep)
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("keeping the other scenarios' rows: %w", err)
		}
	}
	if err := rep.Save(*results); err != nil {
		return err
	}
	if err := write(rep, *out, *plots, stdout); err != nil {
		return err
	}
	var failed []string
	for _, r := range rep.Results {
		if r.Error != "" {
			failed = append(failed, r.ID)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenarios %s failed; their errors are in %s and the process logs under %s", strings.Join(failed, ", "), *out, cfg.WorkDir)
	}
	return nil
}

// inside reports whether path is dir or lies under it.
func inside(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && (rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))))
}

// write renders the report to out and its plots into plots.
func write(rep *bench.Report, out, plots string, stdout io.Writer) error {
	if err := bench.WritePlots(rep, plots); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(out), plots)
	if err != nil {
		rel = plots
	}
	md := rep.Markdown(bench.MarkdownOptions{Command: rep.Command, PlotDir: filepath.ToSlash(rel), Analysis: analysis})
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s and %d plots in %s (suite took %s)\n", out, len(rep.Plots), plots, rep.Elapsed.Round(time.Second))
	return nil
}
