// Package runbook_test runs the dead-letter commands of docs/RUNBOOK.md,
// exactly as written there, with the real nats CLI against a live NATS
// server, a real telegram worker and the Bot API emulator.
//
// Every fenced block preceded by <!-- runbook-test: NAME --> is extracted
// from the markdown and run with `sh -e -c`, in a directory where bin/ is
// $TGNOTIFY_BIN and scripts/ is the repository's, with NATS_URL and the
// variables the runbook tells the operator to set (SEQ, REASON, CHAT). The
// test fails if the runbook gains a marked block it does not run.
package runbook_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

const runbookPath = "../../docs/RUNBOOK.md"

// marker precedes a command block the test runs.
var marker = regexp.MustCompile(`^<!-- runbook-test: ([a-z0-9-]+) -->$`)

// runbookBlocks returns the marked command blocks of the runbook by name.
func runbookBlocks(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blocks := map[string]string{}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		m := marker.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := m[1]
		if _, dup := blocks[name]; dup {
			t.Fatalf("%s:%d: block %q marked twice", runbookPath, line, name)
		}
		if !sc.Scan() || sc.Text() != "```sh" {
			t.Fatalf("%s:%d: marker %q must be followed by a ```sh block", runbookPath, line, name)
		}
		line++
		var body []string
		closed := false
		for sc.Scan() {
			line++
			if sc.Text() == "```" {
				closed = true
				break
			}
			body = append(body, sc.Text())
		}
		if !closed || len(body) == 0 {
			t.Fatalf("%s: block %q is empty or not closed", runbookPath, name)
		}
		blocks[name] = strings.Join(body, "\n") + "\n"
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// shell runs runbook blocks the way an operator pastes them.
type shell struct {
	blocks map[string]string
	dir    string
	env    []string
	ran    map[string]bool
}

func newShell(t *testing.T, natsURL string) *shell {
	t.Helper()
	bin := builtbin.Dir(t, "nats")
	scripts, err := filepath.Abs("../../scripts")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for link, target := range map[string]string{"bin": bin, "scripts": scripts} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir() // no nats contexts of the developer's
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + home, "TMPDIR=" + t.TempDir(), "NATS_URL=" + natsURL}
	return &shell{blocks: runbookBlocks(t), dir: dir, env: env, ran: map[string]bool{}}
}

// run runs block name with the variables vars (NAME=value) and returns its
// output; a non-zero exit fails the test.
func (s *shell) run(t *testing.T, name string, vars ...string) string {
	t.Helper()
	out, err := s.try(t, name, vars...)
	if err != nil {
		t.Fatalf("runbook block %q (%v) failed: %v\n%s\n--- output:\n%s", name, vars, err, s.blocks[name], out)
	}
	return out
}

// try runs block name and returns its output and error.
func (s *shell) try(t *testing.T, name string, vars ...string) (string, error) {
	t.Helper()
	script, ok := s.blocks[name]
	if !ok {
		t.Fatalf("docs/RUNBOOK.md has no block marked runbook-test: %s", name)
	}
	s.ran[name] = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Dir = s.dir
	cmd.Env = append(slices.Clone(s.env), vars...)
	out, err := cmd.CombinedOutput()
	t.Logf("$ %s %v\n%s", name, vars, out)
	return string(out), err
}

// tgnotifyBlock prefixes the names of the blocks that use bin/tgnotify.
const tgnotifyBlock = "tgnotify-"

// checkAllRan fails the test for every marked block that mine selects and
// that did not run.
func (s *shell) checkAllRan(t *testing.T, mine func(name string) bool) {
	t.Helper()
	for name := range s.blocks {
		if mine(name) && !s.ran[name] {
			t.Errorf("docs/RUNBOOK.md block %q is marked runbook-test but no test runs it", name)
		}
	}
}

// command runs a command in the shell's directory, for checks outside the
// runbook's blocks.
func (s *shell) command(args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustContain(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

func mustNotContain(t *testing.T, what, out string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(out, w) {
			t.Errorf("%s: output contains %q:\n%s", what, w, out)
		}
	}
}

// deadSeqs maps each dead letter's key to its sequences, and lists the
// sequences without a key.
func deadSeqs(env *testenv.Env) (byKey map[string][]uint64, keyless []uint64) {
	byKey = map[string][]uint64{}
	for _, m := range env.DeadLetters() {
		if k := m.Header.Get(jetstream.HeaderKey); k != "" {
			byKey[k] = append(byKey[k], m.Sequence)
		} else {
			keyless = append(keyless, m.Sequence)
		}
	}
	return byKey, keyless
}

func seqVar(seq uint64) string { return "SEQ=" + strconv.FormatUint(seq, 10) }

// notifications counts the Telegram notifications stored in NOTIFY.
func notifications(t *testing.T, env *testenv.Env) uint64 {
	t.Helper()
	ctx := context.Background()
	st, err := env.JS.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(jetstream.TelegramFilter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// drained reports whether the worker acknowledged everything in NOTIFY.
func drained(t *testing.T, env *testenv.Env) bool {
	t.Helper()
	c, err := env.JS.Consumer(context.Background(), jetstream.StreamNotify, jetstream.ConsumerTelegram)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

func TestRunbookDeadLetterCommands(t *testing.T) {
	lim := emulator.DefaultLimits()
	lim.BotRate, lim.BotBurst, lim.ChatRate, lim.ChatBurst, lim.GroupPerMinute, lim.GroupBurst = 300, 300, 20, 3, 1200, 3
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200}}})
	sh := newShell(t, env.NATS.URL())
	w := env.StartWorker(testenv.WorkerOptions{
		Telegram: telegram.Config{BotRate: 300, ChatRate: 20, GroupPerMinute: 1200},
		Config: delivery.Config{
			MaxAttempts: 2, BackoffBase: 20 * time.Millisecond, BackoffCap: 100 * time.Millisecond,
			BreakerFailures: 1000,
		}})

	// An outage dead-letters R1 and R2 as max_attempts. R2 is in the stream
	// twice, under two message ids, as after a republish past the duplicate
	// window: two dead letters of one key.
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.Fault5xx}); err != nil {
		t.Fatal(err)
	}
	r1 := notify.Notification{Key: "order:R1:accepted", ChatID: 100, Text: "order R1 accepted"}
	r2 := notify.Notification{Key: "order:R2:accepted", ChatID: 101, Text: "order R2 accepted"}
	env.Publish(r1)
	env.Publish(r2)
	republish(t, env, r2, "order:R2:accepted:again")
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(env.DeadLetters()) == 3 }, "three max_attempts dead letters")
	env.Emu.StopOutage()

	// A blocked chat and a poison message.
	env.Publish(notify.Notification{Key: "order:R3:accepted", ChatID: 200, Text: "order R3 accepted"})
	env.PublishRaw("notify.telegram.300", []byte("not a notification"), nats.Header{})
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(env.DeadLetters()) == 5 }, "blocked and poison dead letters")
	natstest.WaitFor(t, 10*time.Second, func() bool { return drained(t, env) }, "the worker to ack everything")
	byKey, keyless := deadSeqs(env)
	if len(byKey[r1.Key]) != 1 || len(byKey[r2.Key]) != 2 || len(byKey["order:R3:accepted"]) != 1 || len(keyless) != 1 {
		t.Fatalf("dead letters by key %v, keyless %v: want R1 once, R2 twice, R3 once, one poison", byKey, keyless)
	}
	seqR1, seqR3, seqPoison := byKey[r1.Key][0], byKey["order:R3:accepted"][0], keyless[0]
	if got := env.Emu.Stats().Delivered; got != 0 {
		t.Fatalf("%d messages delivered before any replay, want 0", got)
	}

	t.Run("list", func(t *testing.T) {
		out := sh.run(t, "info")
		mustContain(t, "info", out, "NOTIFY_DEAD", "dead.notify.telegram.max_attempts.100", "dead.notify.telegram.max_attempts.101",
			"dead.notify.telegram.blocked.200")
		out = sh.run(t, "list")
		mustContain(t, "list", out, r1.Key, r2.Key, "order:R3:accepted", "max_attempts", "blocked", "poison")
		out = sh.run(t, "list-reason", "REASON=max_attempts")
		mustContain(t, "list max_attempts", out, r1.Key, r2.Key, "3 dead letter(s) of reason max_attempts")
		mustNotContain(t, "list max_attempts", out, "order:R3:accepted", "poison")
	})

	t.Run("inspect", func(t *testing.T) {
		out := sh.run(t, "inspect", seqVar(seqR1))
		mustContain(t, "inspect", out, "Notify-Key: "+r1.Key, "Notify-Reason: max_attempts", "Notify-Error-Code: 502",
			"Notify-Original-Subject: notify.telegram.100", "Notify-Attempts: 2", `"text":"order R1 accepted"`)
	})

	t.Run("replay one, then again", func(t *testing.T) {
		out := sh.run(t, "replay-one", seqVar(seqR1))
		mustContain(t, "replay", out, "replayed to notify.telegram.100")
		natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Emu.ChatMessages(100)) == 1 }, "the replay of R1 delivered")
		natstest.WaitFor(t, 10*time.Second, func() bool { return drained(t, env) }, "the worker to ack the replay")
		before := notifications(t, env)

		out = sh.run(t, "replay-one", seqVar(seqR1))
		mustContain(t, "second replay", out, "already replayed")
		if after := notifications(t, env); after != before {
			t.Errorf("the second replay stored a message: NOTIFY holds %d notifications, %d before", after, before)
		}
		if got := len(env.Emu.ChatMessages(100)); got != 1 {
			t.Errorf("chat 100 got %d messages after two replays, want 1", got)
		}
	})

	t.Run("replay all of one reason", func(t *testing.T) {
		already := w.Stats().AlreadyDelivered
		out := sh.run(t, "replay-reason", "REASON=max_attempts")
		// R1 was replayed before: JetStream drops it. R2's two dead letters
		// get two replay ids, so both reach the stream, and the worker
		// sends the key once.
		mustContain(t, "replay-reason", out, r1.Key+": already replayed", "replayed to notify.telegram.101", "3 dead letter(s) of reason max_attempts; 0 failed")
		natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Emu.ChatMessages(101)) == 1 }, "R2 delivered")
		natstest.WaitFor(t, 20*time.Second, func() bool { return w.Stats().AlreadyDelivered > already && drained(t, env) },
			"the second copy of R2 acked as already delivered")
		if got := len(env.Emu.ChatMessages(101)); got != 1 {
			t.Errorf("chat 101 got %d messages for two dead letters of one key, want 1", got)
		}
		if got := len(env.Emu.ChatMessages(100)); got != 1 {
			t.Errorf("chat 100 got %d messages, want 1", got)
		}

		// Running it again publishes nothing.
		before := notifications(t, env)
		out = sh.run(t, "replay-reason", "REASON=max_attempts")
		mustNotContain(t, "replay-reason again", out, "replayed to")
		if after := notifications(t, env); after != before {
			t.Errorf("replaying the reason again stored %d messages", after-before)
		}
	})

	t.Run("revive a chat and replay by hand", func(t *testing.T) {
		env.Emu.Unblock(200) // the customer unblocked the bot
		out := sh.run(t, "revive-chat", "CHAT=200")
		mustContain(t, "revive", out, "blocked")
		natstest.WaitFor(t, 10*time.Second, func() bool { return w.Stats().DeadRecipients == 0 }, "the worker to forget the dead chat")

		sh.run(t, "replay-by-hand", seqVar(seqR3))
		natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Emu.ChatMessages(200)) == 1 }, "R3 delivered")
		// The script computes the same replay id, so it is a duplicate.
		out = sh.run(t, "replay-one", seqVar(seqR3))
		mustContain(t, "script after the manual replay", out, "already replayed")
		natstest.WaitFor(t, 10*time.Second, func() bool { return drained(t, env) }, "the worker to ack everything")
		if got := len(env.Emu.ChatMessages(200)); got != 1 {
			t.Errorf("chat 200 got %d messages, want 1", got)
		}
	})

	t.Run("a poison message is not replayable", func(t *testing.T) {
		out, err := sh.command("scripts/dead-letters.sh", "replay", strconv.FormatUint(seqPoison, 10))
		if err == nil {
			t.Errorf("replaying a poison message succeeded:\n%s", out)
		}
		mustContain(t, "poison replay", out, "not replayable")
	})

	t.Run("purge", func(t *testing.T) {
		sh.run(t, "purge-one", seqVar(seqPoison))
		if _, keyless := deadSeqs(env); len(keyless) != 0 {
			t.Errorf("the poison dead letter survived purge-one")
		}
		sh.run(t, "purge-reason", "REASON=blocked")
		if byKey, _ := deadSeqs(env); len(byKey["order:R3:accepted"]) != 0 || len(byKey[r1.Key]) != 1 {
			t.Errorf("the blocked dead letter survived purge-reason")
		}
		sh.run(t, "purge-chat", "CHAT=101")
		if byKey, _ := deadSeqs(env); len(byKey[r2.Key]) != 0 || len(byKey[r1.Key]) != 1 {
			t.Errorf("purge-chat 101: dead letters left %v, want only R1's", byKey)
		}
		sh.run(t, "purge-all")
		if n := len(env.DeadLetters()); n != 0 {
			t.Errorf("%d dead letters after purge-all", n)
		}
		out := sh.run(t, "list")
		mustContain(t, "list of an empty stream", out, "0 dead letter(s); 0 failed")
	})

	// Every marked block of the runbook's nats CLI procedures must have
	// run (TestRunbookTgnotifyCommands runs the tgnotify ones).
	sh.checkAllRan(t, func(name string) bool { return !strings.HasPrefix(name, tgnotifyBlock) })
	if got := env.Emu.Stats().Delivered; got != 3 {
		t.Errorf("%d messages delivered in all, want 3 (R1, R2, R3 once each)", got)
	}
}

// republish publishes n again under another message id.
func republish(t *testing.T, env *testenv.Env, n notify.Notification, msgID string) {
	t.Helper()
	n.CreatedAt = time.Now().UTC()
	payload, err := n.MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	m := jetstream.NotificationMsg(n.ChatID, n.Key, n.CreatedAt, notify.PayloadContentType, payload)
	m.Header.Set(jetstream.HeaderMsgID, msgID)
	if _, err := env.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}
