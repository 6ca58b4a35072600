// Command demo runs the whole tgnotify system on this machine and proves
// that it keeps its promises. It is what `make demo` runs.
//
// It starts real processes, each on free loopback ports, with data and logs
// under the -dir directory (default .demo):
//
//	nats-server       JetStream, configured from configs/nats-server.conf
//	botapi-emulator   Telegram's limits on, blocked and deactivated chats, a migrated group
//	telegram-worker   JetStream → Bot API
//	shop              the example application: POST /orders
//	publisher         outbox → JetStream
//
// Then it places a burst of orders through POST /orders (some of them
// repeated, as a retrying client would), shows live progress, and prints a
// report: every order delivered exactly once, dead letters by reason, 429s
// received, commit→delivery latency. It stops every process it started and
// exits with status 1 if any invariant failed (2 for bad flags, 130 when
// interrupted).
//
// With TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID set it sends the notifications
// of a few orders to that real chat instead of the emulator (-emulator forces
// the emulator).
//
//	demo [-orders N] [-dir .demo] [-bin ./bin] [-timeout 3m] [-keep]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
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

// runMain parses the flags, runs the demo and returns the exit status.
func runMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return exitUsage
	}
	d := &demo{cfg: cfg, out: stdout, errOut: stderr}
	rep, err := d.run(ctx)
	switch {
	case rep != nil && rep.complete:
		if rep.passed() {
			return exitOK
		}
		return exitFailed
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "demo: interrupted; every process it started has been stopped")
		return exitInterrupted
	case err != nil:
		fmt.Fprintln(stderr, "demo: FAILED:", err)
	}
	return exitFailed
}
