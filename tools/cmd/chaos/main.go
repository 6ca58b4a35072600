// Command chaos runs the fault-injection suite: the real binaries of the
// system — the telegram worker and the max, email and sms workers behind
// their providers (the Bot API, MAX and SMS emulators and Mailpit) — under a
// seeded schedule of process kills, nats-server and Mailpit restarts,
// provider outages (some longer than fallback_after), 429 storms and
// blocked chats, while thousands of orders are placed, a share of them with
// an email, a phone or a MAX user so that their route falls back; then it
// checks that every order was delivered by exactly one channel (or
// dead-lettered on every channel of its route) and in order per recipient,
// and prints the figures. It is what `make chaos` runs; the logic is
// tools/internal/chaos and docs/RELIABILITY.md describes it.
//
//	chaos [-seed N] [-duration 25m] [-dir .chaos] [-bin ./bin] [-v]
//
// CHAOS_SHORT=1 selects the short run CI uses (a few minutes). The exit
// status is 0 when every check held, 1 on any violation or failure, 2 for
// bad flags and 130 when interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tgnotify/tgnotify/tools/internal/chaos"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// runMain parses the flags, performs the run and returns the exit status.
func runMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c, opts, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return exitUsage
	}
	if opts.recheck != "" {
		res, err := chaos.Recheck(opts.recheck, stdout)
		switch {
		case err != nil:
			fmt.Fprintln(stderr, "chaos:", err)
			return exitFailed
		case !res.Passed():
			return exitFailed
		}
		return exitOK
	}
	res, err := chaos.Run(ctx, c, stdout, opts.verbose)
	switch {
	case errors.Is(err, chaos.ErrInterrupted) || ctx.Err() != nil:
		fmt.Fprintln(stderr, "chaos: interrupted; every process it started has been stopped")
		return exitInterrupted
	case err != nil:
		fmt.Fprintf(stderr, "chaos: FAILED (seed %d): %v\n", c.Seed, err)
		return exitFailed
	case !res.Passed():
		return exitFailed
	}
	return exitOK
}

// options are the flags that are not part of the run's configuration.
type options struct {
	verbose bool
	recheck string
}

// parseFlags builds the run's configuration from the preset CHAOS_SHORT
// selects and the flags.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (chaos.Config, options, error) {
	var o options
	short := false
	if v := strings.TrimSpace(getenv("CHAOS_SHORT")); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return chaos.Config{}, o, fmt.Errorf("CHAOS_SHORT=%q: want 1 or 0", v)
		}
		short = b
	}
	c := chaos.LongConfig()
	if short {
		c = chaos.ShortConfig()
	}
	c.Seed = rand.Int64N(1_000_000)
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the fault schedule and the orders (default: random, printed)")
	fs.DurationVar(&c.FaultPhase, "duration", c.FaultPhase, "how long faults are injected while orders are placed")
	fs.Float64Var(&c.OrderRate, "rate", c.OrderRate, "orders placed per second")
	fs.IntVar(&c.OrdersPerChat, "orders-per-chat", c.OrdersPerChat, "mean orders per private chat")
	fs.Float64Var(&c.RepeatFraction, "repeat", c.RepeatFraction, "fraction of orders posted twice at once")
	fs.Float64Var(&c.LateRepeatFraction, "late-repeat", c.LateRepeatFraction, "fraction of orders posted again after the faults")
	fs.IntVar(&c.RuntimeBlocks, "blocks", c.RuntimeBlocks, "chats that block the bot during the run")
	fs.Float64Var(&c.EmailShare, "email-share", c.EmailShare, "fraction of customers with an email address besides their chat")
	fs.Float64Var(&c.PhoneShare, "phone-share", c.PhoneShare, "fraction of customers with a phone number besides their chat")
	fs.Float64Var(&c.MaxShare, "max-share", c.MaxShare, "fraction of customers with a MAX user besides their chat")
	fs.DurationVar(&c.Channels.FallbackAfter, "fallback-after", c.Channels.FallbackAfter, "every worker's -fallback-after-transactional: how long a notification stays on a channel before it moves to the next of its route")
	fs.DurationVar(&c.PublisherKillEvery, "publisher-kill-every", c.PublisherKillEvery, "mean interval between SIGKILLs of the publisher")
	fs.DurationVar(&c.WorkerKillEvery, "worker-kill-every", c.WorkerKillEvery, "mean interval between SIGKILLs of a worker")
	fs.DurationVar(&c.NATSRestartEvery, "nats-restart-every", c.NATSRestartEvery, "mean interval between nats-server restarts")
	fs.Float64Var(&c.HardNATSFraction, "hard-nats", c.HardNATSFraction, "fraction of nats-server restarts done with SIGKILL")
	fs.DurationVar(&c.TelegramFaultEvery, "telegram-fault-every", c.TelegramFaultEvery, "mean gap between Telegram outages and 429 storms")
	fs.Float64Var(&c.LongOutageFraction, "long-outages", c.LongOutageFraction, "fraction of Telegram outages that last longer than -fallback-after")
	fs.DurationVar(&c.ChannelWorkerKillEvery, "channel-worker-kill-every", c.ChannelWorkerKillEvery, "mean interval between SIGKILLs of the max, email or sms worker")
	fs.DurationVar(&c.MailpitRestartEvery, "mailpit-restart-every", c.MailpitRestartEvery, "mean interval between stops of Mailpit, the SMTP server")
	fs.DurationVar(&c.ProviderFaultEvery, "provider-fault-every", c.ProviderFaultEvery, "mean gap between outages and 429 pauses of the MAX and SMS emulators")
	fs.DurationVar(&c.StandbyOn, "standby-on", c.StandbyOn, "mean span with a hot standby worker")
	fs.DurationVar(&c.StandbyOff, "standby-off", c.StandbyOff, "mean span without one")
	fs.BoolVar(&c.Cluster, "cluster", c.Cluster, "run NATS as a three-node cluster (routes and client ports behind proxies), every stream, consumer and bucket on 3 replicas; nats-server restarts restart one node, and node kills, leader step-downs and partitions join the faults")
	fs.StringVar(&c.ClusterConfig, "cluster-config", c.ClusterConfig, "`directory` of the cluster's node files for -cluster")
	fs.DurationVar(&c.NodeKillEvery, "node-kill-every", c.NodeKillEvery, "mean interval between SIGKILLs of a node (-cluster): NOTIFY's leader half the time")
	fs.DurationVar(&c.StepDownEvery, "step-down-every", c.StepDownEvery, "mean interval between leader step-downs of NOTIFY, a bucket or the telegram workers' consumer (-cluster)")
	fs.DurationVar(&c.PartitionEvery, "partition-every", c.PartitionEvery, "mean interval between partitions of a node, 3–12 s each (-cluster): NOTIFY's leader half the time; its clients kept, refused or black-holed")
	fs.StringVar(&c.WorkerLogLevel, "worker-log-level", c.WorkerLogLevel, "every worker's -log-level: debug to investigate a run (large logs)")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long the system may take to drain after the faults")
	fs.StringVar(&c.Dir, "dir", c.Dir, "`directory` for the run's data and logs; emptied at start (only if empty or an earlier run's)")
	fs.StringVar(&c.Bin, "bin", "", "`directory` with the binaries (default: the directory of this program)")
	fs.StringVar(&c.NATSConfig, "nats-config", c.NATSConfig, "nats-server configuration `file` to start from")
	fs.BoolVar(&o.verbose, "v", short, "print every fault as it is injected (always written to faults.log)")
	fs.StringVar(&o.recheck, "recheck", "", "evaluate the checks again over the record an earlier run saved in `directory`, without running")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: chaos [flags]

Runs nats-server, the Bot API, MAX and SMS emulators, Mailpit, the shop, the
publisher, the telegram worker(s) and the max, email and sms workers as real
processes, places orders (some with an email, a phone or a MAX user, so that
they fall back along their route) while killing, restarting and breaking them
on a seeded schedule, then checks that every order was delivered by exactly
one channel (or dead-lettered on every channel of its route) and in order per
recipient, and prints the figures. CHAOS_SHORT=1 selects the short run (a few
minutes); the default is the long run. Exit status 0 when every check held.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, o, err
	}
	if fs.NArg() > 0 {
		return c, o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.recheck != "" {
		return c, o, nil
	}
	if c.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, o, fmt.Errorf("finding the binaries: %w (set -bin)", err)
		}
		c.Bin = filepath.Dir(exe)
	}
	var err error
	if c.Bin, err = filepath.Abs(c.Bin); err != nil {
		return c, o, err
	}
	return c, o, c.Validate()
}
