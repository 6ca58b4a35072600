package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/operator"
)

const reportUsage = `Usage: tgnotify dlq report [flags]

The scheduled dead-letter review: summarises the dead letters that died
since the previous report (by channel and reason, with the first of each),
prints the summary, and posts it to the admin's Telegram chat through the
pipeline itself (NOTIFY, then the telegram worker, with its limits and
retries). The -state file remembers where the report ended; the next run
starts there. Without it, or on the first run, the report covers -since.
A report that was posted but whose state was not saved (a crash) is posted
again under the same idempotency key, dlq-report:<from>-<to>, and stored
once. Run it from a timer: configs/systemd/tgnotify-dlq-report.timer.

`

// reportSettings are what tgnotify dlq report's flags configure.
type reportSettings struct {
	conn      connFlags
	state     string
	since     string
	adminChat string
	env       string
	postEmpty bool
	dryRun    bool
}

// parseReport reads tgnotify dlq report's flags, environment and -config
// file.
func parseReport(args []string, s streams) (*reportSettings, *config.Set, error) {
	p := &reportSettings{}
	cs := config.New("tgnotify dlq report", config.Options{EnvPrefix: "TGNOTIFY", Getenv: s.getenv, Output: s.stderr, Usage: reportUsage,
		ConfigFlag: "config", ConfigUsage: "YAML `file` of settings (configs/dlq-report.yaml)"})
	p.conn.register(cs, dlqTimeout)
	p.conn.registerPrefix(cs)
	config.String(cs, &p.state, "state", "", "`file` that remembers where the last report ended (e.g. /var/lib/tgnotify/dlq-report.json); without it every run covers -since")
	config.String(cs, &p.since, "since", "24h", "what the first report (or every report, without -state) covers: dead letters since this `time` (RFC 3339, or a duration ago)").Check(checkWhen)
	config.String(cs, &p.adminChat, "admin-chat", "", "Telegram chat `id` the summary is posted to (required unless -dry-run)").Check(func(v string) error {
		if v == "" {
			return nil
		}
		if _, err := strconv.ParseInt(v, 10, 64); err != nil || v == "0" {
			return errors.New("must be a Telegram chat id (a non-zero integer)")
		}
		return nil
	})
	config.String(cs, &p.env, "env", "", "`name` of the environment, shown in the summary's title (e.g. production)")
	config.Bool(cs, &p.postEmpty, "post-empty", false, "post a summary also when nothing new died")
	config.Bool(cs, &p.dryRun, "dry-run", false, "print the summary; post nothing and leave -state alone")
	if err := cs.Parse(args); err != nil {
		return nil, cs, err
	}
	if p.adminChat == "" && !p.dryRun {
		return nil, cs, &config.Error{Err: errors.New("-admin-chat is required (or -dry-run to only print the summary)")}
	}
	return p, cs, nil
}

// runDLQReport is tgnotify dlq report.
func runDLQReport(ctx context.Context, s streams, args []string) error {
	p, _, err := parseReport(args, s)
	if err != nil {
		return err
	}
	now := time.Now()
	since, _ := parseWhen(p.since, now)
	var cursor operator.ReportCursor
	if p.state != "" {
		var err error
		if cursor, err = operator.LoadCursor(p.state); err != nil {
			return &config.Error{Err: fmt.Errorf("-state: %w", err)}
		}
	}
	sess, err := p.conn.connect(ctx, s, "tgnotify dlq report")
	if err != nil {
		return err
	}
	defer sess.close()
	r, err := operator.Summarize(sess.ctx, sess.js, sess.names, cursor.Next, since)
	if err != nil {
		return err
	}
	fmt.Fprint(s.stdout, r.Text(p.env))
	if p.dryRun {
		return nil
	}
	if r.Total > 0 || p.postEmpty {
		chat, _ := strconv.ParseInt(p.adminChat, 10, 64)
		if err := operator.Post(sess.ctx, sess.js, sess.names, r, chat, p.env, now); err != nil {
			return err
		}
		fmt.Fprintf(s.stderr, "posted to chat %d as %s\n", chat, r.Key())
	}
	if p.state == "" {
		return nil
	}
	if err := operator.SaveCursor(p.state, operator.ReportCursor{Next: r.To + 1, ReportedAt: now}); err != nil {
		return fmt.Errorf("saving -state (the next run posts this report again, once): %w", err)
	}
	return nil
}
