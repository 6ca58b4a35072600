package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/operator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// dlqTimeout bounds a dlq command by default: reading a large NOTIFY_DEAD
// takes a while.
const dlqTimeout = 5 * time.Minute

const dlqUsage = `Usage: tgnotify dlq <command> [flags] [SEQ...]

The dead letters in NOTIFY_DEAD (subjects dead.notify.<channel>.<reason>.<recipient>):

  list      one line per dead letter: sequence, time, channel, reason, recipient, key, error
  show      every header and the body of dead letters SEQ...
  replay    publish dead letters back to their original subject (SEQ... or a filter)
  purge     delete dead letters (a filter, or -all)
  report    summarise what died since the last report and post it to an admin chat

list, replay and purge take the filters -channel, -reason, -recipient, -key,
-since and -until; they read the dead letters that exist when they start,
headers only where the body is not needed. ` + "`tgnotify dlq <command> -h`" + ` lists a
command's flags.
`

// dlqCommand is one command of tgnotify dlq.
type dlqCommand struct {
	name, usage string
	run         func(context.Context, streams, *dlqSettings) error
	// filters: the command takes the filter flags; seqs: sequence
	// arguments; dryRun, all: those flags.
	filters, seqs, dryRun, all bool
}

func dlqCommands() []dlqCommand {
	return []dlqCommand{
		{name: "list", filters: true, run: runDLQList, usage: `Usage: tgnotify dlq list [filters]

Lists the dead letters the filters select, one line each: sequence, when it
died (stored in NOTIFY_DEAD), channel, reason, recipient, key, error code and
description; a count on stderr. It reads headers only, with one ordered
consumer filtered on the subject dead.notify.<channel>.<reason>.<recipient>
the filters make.

`},
		{name: "show", seqs: true, run: runDLQShow, usage: `Usage: tgnotify dlq show [flags] SEQ...

Prints dead letters SEQ... of NOTIFY_DEAD with every header and the body.

`},
		{name: "replay", filters: true, seqs: true, all: true, run: runDLQReplay, usage: `Usage: tgnotify dlq replay [filters | -all | SEQ...]

Publishes each selected dead letter's body, unchanged, back to its original
subject (Notify-Original-Subject) with the new message id
<key>:replay:<dead-letter seq>, Notify-Key, Content-Type, Notify-Created-At
and Notify-Replay-Of: NOTIFY_DEAD:<seq>, exactly as scripts/dead-letters.sh
does: replaying a dead letter twice, with either tool, stores it once (inside
NOTIFY's duplicate window), and the worker never sends a key twice. Poison
messages (no Notify-Key) are skipped. The dead letters stay in NOTIFY_DEAD.
Exit status 1 if any could not be replayed (for SEQ..., a poison one too).

`},
		{name: "purge", filters: true, dryRun: true, all: true, run: runDLQPurge, usage: `Usage: tgnotify dlq purge [-dry-run] [filters | -all]

Deletes the selected dead letters. When the filters are only -channel,
-reason and -recipient the server purges their subject
(dead.notify.<channel>.<reason>.<recipient>) at once; with -key, -since or
-until they are deleted one by one. -all deletes every dead letter. Purging
never touches NOTIFY or the delivery records.

`},
	}
}

// dlqSettings are what a dlq command's flags configure.
type dlqSettings struct {
	conn                                          connFlags
	channel, reason, recipient, key, since, until string
	dryRun, all                                   bool
	filter                                        operator.Filter
	seqs                                          []uint64
}

// runDLQ is `tgnotify dlq`.
func runDLQ(ctx context.Context, s streams, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(s.stderr, dlqUsage)
		return &config.Error{Err: errors.New("no dlq command given (list, show, replay, purge, report)")}
	}
	if slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]) {
		fmt.Fprint(s.stderr, dlqUsage)
		return flag.ErrHelp
	}
	if args[0] == "report" {
		err := runDLQReport(ctx, s, args[1:])
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			err = fmt.Errorf("report: %w", err)
		}
		return err
	}
	for _, c := range dlqCommands() {
		if c.name != args[0] {
			continue
		}
		p, err := parseDLQ(c, args[1:], s)
		if err != nil {
			return err
		}
		err = c.run(ctx, s, p)
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			err = fmt.Errorf("%s: %w", c.name, err)
		}
		return err
	}
	fmt.Fprint(s.stderr, dlqUsage)
	return &config.Error{Err: fmt.Errorf("unknown dlq command %q", args[0])}
}

func parseDLQ(c dlqCommand, args []string, s streams) (*dlqSettings, error) {
	p := &dlqSettings{}
	cs := config.New("tgnotify dlq "+c.name, config.Options{EnvPrefix: "TGNOTIFY", Getenv: s.getenv, Output: s.stderr, Usage: c.usage, AllowArgs: c.seqs})
	p.conn.register(cs, dlqTimeout)
	p.conn.registerPrefix(cs)
	if c.filters {
		token := func(v string) error {
			if v != "" && !jetstream.ValidToken(v) {
				return errors.New("must be one subject token (no spaces, dots or wildcards)")
			}
			return nil
		}
		config.String(cs, &p.channel, "channel", "", "only dead letters of this `channel` (telegram, max, email, sms)").Check(token)
		config.String(cs, &p.reason, "reason", "", "only dead letters of this `reason` (blocked, max_attempts, content, poison, ...)").Check(token)
		config.String(cs, &p.recipient, "recipient", "", "only dead letters of this `recipient`: a Telegram chat id, u42 or c42 for MAX, e<hash> or an address for email, p<hash> or a phone for SMS (with -channel)")
		config.String(cs, &p.key, "key", "", "only dead letters of this idempotency `key`")
		config.String(cs, &p.since, "since", "", "only dead letters that died at or after this `time` (RFC 3339, or a duration ago such as 24h)").Check(checkWhen)
		config.String(cs, &p.until, "until", "", "only dead letters that died at or before this `time` (RFC 3339, or a duration ago)").Check(checkWhen)
	}
	if c.dryRun {
		config.Bool(cs, &p.dryRun, "dry-run", false, "print what would be deleted; delete nothing")
	}
	if c.all {
		config.Bool(cs, &p.all, "all", false, "select every dead letter (required when no filter and no SEQ is given)")
	}
	if err := cs.Parse(args); err != nil {
		return nil, err
	}
	for _, a := range cs.FlagSet().Args() {
		seq, err := strconv.ParseUint(a, 10, 64)
		if err != nil || seq == 0 {
			return nil, &config.Error{Err: fmt.Errorf("%q is not a sequence number (flags go before SEQ)", a)}
		}
		p.seqs = append(p.seqs, seq)
	}
	if err := p.buildFilter(); err != nil {
		return nil, &config.Error{Err: err}
	}
	hasFilter := p.filter != (operator.Filter{})
	switch {
	case c.seqs && !c.filters && len(p.seqs) == 0:
		return nil, &config.Error{Err: errors.New("give the SEQ of at least one dead letter")}
	case len(p.seqs) > 0 && (hasFilter || p.all):
		return nil, &config.Error{Err: errors.New("give either SEQ... or filters/-all, not both")}
	case c.all && !hasFilter && !p.all && len(p.seqs) == 0:
		return nil, &config.Error{Err: errors.New("select dead letters with a filter (-channel, -reason, -recipient, -key, -since, -until), SEQ..., or -all for every one")}
	case p.all && hasFilter:
		return nil, &config.Error{Err: errors.New("-all selects every dead letter: give it without filters")}
	}
	return p, nil
}

// buildFilter turns the filter flags into an operator.Filter.
func (p *dlqSettings) buildFilter() error {
	now := time.Now()
	f := operator.Filter{Channel: p.channel, Reason: p.reason, Key: p.key}
	f.Since, _ = parseWhen(p.since, now)
	f.Until, _ = parseWhen(p.until, now)
	if p.recipient != "" {
		r := p.recipient
		if p.channel != "" {
			var err error
			if r, err = operator.RecipientToken(p.channel, p.recipient); err != nil {
				return fmt.Errorf("-recipient: %w", err)
			}
		}
		f.Recipient = r
	}
	if err := f.Validate(); err != nil {
		return err
	}
	p.filter = f
	return nil
}

// describeFilter says in words what a filter selects.
func describeFilter(f operator.Filter) string {
	var parts []string
	for _, kv := range [][2]string{{"channel", f.Channel}, {"reason", f.Reason}, {"recipient", f.Recipient}, {"key", f.Key}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+" "+kv[1])
		}
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since "+f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "until "+f.Until.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// listHeader heads the lines of dlq list.
const listHeader = "SEQ\tDIED_AT\tCHANNEL\tREASON\tRECIPIENT\tKEY\tERROR\n"

// writeListLine writes one dead letter as a line of dlq list: tab-separated
// fields, so that cut and awk split it.
func writeListLine(w *bufio.Writer, d operator.DeadLetter) {
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	w.WriteString(strconv.FormatUint(d.Seq, 10))
	w.WriteByte('\t')
	w.WriteString(d.Stored.UTC().Format(time.RFC3339))
	w.WriteByte('\t')
	w.WriteString(orDash(d.Channel))
	w.WriteByte('\t')
	w.WriteString(orDash(d.Reason))
	w.WriteByte('\t')
	w.WriteString(orDash(d.Recipient))
	w.WriteByte('\t')
	w.WriteString(orDash(d.Key))
	w.WriteByte('\t')
	w.WriteString(d.Code)
	if d.Description != "" {
		w.WriteByte(' ')
		w.WriteString(strings.ReplaceAll(d.Description, "\n", " "))
	}
	w.WriteByte('\n')
}

func runDLQList(ctx context.Context, s streams, p *dlqSettings) error {
	sess, err := p.conn.connect(ctx, s, "tgnotify dlq list")
	if err != nil {
		return err
	}
	defer sess.close()
	w := bufio.NewWriterSize(s.stdout, 64<<10)
	w.WriteString(listHeader)
	n := 0
	err = operator.List(sess.ctx, sess.js, sess.names, p.filter, func(d operator.DeadLetter) error {
		writeListLine(w, d)
		n++
		return nil
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(s.stderr, "%d dead letter(s)%s\n", n, describeFilter(p.filter))
	return nil
}

func runDLQShow(ctx context.Context, s streams, p *dlqSettings) error {
	sess, err := p.conn.connect(ctx, s, "tgnotify dlq show")
	if err != nil {
		return err
	}
	defer sess.close()
	missing := 0
	for i, seq := range p.seqs {
		d, err := operator.Get(sess.ctx, sess.js, sess.names, seq)
		if errors.Is(err, operator.ErrNotFound) {
			fmt.Fprintf(s.stderr, "#%d: no such dead letter in %s\n", seq, sess.names.DeadStream)
			missing++
			continue
		}
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(s.stdout)
		}
		printDeadLetter(s.stdout, sess.names, d)
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d dead letter(s) not found: %w", missing, len(p.seqs), operator.ErrNotFound)
	}
	return nil
}

// directGetHeader reports whether a header is one a direct get adds, which
// say what the first lines of dlq show say already.
func directGetHeader(k string) bool {
	switch k {
	case "Nats-Stream", "Nats-Sequence", "Nats-Subject", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence":
		return true
	}
	return false
}

// printDeadLetter writes one dead letter with every header and its body.
func printDeadLetter(w io.Writer, n jetstream.Names, d operator.DeadLetter) {
	fmt.Fprintf(w, "%s #%d, stored %s\nSubject: %s\n", n.DeadStream, d.Seq, d.Stored.UTC().Format(time.RFC3339Nano), d.Subject)
	names := make([]string, 0, len(d.Header))
	for k := range d.Header {
		if !directGetHeader(k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range d.Header[k] {
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
	fmt.Fprintln(w)
	var pretty bytes.Buffer
	if json.Indent(&pretty, d.Data, "", "  ") == nil {
		fmt.Fprintln(w, pretty.String())
	} else {
		fmt.Fprintf(w, "%q\n", d.Data)
	}
}

func runDLQReplay(ctx context.Context, s streams, p *dlqSettings) error {
	sess, err := p.conn.connect(ctx, s, "tgnotify dlq replay")
	if err != nil {
		return err
	}
	defer sess.close()
	var replayed, duplicates, skipped, failed int
	report := func(r operator.Replayed) error {
		switch {
		case errors.Is(r.Err, operator.ErrNotReplayable):
			skipped++
			fmt.Fprintf(s.stderr, "not replayable: %v\n", r.Err)
		case errors.Is(r.Err, operator.ErrNotFound):
			failed++
			fmt.Fprintf(s.stderr, "#%d: no such dead letter in %s\n", r.Seq, sess.names.DeadStream)
		case r.Err != nil:
			failed++
			fmt.Fprintf(s.stderr, "#%d %s: %v\n", r.Seq, r.Key, r.Err)
		case r.Duplicate:
			duplicates++
			fmt.Fprintf(s.stdout, "#%d %s: already replayed (%s holds %s as #%d); not published again\n", r.Seq, r.Key, sess.names.Stream, r.MsgID, r.StoredSeq)
		default:
			replayed++
			fmt.Fprintf(s.stdout, "#%d %s: replayed to %s as %s #%d\n", r.Seq, r.Key, r.To, sess.names.Stream, r.StoredSeq)
		}
		return nil
	}
	if len(p.seqs) > 0 {
		err = operator.ReplaySeqs(sess.ctx, sess.js, sess.names, p.seqs, report)
	} else {
		err = operator.Replay(sess.ctx, sess.js, sess.names, p.filter, report)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(s.stderr, "%d dead letter(s)%s: %d replayed, %d already replayed, %d not replayable, %d failed\n",
		replayed+duplicates+skipped+failed, describeFilter(p.filter), replayed, duplicates, skipped, failed)
	if len(p.seqs) > 0 {
		failed += skipped // asked for by sequence: a poison one is a failure
	}
	if failed > 0 {
		return fmt.Errorf("%d dead letter(s) could not be replayed", failed)
	}
	return nil
}

func runDLQPurge(ctx context.Context, s streams, p *dlqSettings) error {
	sess, err := p.conn.connect(ctx, s, "tgnotify dlq purge")
	if err != nil {
		return err
	}
	defer sess.close()
	verb := "deleted"
	if p.dryRun {
		verb = "would delete"
	}
	res, err := operator.Purge(sess.ctx, sess.js, sess.names, p.filter, p.dryRun, func(d operator.DeadLetter) error {
		fmt.Fprintf(s.stdout, "#%d %s %s %s %s: %s\n", d.Seq, d.Channel, d.Reason, d.Recipient, d.Key, verb)
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case res.Subject != "" && p.dryRun:
		fmt.Fprintf(s.stdout, "would purge %d dead letter(s) on %s; nothing was deleted\n", res.Count, res.Subject)
	case res.Subject != "":
		fmt.Fprintf(s.stdout, "purged %d dead letter(s) on %s\n", res.Count, res.Subject)
	case p.dryRun:
		fmt.Fprintf(s.stdout, "would delete %d dead letter(s)%s; nothing was deleted\n", res.Count, describeFilter(p.filter))
	default:
		fmt.Fprintf(s.stdout, "deleted %d dead letter(s)%s\n", res.Count, describeFilter(p.filter))
	}
	return nil
}
