package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// dlqRateGoal is the dead letters a second `tgnotify dlq list` must list
// (issue: the script manages about 30).
const dlqRateGoal = 5000

// dlqTimeout bounds one listing, ours or the script's; only a broken run
// reaches it.
const dlqTimeout = 5 * time.Minute

// dlqPublishBatch is how many dead letters are published before waiting
// for their acknowledgements.
const dlqPublishBatch = 1000

// deadLetterKinds are the reasons, error codes and descriptions the
// published dead letters cycle through, as the workers write them.
var deadLetterKinds = []struct{ reason, code, description string }{
	{"blocked", "403", "Forbidden: bot was blocked by the user"},
	{"max_attempts", "502", "Bad Gateway"},
	{"chat_not_found", "400", "Bad Request: chat not found"},
	{"content", "400", "Bad Request: message is too long"},
}

// deadLetters is scenario 9: how fast `tgnotify dlq list` lists
// NOTIFY_DEAD, against scripts/dead-letters.sh list on the same stream.
func (r *runner) deadLetters(ctx context.Context) []*Result {
	n, m := r.cfg.DLQLetters, min(r.cfg.DLQScriptLetters, r.cfg.DLQLetters)
	res := &Result{
		ID: "9", Title: fmt.Sprintf("Dead letters listed per second: `tgnotify dlq list` over %s dead letters", group(int64(n))),
		Ours:      fmt.Sprintf("`bin/tgnotify dlq list`, all %s dead letters", group(int64(n))),
		Reference: fmt.Sprintf("`scripts/dead-letters.sh list`, its first %d lines on the same stream", m),
		Unit:      "letters/s", RefUnit: "letters/s",
		Goal:       Goal{Text: fmt.Sprintf("≥ %d letters/s", dlqRateGoal), Limit: dlqRateGoal},
		GoalOnOurs: true, ShowRatio: true,
		ExtraColumns: []string{"tgnotify: letters listed", "tgnotify: wall (s)", "script: letters listed", "script: wall (s)"},
		Method: fmt.Sprintf("One nats-server (%s) for all runs, NOTIFY and NOTIFY_DEAD provisioned as `tgnotify provision` does "+
			"(`jetstream.ProvisionStreams`). Before the first run %d dead letters are published to NOTIFY_DEAD as the workers "+
			"write them: subject `dead.notify.<channel>.<reason>.<recipient>`, a notification payload (`notify.Notification."+
			"MarshalPayload`) as the body, its notification headers (Notify-Key, Notify-Created-At, Content-Type) and the "+
			"dead-letter headers (Notify-Reason, Notify-Error-Code, Notify-Error-Description, Notify-Attempts, "+
			"Notify-Original-Subject, Notify-Original-Seq, Notify-Dead-At), round robin over the four channels "+
			"(telegram, max, email, sms) and over %d reasons. Each run then lists the same stream both ways, which goes "+
			"first alternating from run to run. Ours: `bin/tgnotify dlq list -nats URL` as a process, timed from its start "+
			"to its exit (start-up and connecting included), stdout captured and checked: the header and one line per dead "+
			"letter, the last one of sequence %d, and `%d dead letter(s)` on stderr; figure: %d / wall time. Reference: "+
			"`sh scripts/dead-letters.sh list` with NATS_URL and NATS_CLI=bin/nats, which reads one dead letter per `nats "+
			"stream get` call and cannot be told to stop early: it lists the same %d-letter stream from its first "+
			"sequence, and is stopped (SIGTERM to its process group) once it printed %d dead-letter lines, each checked to "+
			"name the next sequence; figure: %d / the time from its start to its %d-th line (its start-up and `nats stream "+
			"info` call included, as ours includes start-up). Ratio: ours / the script's. The goal is on our absolute rate.",
			syncDefault, n, len(deadLetterKinds), n, n, n, n, m, m, m),
	}
	start := time.Now()
	err := r.withStack(ctx, "dlq", syncDefault, func(st *stack) error {
		if err := st.provision(ctx); err != nil {
			return err
		}
		if err := publishDeadLetters(ctx, st.nc, n); err != nil {
			return err
		}
		r.measure(ctx, res, r.cfg.Runs, func(ctx context.Context, run int) (RunFigures, error) {
			return r.deadLettersRun(ctx, st, run, n, m)
		})
		if res.Error != "" {
			return errors.New(res.Error) // keep the logs
		}
		return nil
	})
	if err != nil {
		res.fail(err)
	}
	if ref := res.ReferenceSummary(); ref.N > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("The script spends %.0f ms per dead letter (median run): one `nats stream get` "+
			"process and about twenty short-lived helpers (sed, base64, tr, head, cut and their subshells) per letter, so its "+
			"rate follows the machine's process start-up cost and load, not the server's.", 1000/ref.Median))
	}
	res.Elapsed = time.Since(start)
	return []*Result{res}
}

// deadLettersRun lists the n dead letters with tgnotify and the first m
// with the script, in an order that alternates with run.
func (r *runner) deadLettersRun(ctx context.Context, st *stack, run, n, m int) (RunFigures, error) {
	var ours, script time.Duration
	steps := []func() error{
		func() (err error) { ours, err = r.tgnotifyList(ctx, st.natsURL, n); return err },
		func() (err error) { script, err = r.scriptList(ctx, st, m); return err },
	}
	if run%2 == 1 {
		slices.Reverse(steps)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return RunFigures{}, err
		}
	}
	oursRate, scriptRate := float64(n)/ours.Seconds(), float64(m)/script.Seconds()
	return RunFigures{
		Ours: oursRate, Reference: scriptRate, Ratio: ratio(oursRate, scriptRate),
		Extra: []string{strconv.Itoa(n), fmt.Sprintf("%.3f", ours.Seconds()), strconv.Itoa(m), fmt.Sprintf("%.2f", script.Seconds())},
	}, nil
}

// tgnotifyList runs `bin/tgnotify dlq list` against url, checks that it
// listed n dead letters and returns its wall time.
func (r *runner) tgnotifyList(ctx context.Context, url string, n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, dlqTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin("tgnotify"), "dlq", "list", "-nats", url)
	cmd.Env = cleanEnviron()
	var stdout, stderr bytes.Buffer
	stdout.Grow(n * 128)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("tgnotify dlq list: %w: %s", err, lastLines(stderr.String(), 5))
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if got := len(lines) - 1; got != n { // the header line
		return 0, fmt.Errorf("tgnotify dlq list printed %d dead letters, want %d", got, n)
	}
	if seq, _, _ := strings.Cut(lines[n], "\t"); seq != strconv.Itoa(n) {
		return 0, fmt.Errorf("tgnotify dlq list's last line is %q, want sequence %d", lines[n], n)
	}
	if want := fmt.Sprintf("%d dead letter(s)", n); !strings.HasPrefix(stderr.String(), want) {
		return 0, fmt.Errorf("tgnotify dlq list said %q, want %q", lastLines(stderr.String(), 3), want)
	}
	return wall, nil
}

// scriptList runs `scripts/dead-letters.sh list` on the stack's server
// until it printed m dead letters, stops it, and returns the time to its
// m-th line.
func (r *runner) scriptList(ctx context.Context, st *stack, m int) (time.Duration, error) {
	cli, err := filepath.Abs(r.bin("nats"))
	if err != nil {
		return 0, err
	}
	home := filepath.Join(st.dir, "script-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, dlqTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", r.cfg.DeadLettersScript, "list")
	// No user context or configuration: the CLI connects to NATS_URL.
	cmd.Env = cleanEnviron("NATS_URL="+st.natsURL, "NATS_CLI="+cli, "NATS_CONTEXT=", "HOME="+home, "TMPDIR="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting dead-letters.sh list: %w", err)
	}
	sc := bufio.NewScanner(out)
	listed, wall := -1, time.Duration(0) // the header line comes first
	var bad error
	for listed < m && sc.Scan() {
		listed++
		if listed == 0 {
			continue
		}
		if seq, _, _ := strings.Cut(sc.Text(), " "); seq != strconv.Itoa(listed) {
			bad = fmt.Errorf("dead-letters.sh list's line %d is %q, want sequence %d", listed, sc.Text(), listed)
			break
		}
	}
	if listed == m {
		wall = time.Since(t0)
	}
	// The script cannot be bounded: stop it and the nats call it is in.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
	switch {
	case bad != nil:
		return 0, bad
	case listed < m:
		return 0, fmt.Errorf("dead-letters.sh list printed %d dead letters, want %d: %v: %s", max(listed, 0), m, werr, lastLines(stderr.String(), 5))
	}
	return wall, nil
}

// cleanEnviron returns this process's environment without the settings
// that would steer a measured command (system.CleanEnv), plus set.
func cleanEnviron(set ...string) []string {
	unset := system.CleanEnv()
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(unset, name) {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// publishDeadLetters stores n dead letters in NOTIFY_DEAD as the workers
// write them, round robin over the channels and, within each, over
// deadLetterKinds; n/4 recipients per channel. It checks that the stream
// then holds exactly n messages.
func publishDeadLetters(ctx context.Context, nc *nats.Conn, n int) error {
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(2*dlqPublishBatch))
	if err != nil {
		return err
	}
	channels := notify.Channels()
	created := time.Now().UTC()
	for start := 0; start < n; start += dlqPublishBatch {
		for i := start; i < min(n, start+dlqPublishBatch); i++ {
			m, err := deadLetter(i, n, channels[i%len(channels)], deadLetterKinds[i/len(channels)%len(deadLetterKinds)], created)
			if err != nil {
				return err
			}
			if _, err := js.PublishMsgAsync(m); err != nil {
				return fmt.Errorf("publishing dead letter %d: %w", i+1, err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(connectTimeout):
			return fmt.Errorf("dead letters %d..%d not acknowledged within %v", start+1, min(n, start+dlqPublishBatch), connectTimeout)
		}
		if k := js.PublishAsyncPending(); k != 0 {
			return fmt.Errorf("%d dead letters not acknowledged", k)
		}
	}
	ictx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	s, err := js.Stream(ictx, jetstream.StreamDead)
	if err != nil {
		return err
	}
	info, err := s.Info(ictx)
	if err != nil {
		return err
	}
	if info.State.Msgs != uint64(n) || info.State.FirstSeq != 1 {
		return fmt.Errorf("NOTIFY_DEAD holds %d messages from sequence %d, want %d from 1", info.State.Msgs, info.State.FirstSeq, n)
	}
	return nil
}

// deadLetter returns dead letter i of n: a notification for channel c that
// died of kind k.
func deadLetter(i, n int, c notify.Channel, k struct{ reason, code, description string }, created time.Time) (*nats.Msg, error) {
	id := int64(1000 + i%(n/4+1))
	no := notify.Notification{
		Key: fmt.Sprintf("order:B%d:accepted", i), Channel: c, CreatedAt: created,
		Text: "Order B" + strconv.Itoa(i) + " accepted: 2 items, 1 490 ₽",
	}
	switch c {
	case notify.ChannelTelegram:
		no.ChatID = id
	case notify.ChannelMax:
		no.MaxUserID = id
	case notify.ChannelEmail:
		no.Email = fmt.Sprintf("buyer%d@example.com", id)
		no.Subject = "Order B" + strconv.Itoa(i) + " accepted"
	default:
		no.Phone = fmt.Sprintf("+7999%07d", id)
	}
	body, err := no.MarshalPayload()
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: %w", i+1, err)
	}
	recipient, err := no.Recipient(c)
	if err != nil {
		return nil, err
	}
	original := jetstream.Subject(string(c), recipient)
	m := jetstream.Msg(original, no.Key, created, notify.PayloadContentType, body)
	m.Subject = jetstream.DeadLetterSubject(string(c), k.reason, recipient)
	m.Header.Set(nats.MsgIdHdr, "dead:"+strconv.Itoa(i+1))
	m.Header.Set(jetstream.HeaderReason, k.reason)
	m.Header.Set(jetstream.HeaderErrorCode, k.code)
	m.Header.Set(jetstream.HeaderErrorDescription, k.description)
	m.Header.Set(jetstream.HeaderAttempts, "0")
	m.Header.Set(jetstream.HeaderOriginalSubject, original)
	m.Header.Set(jetstream.HeaderOriginalSeq, strconv.Itoa(i+1))
	m.Header.Set(jetstream.HeaderDeadAt, created.Format(time.RFC3339Nano))
	return m, nil
}
