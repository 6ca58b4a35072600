// Command tgnotify is the operator's tool for a tgnotify installation. Its
// subcommands act on the NATS JetStream objects the daemons use:
//
//	tgnotify provision [flags]                 create or update the streams, consumers and buckets
//	tgnotify status [-db PATH] KEY             the whole trail of one notification
//	tgnotify cancel [-db PATH] KEY             cancel one notification before it is sent
//	tgnotify dlq list|show|replay|purge ...    dead letters, with filters
//	tgnotify dlq report ...                    the scheduled dead-letter review
//	tgnotify chat revive [-channel C] ID       send to a recipient marked dead again
//
// `tgnotify -h` lists the subcommands, `tgnotify <command> -h` their flags.
// The work is done in packages (pkg/jetstream, internal/operator); this is
// wiring.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
)

// version is stamped by the build (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	err := runMain(context.Background(), os.Args[1:], streams{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "tgnotify:", err)
	}
	os.Exit(exitCode(err))
}

// exitCode is the exit status for err: a command's own (cancel's 3 for too
// late), else 0, 1 or 2 as for the daemons.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return daemon.ExitCode(err)
}

// streams are the command's outputs and environment.
type streams struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, s streams, args []string) error
}

// commands are the subcommands, in the order -h lists them.
func commands() []command {
	return []command{
		{name: "provision", summary: "create the missing streams, consumers and buckets, and update what differs from the declaration", run: runProvision},
		{name: "status", summary: "the whole trail of one notification: outbox row, NOTIFY messages, attempts, delivery, dead letters, events", run: runStatus},
		{name: "cancel", summary: "cancel one notification before it is sent; says whether it was in time (exit 3: too late)", run: runCancel},
		{name: "dlq", summary: "dead letters: list, show, replay, purge (filters by channel, reason, recipient, key, time); report (the scheduled review)", run: runDLQ},
		{name: "chat", summary: "revive a recipient a channel marked dead (chat revive ID)", run: runChat},
	}
}

// runMain dispatches to the subcommand named by args[0].
func runMain(ctx context.Context, args []string, s streams) error {
	if len(args) == 0 {
		usage(s.stderr)
		return &config.Error{Err: errors.New("no command given")}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(s.stderr)
		return flag.ErrHelp
	case "-version", "--version", "version":
		fmt.Fprintln(s.stdout, version)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, s, args[1:])
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				err = fmt.Errorf("%s: %w", c.name, err)
			}
			return err
		}
	}
	usage(s.stderr)
	return &config.Error{Err: fmt.Errorf("unknown command %q", args[0])}
}

// usage prints the list of subcommands.
func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: tgnotify <command> [flags]\n\nOperator commands for tgnotify's NATS JetStream objects and the trail\nof its notifications.\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\n`tgnotify <command> -h` lists a command's flags. Every flag can also be set\nas TGNOTIFY_<FLAG> (upper case, dashes as underscores); NATS_URL sets -nats.\nEvery command takes the NATS connection flags (-nats URLS, default $NATS_URL).\n")
	fmt.Fprint(w, b.String())
}
