package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Defaults of the flags.
const (
	defaultOrdersEmulator = 300
	defaultOrdersReal     = 5
	maxOrdersReal         = 50
)

// config is what the flags and the environment say.
type config struct {
	orders       int
	outageOrders int
	customers    int
	repeat       float64
	concurrency  int
	dir          string
	bin          string
	natsConfig   string
	cluster      bool
	clusterDir   string
	timeout      time.Duration
	readyWait    time.Duration
	stopWait     time.Duration
	apiLatency   time.Duration
	seed         int64
	keep         bool
	progress     string
	forceEmu     bool

	// real is set when the notifications go to the real Telegram.
	real *realTelegram
}

// realTelegram is the chat the demo sends to when TELEGRAM_BOT_TOKEN and
// TELEGRAM_CHAT_ID are set. The token itself stays in the environment: the
// worker reads it from there, and the demo never prints it.
type realTelegram struct {
	chatID int64
	apiURL string
}

// parseFlags reads the command line and TELEGRAM_BOT_TOKEN, TELEGRAM_CHAT_ID
// and TELEGRAM_API_URL.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	fs.IntVar(&c.orders, "orders", 0, fmt.Sprintf("orders to place (default %d with the emulator, %d with the real Telegram, at most %d there)", defaultOrdersEmulator, defaultOrdersReal, maxOrdersReal))
	fs.IntVar(&c.outageOrders, "outage-orders", 10, "orders placed while Telegram is down, after the burst: each from a customer with a Telegram chat and a phone, delivered by SMS once the telegram worker's fallback_after (5s here) passed (0: no outage; never with the real Telegram)")
	fs.IntVar(&c.customers, "customers", 40, "private chats the orders are spread over (besides the blocked chats and the group)")
	fs.Float64Var(&c.repeat, "repeat", 0.15, "fraction of orders whose POST /orders is repeated, as a retrying client would")
	fs.IntVar(&c.concurrency, "concurrency", 8, "concurrent POST /orders requests")
	fs.StringVar(&c.dir, "dir", ".demo", "`directory` for the demo's data and logs; emptied at start (only if it is empty or an earlier demo's)")
	fs.StringVar(&c.bin, "bin", "", "`directory` with the binaries (default: the demo's own directory)")
	fs.StringVar(&c.natsConfig, "nats-config", "configs/nats-server.conf", "nats-server configuration `file` to start from; the demo rewrites its addresses and store directory")
	fs.BoolVar(&c.cluster, "cluster", false, "run NATS as a three-node cluster (the files of -cluster-config, three nats-server processes with routes between them), provision every stream, consumer and bucket with 3 replicas, give every daemon all three URLs, and during the burst step NOTIFY's leader down and SIGKILL (then restart) a node")
	fs.StringVar(&c.clusterDir, "cluster-config", "configs/nats-cluster", "`directory` of the cluster's node configurations (n1.conf, n2.conf, n3.conf) for -cluster; the demo rewrites their addresses, stores and routes")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Minute, "how long to wait for every notification to be delivered or dead-lettered")
	fs.DurationVar(&c.readyWait, "ready-timeout", 30*time.Second, "how long each process may take to become ready")
	fs.DurationVar(&c.stopWait, "stop-timeout", 20*time.Second, "how long each process may take to stop after SIGTERM before it is killed")
	fs.DurationVar(&c.apiLatency, "api-latency", 30*time.Millisecond, "latency of the emulated Bot API (±2/3 jitter)")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the order generator")
	fs.BoolVar(&c.keep, "keep", false, "after the report, keep everything running until Ctrl-C (to try the runbook's commands, read the emails in Mailpit's web UI)")
	fs.StringVar(&c.progress, "progress", "auto", "progress display: auto, tty (one line rewritten), lines (a line per second) or off")
	fs.BoolVar(&c.forceEmu, "emulator", false, "use the emulator even when TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID are set")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: demo [flags]

Runs nats-server, the Bot API, MAX and SMS (Twilio) emulators, Mailpit (a
real SMTP server), the telegram, max, email and sms workers, the shop and the
publisher on loopback ports. It places a burst of orders (some carry an
email, a phone or a MAX user besides the Telegram chat), then takes Telegram
down for longer than the telegram worker's fallback_after (5s here) while
orders with a phone arrive, shows progress, checks that every order was
delivered by exactly one channel or dead-lettered on every channel of its
route, prints a report and stops everything. Exit status 0 when every check
passed, 1 otherwise.

With TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID set, the notifications of a few
orders go to that real chat instead (TELEGRAM_API_URL overrides
https://api.telegram.org, e.g. for a local Bot API server).

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	token, chat := strings.TrimSpace(getenv("TELEGRAM_BOT_TOKEN")), strings.TrimSpace(getenv("TELEGRAM_CHAT_ID"))
	if token != "" && chat != "" && !c.forceEmu {
		id, err := strconv.ParseInt(chat, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("TELEGRAM_CHAT_ID %q is not a chat id (a non-zero integer; groups are negative)", chat)
		}
		c.real = &realTelegram{chatID: id, apiURL: "https://api.telegram.org"}
		if u := strings.TrimSpace(getenv("TELEGRAM_API_URL")); u != "" {
			c.real.apiURL = u
		}
	}
	if c.real != nil {
		c.outageOrders = 0 // the real Telegram cannot be taken down
	}
	if c.orders == 0 {
		c.orders = defaultOrdersEmulator
		if c.real != nil {
			c.orders = defaultOrdersReal
		}
	}
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(c.orders > 0 && c.orders <= 100_000, "-orders %d: want 1..100000", c.orders)
	check(c.real == nil || c.orders <= maxOrdersReal, "-orders %d: at most %d go to a real chat (Telegram allows one message a second to it)", c.orders, maxOrdersReal)
	check(c.outageOrders >= 0 && c.outageOrders <= 1000, "-outage-orders %d: want 0..1000", c.outageOrders)
	check(c.customers > 0 && c.customers <= 10_000, "-customers %d: want 1..10000", c.customers)
	check(c.repeat >= 0 && c.repeat <= 1, "-repeat %v: want a fraction in [0, 1]", c.repeat)
	check(c.concurrency > 0 && c.concurrency <= 256, "-concurrency %d: want 1..256", c.concurrency)
	check(c.timeout > 0, "-timeout must be positive")
	check(c.readyWait > 0, "-ready-timeout must be positive")
	check(c.stopWait > 0, "-stop-timeout must be positive")
	check(c.apiLatency >= 0, "-api-latency must not be negative")
	check(c.dir != "", "-dir must not be empty")
	switch c.progress {
	case "auto", "tty", "lines", "off":
	default:
		check(false, "-progress %q: want auto, tty, lines or off", c.progress)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the binaries: %w (set -bin)", err)
		}
		c.bin = filepath.Dir(exe)
	}
	var err error
	if c.bin, err = filepath.Abs(c.bin); err != nil {
		return nil, err
	}
	if c.dir, err = filepath.Abs(c.dir); err != nil {
		return nil, err
	}
	for _, name := range binaries(c.real != nil, c.cluster) {
		if _, err := os.Stat(filepath.Join(c.bin, name)); err != nil {
			return nil, fmt.Errorf("binary %s not found in %s: run `make build` first (or set -bin)", name, c.bin)
		}
	}
	if _, err := os.Stat(c.natsConfig); err != nil {
		return nil, fmt.Errorf("-nats-config: %w (run the demo from the repository root, or set -nats-config)", err)
	}
	if c.cluster {
		if _, err := os.Stat(filepath.Join(c.clusterDir, "n1.conf")); err != nil {
			return nil, fmt.Errorf("-cluster-config: %w (run the demo from the repository root, or set -cluster-config)", err)
		}
	}
	return c, nil
}

// binaries lists the programs the demo runs: with the real Telegram,
// everything but the Bot API emulator; on a cluster, tgnotify too (to
// provision).
func binaries(real, cluster bool) []string {
	all := []string{"nats-server", "botapi-emulator", "max-emulator", "sms-emulator", "mailpit",
		"telegram-worker", "max-worker", "email-worker", "sms-worker", "shop", "publisher"}
	if cluster {
		all = append(all, "tgnotify")
	}
	if real {
		return without(all, "botapi-emulator")
	}
	return all
}
