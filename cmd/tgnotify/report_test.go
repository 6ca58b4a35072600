package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// The scheduled dead-letter review posts one summary per period to the
// admin chat, through the pipeline: a period with new dead letters posts
// one; a period without posts none; a report posted again after a crash
// that lost the cursor is stored once.
func TestDLQReportPostsOneSummaryPerPeriod(t *testing.T) {
	lim := emulator.DefaultLimits()
	lim.BotRate, lim.BotBurst, lim.ChatRate, lim.ChatBurst = 300, 300, 20, 3
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{300}}})
	cfg := delivery.Config{BackoffBase: 20 * time.Millisecond, BackoffCap: 100 * time.Millisecond}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: telegram.Config{BotRate: 300, ChatRate: 20, GroupPerMinute: 1200}})
	vars := map[string]string{"NATS_URL": env.NATS.URL()}
	const admin = 999
	state := filepath.Join(t.TempDir(), "dlq-report.json")
	report := func(extra ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := run(t, vars, append([]string{"dlq", "report", "-state", state, "-admin-chat", "999", "-env", "test"}, extra...)...)
		t.Logf("$ tgnotify dlq report\n%s%s", stdout, stderr)
		return code, stdout, stderr
	}
	summaries := func() []string { return texts(env.Emu.ChatMessages(admin)) }

	if code, _, stderr := run(t, vars, "dlq", "report"); code == 0 || !strings.Contains(stderr, "-admin-chat is required") {
		t.Errorf("without -admin-chat: exit %d, want a usage error naming -admin-chat:\n%s", code, stderr)
	}

	env.Publish(notify.Notification{Key: "order:X1:accepted", ChatID: 300, Text: "X1"})
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.DeadLetters()) == 1 }, "the first dead letter")
	if code, stdout, _ := report(); code != 0 || !strings.Contains(stdout, "tgnotify dead letters (test): 1 new") ||
		!strings.Contains(stdout, "telegram blocked") || !strings.Contains(stdout, "order:X1:accepted") {
		t.Fatalf("first report: exit %d, want one blocked dead letter named:\n%s", code, stdout)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(summaries()) == 1 }, "the first summary delivered to the admin chat")
	if got := summaries()[0]; !strings.Contains(got, "1 new") || !strings.Contains(got, "telegram blocked") {
		t.Errorf("the admin chat received %q, want the summary", got)
	}
	firstState, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}

	if code, stdout, _ := report(); code != 0 || !strings.Contains(stdout, "none new") {
		t.Fatalf("report of a quiet period: exit %d:\n%s", code, stdout)
	}

	env.Publish(notify.Notification{Key: "order:X2:accepted", ChatID: 300, Text: "X2"})
	env.Publish(notify.Notification{Key: "order:X3:accepted", ChatID: 300, Text: "X3"})
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.DeadLetters()) == 3 }, "two more dead letters")
	if code, stdout, _ := report(); code != 0 || !strings.Contains(stdout, "2 new") || strings.Contains(stdout, "order:X1") {
		t.Fatalf("second report: exit %d, want the two new ones only:\n%s", code, stdout)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(summaries()) == 2 }, "the second summary delivered")

	// A crash after posting the second report and before saving the
	// cursor: the next run posts the same report again, stored once.
	if err := os.WriteFile(state, firstState, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, _ := report(); code != 0 || !strings.Contains(stdout, "2 new") {
		t.Fatalf("report after the lost cursor: exit %d:\n%s", code, stdout)
	}
	env.Publish(notify.Notification{Key: "marker", ChatID: admin, Text: "marker"})
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(summaries()) == 3 }, "the marker after the repeated report")
	if got := summaries(); got[2] != "marker" {
		t.Errorf("the admin chat received %d messages (%q), want the two summaries and the marker: the repeated report was sent again", len(got), got)
	}
}

func texts(ms []emulator.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Text
	}
	return out
}

// The shipped configs/dlq-report.yaml parses, sets nothing, and shows every
// setting of the report commented at its default (the connection's come
// from the unit).
func TestShippedReportConfig(t *testing.T) {
	const path = "../../configs/dlq-report.yaml"
	_, cs, err := parseReport([]string{"-config", path, "-dry-run"}, streams{stderr: os.Stderr, getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var skip []string
	cs.FlagSet().VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "nats") || f.Name == "timeout" || f.Name == "log-level" || f.Name == "config" {
			skip = append(skip, f.Name)
		}
	})
	configtest.CheckCommentedDefaults(t, cs.FlagSet(), path, skip...)
}
