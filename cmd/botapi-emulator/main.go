// Command botapi-emulator serves a stand-in for the Telegram Bot API for
// tests, demos, benchmarks and chaos runs. See docs/EMULATOR.md.
//
// Every flag can also be set through the environment with the EMULATOR_
// prefix (-bot-rate is EMULATOR_BOT_RATE); a flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/peterbourgon/ff/v3"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// defaultToken is a test token, not a secret: the emulator accepts exactly
// the token it is given, and this is the one tests and the demo use unless
// told otherwise.
const defaultToken = "123456789:TEST-emulator-token"

// exitUsage is the exit status for bad flags or environment values.
const exitUsage = 2

func main() {
	os.Exit(realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the emulator until a signal or ctx ends it and returns the exit
// status: 0 after a clean stop, 1 after a failure, 2 for bad flags.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, addr, logLevel, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "botapi-emulator: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	cfg.Logger = logger
	if err := serve(ctx, cfg, addr, stdout, logger); err != nil {
		logger.Error("botapi-emulator stopped", "error", err)
		return 1
	}
	return 0
}

// serve listens on addr and serves the emulator until ctx ends or a signal
// arrives, then shuts down gracefully.
func serve(ctx context.Context, cfg emulator.Config, addr string, stdout io.Writer, logger *slog.Logger) error {
	emu, err := emulator.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "botapi-emulator listening on http://%s\n", ln.Addr())
	logger.Info("listening", "addr", ln.Addr().String(), "limits", cfg.Limits.Enabled)

	var g run.Group
	g.Add(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, func(error) {
		// Free blackholed requests first, or Shutdown would wait for them.
		emu.Close()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			logger.Warn("graceful shutdown incomplete", "error", err)
			_ = srv.Close()
		}
	})
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	err = g.Run()
	if errors.Is(err, run.ErrSignal) || errors.Is(err, context.Canceled) {
		logger.Info("stopped", "reason", err.Error())
		return nil
	}
	return err
}

// parseFlags reads the command line and the EMULATOR_ environment.
func parseFlags(args []string, stderr io.Writer) (emulator.Config, string, slog.Level, error) {
	fs := flag.NewFlagSet("botapi-emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: botapi-emulator [flags]\n\n"+
			"Serves a stand-in for the Telegram Bot API at /bot<token>/<method> and control\n"+
			"endpoints under /emulator/ (see docs/EMULATOR.md). Every flag can also be set\n"+
			"with an EMULATOR_ environment variable (-bot-rate: EMULATOR_BOT_RATE); a flag\n"+
			"on the command line wins.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	def := emulator.DefaultLimits()
	var (
		cfg         emulator.Config
		blocked     idList
		deactivated idList
		notFound    idList
		migrate     = migrations{}
		faultMode   string
		logLevel    slog.Level
		addr        = fs.String("http", "127.0.0.1:8081", "listen `address` for the Bot API and the /emulator/ control endpoints")
		token       = fs.String("token", defaultToken, "the bot `token` the emulator accepts (a test token; any other gets 401)")
		limits      = fs.Bool("limits", true, "enforce Telegram's rate limits")
		botRate     = fs.Float64("bot-rate", def.BotRate, "bot-wide limit in messages per second")
		botBurst    = fs.Int("bot-burst", def.BotBurst, "bot-wide burst in messages")
		chatRate    = fs.Float64("chat-rate", def.ChatRate, "per private chat limit in messages per second")
		chatBurst   = fs.Int("chat-burst", def.ChatBurst, "per private chat burst in messages")
		groupPerMin = fs.Float64("group-per-minute", def.GroupPerMinute, "per group (chat_id < 0) limit in messages per minute")
		groupBurst  = fs.Int("group-burst", def.GroupBurst, "per group burst in messages")
		paidRate    = fs.Float64("paid-rate", def.PaidRate, "limit in messages per second with allow_paid_broadcast")
		paidBurst   = fs.Int("paid-burst", def.PaidBurst, "burst in messages with allow_paid_broadcast")
		latency     = fs.Duration("latency", 0, "delay of every Bot API answer")
		jitter      = fs.Duration("latency-jitter", 0, "uniform jitter (±) around -latency")
		faultProb   = fs.Float64("fault-probability", 1, "fraction of requests hit by -fault, in (0, 1]")
		faultDur    = fs.Duration("fault-duration", 0, "end -fault after this long (0: until DELETE /emulator/outage)")
		faultStatus = fs.Int("fault-status", 0, "HTTP status of -fault 5xx (default 502) or json5xx (default 500)")
		faultDelay  = fs.Duration("fault-delay", 5*time.Second, "extra latency of -fault slow")
		seed        = fs.Uint64("seed", 1, "seed for latency jitter and fault probability")
		maxMessages = fs.Int("max-messages", emulator.DefaultMaxMessages, "delivered messages kept for /emulator/messages")
		botUsername = fs.String("bot-username", "emulator_bot", "username getMe reports")
	)
	fs.Var(&blocked, "blocked", "comma-separated chat `ids` that blocked the bot (403)")
	fs.Var(&deactivated, "deactivated", "comma-separated chat `ids` of deactivated users (403)")
	fs.Var(&notFound, "not-found", "comma-separated chat `ids` that do not exist (400 chat not found)")
	fs.Var(migrate, "migrate", "comma-separated group migrations `FROM=TO` (400 with migrate_to_chat_id)")
	fs.StringVar(&faultMode, "fault", "", "start with an outage: `mode` 5xx, json5xx, drop, slow, blackhole or deliver-drop")
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")

	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("EMULATOR")); err != nil {
		return cfg, "", 0, err
	}
	if fs.NArg() > 0 {
		return cfg, "", 0, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}

	cfg = emulator.Config{
		Token:         *token,
		BotUsername:   *botUsername,
		Latency:       *latency,
		LatencyJitter: *jitter,
		Blocked:       blocked,
		Deactivated:   deactivated,
		NotFound:      notFound,
		Migrate:       migrate,
		Seed:          *seed,
		MaxMessages:   *maxMessages,
		Limits: emulator.Limits{
			Enabled:        *limits,
			BotRate:        *botRate,
			BotBurst:       *botBurst,
			ChatRate:       *chatRate,
			ChatBurst:      *chatBurst,
			GroupPerMinute: *groupPerMin,
			GroupBurst:     *groupBurst,
			PaidRate:       *paidRate,
			PaidBurst:      *paidBurst,
		},
	}
	// Check each numeric flag here so the error names the flag, not a
	// Config field.
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"bot-rate", *botRate > 0},
		{"bot-burst", *botBurst > 0},
		{"chat-rate", *chatRate > 0},
		{"chat-burst", *chatBurst > 0},
		{"group-per-minute", *groupPerMin > 0},
		{"group-burst", *groupBurst > 0},
		{"paid-rate", *paidRate > 0},
		{"paid-burst", *paidBurst > 0},
		{"latency", *latency >= 0},
		{"latency-jitter", *jitter >= 0},
		{"fault-probability", *faultProb > 0 && *faultProb <= 1},
		{"fault-duration", *faultDur >= 0},
		{"fault-status", *faultStatus == 0 || (*faultStatus >= 500 && *faultStatus <= 599)},
		{"fault-delay", *faultDelay >= 0},
		{"max-messages", *maxMessages > 0},
	} {
		if !c.ok {
			f := fs.Lookup(c.name)
			return cfg, "", 0, fmt.Errorf("invalid value %q for flag -%s: out of range", f.Value.String(), c.name)
		}
	}
	if faultMode != "" {
		mode, err := emulator.ParseFaultMode(faultMode)
		if err != nil {
			return cfg, "", 0, fmt.Errorf("invalid value for flag -fault: %w", err)
		}
		cfg.Outage = &emulator.Outage{Mode: mode, Probability: *faultProb, Duration: *faultDur, Status: *faultStatus, Delay: *faultDelay}
	}
	// The remaining settings are checked above; New can only refuse the token.
	if _, err := emulator.New(cfg); err != nil {
		return cfg, "", 0, fmt.Errorf("invalid value for flag -token: %w", err)
	}
	return cfg, *addr, logLevel, nil
}

// idList is a comma-separated list of chat ids.
type idList []int64

func (l *idList) String() string {
	parts := make([]string, len(*l))
	for i, id := range *l {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ",")
}

func (l *idList) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, err := strconv.ParseInt(part, 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("%q is not a chat id", part)
		}
		*l = append(*l, id)
	}
	return nil
}

// migrations is a comma-separated list of FROM=TO chat id pairs.
type migrations map[int64]int64

func (m migrations) String() string {
	parts := make([]string, 0, len(m))
	for from, to := range m {
		parts = append(parts, fmt.Sprintf("%d=%d", from, to))
	}
	return strings.Join(parts, ",")
}

func (m migrations) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, ok := strings.Cut(part, "=")
		from, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
		to, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
		if !ok || err1 != nil || err2 != nil || from == 0 || to == 0 || from == to {
			return fmt.Errorf("%q is not FROM=TO with two different chat ids", part)
		}
		m[from] = to
	}
	return nil
}
