package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// defaultTimeout bounds a provisioning run, connecting included.
const defaultTimeout = 30 * time.Second

const provisionUsage = `Usage: tgnotify provision [-config FILE] [-dry-run] [flags]

Makes the server's JetStream objects match the declaration: creates the
streams NOTIFY and NOTIFY_DEAD, one durable consumer per channel
(<channel>-worker) and the buckets notify_delivered, notify_chats and
notify_attempts where they are missing, and updates the fields that differ
and can change in place, printing each change. A field that cannot change in
place (subjects, retention, storage, ack or priority policy) is refused:
change or remove that object by hand. With -dry-run it only prints.

The declaration is the -config file (configs/jetstream.yaml; the daemons read
the same file with -jetstream-config), then the flags below. Every flag can
also be set as TGNOTIFY_<FLAG>; NATS_URL sets -nats. An explicit flag wins over
the environment, which wins over the file.

`

// provisionSettings are what the provision command's flags configure.
type provisionSettings struct {
	conn   connFlags
	decl   jetstream.Settings
	dryRun bool
}

// parseProvision reads the provision command's flags, $TGNOTIFY_* and the
// declaration file.
func parseProvision(args []string, s streams) (*provisionSettings, error) {
	p := &provisionSettings{decl: jetstream.DefaultSettings()}
	cs := config.New("tgnotify provision", config.Options{
		EnvPrefix: "TGNOTIFY", Getenv: s.getenv, ConfigFlag: "config", Output: s.stderr, Usage: provisionUsage,
		ConfigUsage: "the declaration: a YAML `file` of the settings below (configs/jetstream.yaml); flags and the environment override it",
	})
	p.conn.register(cs, defaultTimeout)
	p.decl.RegisterFlags(cs.FlagSet())
	cs.FileKeys("the declaration file holds the stream, consumer and bucket settings only, as the daemons read it too; give connection settings as flags or in the environment",
		jetstream.SettingNames()...)
	cs.Check(func() error {
		if err := p.decl.Validate(); err != nil {
			return &config.Error{Err: err}
		}
		return nil
	})
	config.Bool(cs, &p.dryRun, "dry-run", false, "print the changes without making them")
	if err := cs.Parse(args); err != nil {
		return nil, err
	}
	return p, nil
}

// runProvision is `tgnotify provision`.
func runProvision(ctx context.Context, s streams, args []string) error {
	p, err := parseProvision(args, s)
	if err != nil {
		return err
	}
	sess, err := p.conn.connect(ctx, s, "tgnotify provision")
	if err != nil {
		return err
	}
	defer sess.close()
	ctx, js, url := sess.ctx, sess.js, sess.url
	d := jetstream.Declare(p.decl)
	changes, err := jetstream.Provision(ctx, js, d, p.dryRun)
	for _, c := range changes {
		fmt.Fprintln(s.stdout, describe(c, p.dryRun))
	}
	if err != nil {
		return err
	}
	summarize(s.stdout, url, len(d.Objects()), changes, p.dryRun)
	return nil
}

// describe writes a change as done ("created stream NOTIFY") or, in a dry
// run, as it would be done ("would create stream NOTIFY").
func describe(c jetstream.Change, dryRun bool) string {
	if dryRun {
		return "would " + c.String()
	}
	return c.Action + "d" + strings.TrimPrefix(c.String(), c.Action)
}

// summarize writes the last line of a run.
func summarize(w io.Writer, url string, objects int, changes []jetstream.Change, dryRun bool) {
	switch {
	case len(changes) == 0:
		fmt.Fprintf(w, "up to date: the %d declared objects on %s match the declaration\n", objects, url)
	case dryRun:
		fmt.Fprintf(w, "dry run: %d of the %d declared objects on %s would change; nothing was changed\n", len(changes), objects, url)
	default:
		fmt.Fprintf(w, "provisioned: %d of the %d declared objects on %s changed\n", len(changes), objects, url)
	}
}
