// Command botapi-emulator serves a stand-in for the Telegram Bot API for
// tests, demos, benchmarks and chaos runs. See docs/EMULATOR.md.
//
// Every flag can also be set through the environment with the EMULATOR_
// prefix (-bot-rate is EMULATOR_BOT_RATE) or in the -config YAML file; a flag
// on the command line wins over the environment, which wins over the file.
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
	"time"

	"github.com/oklog/run"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
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
	cfg, addr, logFlags, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "botapi-emulator: %v\n", err)
		return exitUsage
	}
	logger, err := logFlags.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "botapi-emulator: %v\n", err)
		return exitUsage
	}
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
	g.Add(daemon.SignalHandler(ctx))
	err = g.Run()
	if errors.Is(err, run.ErrSignal) || errors.Is(err, context.Canceled) {
		logger.Info("stopped", "reason", err.Error())
		return nil
	}
	return err
}

// Defaults of the emulator's own flags; the limits' come from
// emulator.DefaultLimits.
const (
	defaultHTTP        = "127.0.0.1:8081"
	defaultFaultDelay  = 5 * time.Second
	defaultSeed        = 1
	defaultBotUsername = "emulator_bot"
)

const usage = "Usage: botapi-emulator [flags]\n\n" +
	"Serves a stand-in for the Telegram Bot API at /bot<token>/<method> and control\n" +
	"endpoints under /emulator/ (see docs/EMULATOR.md). Every flag can also be set\n" +
	"with an EMULATOR_ environment variable (-bot-rate: EMULATOR_BOT_RATE) or in the\n" +
	"-config YAML file; a flag on the command line wins over the environment, which\n" +
	"wins over the file.\n\nFlags:\n"

// parseFlags reads the command line, the EMULATOR_ environment and the
// -config file.
func parseFlags(args []string, stderr io.Writer) (emulator.Config, string, daemon.LogFlags, error) {
	cs := config.New("botapi-emulator", config.Options{EnvPrefix: "EMULATOR", ConfigFlag: "config", Output: stderr, Usage: usage})
	def := emulator.DefaultLimits()
	var (
		cfg         emulator.Config
		lim         = &cfg.Limits
		out         emulator.Outage
		blocked     idList
		deactivated idList
		notFound    idList
		migrate     = migrations{}
		addr        string
		faultMode   string
		logFlags    daemon.LogFlags
	)
	config.String(cs, &addr, "http", defaultHTTP, "listen `address` for the Bot API and the /emulator/ control endpoints")
	config.String(cs, &cfg.Token, "token", defaultToken, "the bot `token` the emulator accepts (a test token; any other gets 401)")
	config.Bool(cs, &lim.Enabled, "limits", true, "enforce Telegram's rate limits")
	config.Float(cs, &lim.BotRate, "bot-rate", def.BotRate, "bot-wide limit in messages per second").Check(config.Positive)
	config.Int(cs, &lim.BotBurst, "bot-burst", def.BotBurst, "bot-wide burst in messages").Check(config.Positive)
	config.Float(cs, &lim.ChatRate, "chat-rate", def.ChatRate, "per private chat limit in messages per second").Check(config.Positive)
	config.Int(cs, &lim.ChatBurst, "chat-burst", def.ChatBurst, "per private chat burst in messages").Check(config.Positive)
	config.Float(cs, &lim.GroupPerMinute, "group-per-minute", def.GroupPerMinute, "per group (chat_id < 0) limit in messages per minute").Check(config.Positive)
	config.Int(cs, &lim.GroupBurst, "group-burst", def.GroupBurst, "per group burst in messages").Check(config.Positive)
	config.Float(cs, &lim.PaidRate, "paid-rate", def.PaidRate, "limit in messages per second with allow_paid_broadcast").Check(config.Positive)
	config.Int(cs, &lim.PaidBurst, "paid-burst", def.PaidBurst, "burst in messages with allow_paid_broadcast").Check(config.Positive)
	config.Duration(cs, &cfg.Latency, "latency", 0, "delay of every Bot API answer").Check(config.NotNegative)
	config.Duration(cs, &cfg.LatencyJitter, "latency-jitter", 0, "uniform jitter (±) around -latency").Check(config.NotNegative)
	config.Float(cs, &out.Probability, "fault-probability", 1, "fraction of requests hit by -fault, in (0, 1]").Check(func(p float64) error {
		if p <= 0 || p > 1 {
			return errors.New("must be above 0 and at most 1")
		}
		return nil
	})
	config.Duration(cs, &out.Duration, "fault-duration", 0, "end -fault after this long (0: until DELETE /emulator/outage)").Check(config.NotNegative)
	config.Int(cs, &out.Status, "fault-status", 0, "HTTP status of -fault 5xx (default 502) or json5xx (default 500)").Check(func(code int) error {
		if code != 0 && (code < 500 || code > 599) {
			return errors.New("must be a 5xx status")
		}
		return nil
	})
	config.Duration(cs, &out.Delay, "fault-delay", defaultFaultDelay, "extra latency of -fault slow").Check(config.NotNegative)
	config.Uint64(cs, &cfg.Seed, "seed", defaultSeed, "seed for latency jitter and fault probability")
	config.Int(cs, &cfg.MaxMessages, "max-messages", emulator.DefaultMaxMessages, "delivered messages kept for /emulator/messages").Check(config.Positive)
	config.String(cs, &cfg.BotUsername, "bot-username", defaultBotUsername, "username getMe reports")
	fs := cs.FlagSet()
	fs.Var(&blocked, "blocked", "comma-separated chat `ids` that blocked the bot (403)")
	fs.Var(&deactivated, "deactivated", "comma-separated chat `ids` of deactivated users (403)")
	fs.Var(&notFound, "not-found", "comma-separated chat `ids` that do not exist (400 chat not found)")
	fs.Var(migrate, "migrate", "comma-separated group migrations `FROM=TO` (400 with migrate_to_chat_id)")
	config.String(cs, &faultMode, "fault", "", "start with an outage: `mode` 5xx, json5xx, drop, slow, blackhole or deliver-drop").Check(func(m string) error {
		if m == "" {
			return nil
		}
		mode, err := emulator.ParseFaultMode(m)
		out.Mode = mode
		return err
	})
	logFlags.Register(cs)
	if err := cs.Parse(args); err != nil {
		return cfg, "", logFlags, err
	}
	cfg.Blocked, cfg.Deactivated, cfg.NotFound, cfg.Migrate = blocked, deactivated, notFound, migrate
	if faultMode != "" {
		cfg.Outage = &out
	}
	// The other settings are checked above; New can only refuse the token.
	if _, err := emulator.New(cfg); err != nil {
		return cfg, "", logFlags, &config.Error{Flag: "token", Err: err}
	}
	return cfg, addr, logFlags, nil
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
