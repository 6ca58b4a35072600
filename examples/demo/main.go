// Command demo runs the whole tgnotify system on this machine and proves
// that it keeps its promises. It is what `make demo` runs.
//
// It starts real processes, each on free loopback ports, with data and logs
// under the -dir directory (default .demo):
//
//	nats-server       JetStream, configured from configs/nats-server.conf
//	botapi-emulator   Telegram's limits on, blocked and deactivated chats, a migrated group
//	max-emulator      MAX's Bot API, a user who stopped the bot
//	sms-emulator      Twilio's Messages API
//	mailpit           a real SMTP server, with a web UI and a REST API
//	telegram-worker   JetStream → Bot API (fallback_after 5s for the demo)
//	max-worker, email-worker, sms-worker
//	                  the fallback channels, JetStream → MAX, SMTP, Twilio
//	shop              the example application: POST /orders, GET /orders/{id}
//	                  (it follows the pipeline's events)
//	publisher         outbox → JetStream
//
// Then it places a burst of orders through POST /orders (some repeated, as
// a retrying client would; some carrying an email, a phone or a MAX user
// besides the Telegram chat, some for blocked chats), takes Telegram down
// for longer than fallback_after while orders with a phone arrive, shows
// live progress, and prints a report: deliveries per channel, what became
// of each kind of order, every order delivered by exactly one channel or
// dead-lettered on every channel of its route, the emails in Mailpit, the
// shop's view of a few orders, commit→delivery latency. It stops every
// process it started and exits with status 1 if any invariant failed (2 for
// bad flags, 130 when interrupted).
//
// With TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID set it sends the notifications
// of a few orders to that real chat instead of the emulator (-emulator forces
// the emulator).
//
//	demo [-orders N] [-outage-orders N] [-dir .demo] [-bin ./bin] [-timeout 3m] [-keep]
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
