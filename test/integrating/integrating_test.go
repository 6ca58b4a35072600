// Package integrating_test checks docs/INTEGRATING.md, the contract an
// application in any language follows to hand tgnotify its notifications:
// the page's SQL and test vectors are the published files and the code's
// rules, and the Python example application, which follows the page, gets
// its notifications delivered by the real publisher binary, a telegram
// worker and the Bot API emulator. The Python test needs python3 on PATH
// and the built binaries ($TGNOTIFY_BIN); it skips without them.
package integrating_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

const (
	docPath    = "../../docs/INTEGRATING.md"
	scriptPath = "../../examples/python/place_order.py"
	repoRoot   = "../.."
)

// contractMarker precedes a block or table of the page that a test checks.
var contractMarker = regexp.MustCompile(`^<!-- contract: ([a-z0-9./_-]+) -->$`)

// contractBlocks returns the page's marked parts by name: the body of the
// fenced block, or the lines of the table, that follows each marker.
func contractBlocks(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(docPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blocks := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := contractMarker.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var body []string
		if !sc.Scan() {
			t.Fatalf("%s: marker %q ends the file", docPath, m[1])
		}
		if first := sc.Text(); strings.HasPrefix(first, "```") {
			for sc.Scan() && sc.Text() != "```" {
				body = append(body, sc.Text())
			}
		} else {
			for ok := true; ok && strings.HasPrefix(sc.Text(), "|"); ok = sc.Scan() {
				body = append(body, sc.Text())
			}
		}
		if len(body) == 0 {
			t.Fatalf("%s: marker %q is not followed by a fenced block or a table", docPath, m[1])
		}
		blocks[m[1]] = strings.Join(body, "\n") + "\n"
	}
	return blocks
}

// fields normalizes white space, for comparing SQL.
func fields(s string) string { return strings.Join(strings.Fields(s), " ") }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The page's SQL is the published files', its INSERT is the one the Python
// example runs, its recipient tokens are what notify computes, and its
// payload examples decode.
func TestDocumentedContract(t *testing.T) {
	blocks := contractBlocks(t)
	for _, file := range []string{"pkg/outbox/schema.sql", "pkg/outbox/connection.sql"} {
		got, ok := blocks[file]
		if !ok {
			t.Errorf("%s has no block marked contract: %s", docPath, file)
			continue
		}
		if want := readFile(t, filepath.Join(repoRoot, file)); got != want {
			t.Errorf("%s: the block of %s differs from the file:\n--- page:\n%s\n--- file:\n%s", docPath, file, got, want)
		}
	}
	if outbox.SchemaFile != "pkg/outbox/schema.sql" {
		t.Errorf("outbox.SchemaFile = %q, but the page publishes pkg/outbox/schema.sql", outbox.SchemaFile)
	}

	script := readFile(t, scriptPath)
	insert := blocks["insert"]
	if insert == "" || !strings.Contains(fields(script), fields(insert)) {
		t.Errorf("%s does not run the page's INSERT:\n%s", scriptPath, insert)
	}
	if cancel := blocks["cancel"]; cancel == "" || !strings.Contains(fields(script), fields(cancel)) {
		t.Errorf("%s does not run the page's cancelling UPDATE:\n%s", scriptPath, cancel)
	}
	for _, uses := range []string{`"schema.sql"`, `"connection.sql"`, `"BEGIN IMMEDIATE"`, "isolation_level=None"} {
		if !strings.Contains(script, uses) {
			t.Errorf("%s does not use %s as the page says", scriptPath, uses)
		}
	}

	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(blocks["tokens"]), "\n")[2:] {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 3 {
			t.Fatalf("token table row %q: want 3 cells", line)
		}
		channel := notify.Channel(strings.TrimSpace(cells[0]))
		field, value, _ := strings.Cut(strings.Trim(strings.TrimSpace(cells[1]), "`"), ": ")
		want := strings.Trim(strings.TrimSpace(cells[2]), "`")
		var n notify.Notification
		id, _ := strconv.ParseInt(value, 10, 64)
		switch field {
		case "chat_id":
			n.ChatID = id
		case "max_user_id":
			n.MaxUserID = id
		case "max_chat_id":
			n.MaxChatID = id
		case "email":
			n.Email = value
		case "phone":
			n.Phone = value
		default:
			t.Fatalf("token table row %q: unknown address field %q", line, field)
		}
		if got, err := n.Recipient(channel); err != nil || got != want {
			t.Errorf("token table: %s %s: notify computes %q (%v), the page says %q", channel, cells[1], got, err, want)
		}
		rows++
	}
	if rows < 5 {
		t.Errorf("the token table has %d rows, want a vector for every channel", rows)
	}

	doc := readFile(t, docPath)
	for _, block := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		for _, p := range strings.Split(strings.TrimSpace(block[1]), "\n") {
			if _, err := notify.DecodePayload([]byte(p)); err != nil {
				t.Errorf("the page's payload example %s: %v", p, err)
			}
		}
	}
}

// python returns python3's path, or skips the test.
func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH: this test runs examples/python/place_order.py (Python 3.11+, standard library only)")
	}
	return p
}

// placeOrder runs the Python example and returns the key it printed.
func placeOrder(t *testing.T, py, db string, args ...string) string {
	t.Helper()
	cmd := placeOrderCmd(t, py, db, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("place_order.py %v: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

func placeOrderCmd(t *testing.T, py, db string, args ...string) *exec.Cmd {
	t.Helper()
	script, err := filepath.Abs(scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return exec.CommandContext(ctx, py, append([]string{script, "--db", db}, args...)...)
}

// The Python application's notifications reach the customer through the
// real publisher and worker, once per order however often it is placed,
// and its database is the one pkg/outbox makes.
func TestPythonApplication(t *testing.T) {
	py := python(t)
	bin := builtbin.Dir(t, "publisher")
	env := testenv.New(t, testenv.Options{})
	env.StartWorker(testenv.WorkerOptions{})
	db := filepath.Join(t.TempDir(), "shop.db")
	ctx := context.Background()

	// The first order creates the database, before any publisher runs.
	if key := placeOrder(t, py, db, "--id", "P1", "--chat-id", "100"); key != "order:P1:accepted" {
		t.Fatalf("place_order.py printed %q, want the key order:P1:accepted", key)
	}
	// An order cancelled before the publisher runs: its notification is
	// never published.
	placeOrder(t, py, db, "--id", "C1", "--chat-id", "101")
	if key := placeOrder(t, py, db, "--id", "C1", "--chat-id", "101", "--cancel"); key != "order:C1:accepted" {
		t.Fatalf("place_order.py --cancel printed %q, want the key order:C1:accepted", key)
	}

	sup, err := procs.New(filepath.Join(t.TempDir(), "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := procs.Addr(port)
	pub, err := sup.Start(procs.Spec{Name: "publisher", Path: filepath.Join(bin, "publisher"),
		Args:  []string{"-db", db, "-nats", env.NATS.URL(), "-http", httpAddr, "-log-format", "json"},
		Unset: system.CleanEnv()})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.WaitReady(ctx, "http://"+httpAddr+"/readyz", 30*time.Second); err != nil {
		t.Fatalf("publisher on the Python application's database: %v\n%s", err, pub.Tail(20))
	}

	texts := func(chat int64) []string {
		var out []string
		for _, m := range env.Emu.ChatMessages(chat) {
			out = append(out, m.Text)
		}
		return out
	}
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(texts(100)) == 1 }, "order P1's notification delivered")
	if n := storedOn(t, env, jetstream.Subject("telegram", "101")); n != 0 {
		t.Fatalf("the cancelled order's notification was published %d times, want never", n)
	}

	t.Run("the same order twice is one notification", func(t *testing.T) {
		if key := placeOrder(t, py, db, "--id", "P1", "--chat-id", "100"); key != "order:P1:accepted" {
			t.Fatalf("the repeat printed %q, want the same key", key)
		}
		placeOrder(t, py, db, "--id", "P2", "--chat-id", "100")
		// P2 follows the repeat in the outbox and on the chat's lane: once it
		// is delivered, a second P1 would have been too.
		natstest.WaitFor(t, 30*time.Second, func() bool { return len(texts(100)) >= 2 }, "order P2 delivered")
		if got, want := texts(100), []string{"Order P1 accepted", "Order P2 accepted"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("chat 100 received %q, want %q", got, want)
		}
		natstest.WaitFor(t, 10*time.Second, func() bool {
			n := 0
			for _, ev := range env.Events("delivered") {
				if ev.Key == "order:P1:accepted" || ev.Key == "order:P2:accepted" {
					n++
				}
			}
			return n == 2
		}, "a delivered event for P1 and P2")
	})

	t.Run("another route: the row and the subject the publisher uses", func(t *testing.T) {
		key := placeOrder(t, py, db, "--id", "P3", "--chat-id", "100", "--email", "Ann.Lee+shop@Mail.Example.org",
			"--phone", "+79991234567", "--route", "email,telegram,sms")
		app, err := outbox.Open(ctx, db, outbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer app.Close()
		var channel, token string
		var payload []byte
		if err := app.QueryRowContext(ctx, `SELECT channel, recipient_token, payload FROM outbox WHERE key = ?`, key).Scan(&channel, &token, &payload); err != nil {
			t.Fatal(err)
		}
		n, err := notify.DecodePayload(payload)
		if err != nil {
			t.Fatalf("the Python payload %s: %v", payload, err)
		}
		want, _ := n.Recipient(notify.ChannelEmail)
		if channel != "email" || token != want || n.Route[0] != notify.ChannelEmail || n.Email != "Ann.Lee+shop@Mail.Example.org" {
			t.Fatalf("row channel %q token %q, payload %+v; want email, %q", channel, token, n, want)
		}
		natstest.WaitFor(t, 30*time.Second, func() bool { return storedOn(t, env, jetstream.Subject("email", want)) == 1 },
			"the publisher to publish P3 to its email subject")
	})

	t.Run("it waits for another writer's lock instead of failing", func(t *testing.T) {
		raw, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		conn, err := raw.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		cmd := placeOrderCmd(t, py, db, "--id", "P4", "--chat-id", "100")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Hold the write lock for a while (contention, not a wait for a
		// condition): the script must queue on busy_timeout behind it.
		held := time.NewTimer(500 * time.Millisecond)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			t.Fatalf("place_order.py finished while another connection held the write lock: %v\n%s", err, stderr.String())
		case <-held.C:
		}
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		if err := <-exited; err != nil {
			t.Fatalf("place_order.py failed behind another writer: %v\n%s", err, stderr.String())
		}
		natstest.WaitFor(t, 30*time.Second, func() bool { return len(texts(100)) == 3 }, "order P4 delivered")
	})

	t.Run("the database is the one pkg/outbox makes", func(t *testing.T) {
		app, err := outbox.Open(ctx, db, outbox.Options{})
		if err != nil {
			t.Fatalf("outbox.Open on the Python application's database: %v", err)
		}
		defer app.Close()
		var mode string
		var version int
		if err := app.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := app.QueryRowContext(ctx, `SELECT MAX(version) FROM outbox_schema`).Scan(&version); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || version != outbox.SchemaVersion() {
			t.Fatalf("journal_mode %s, schema version %d; want wal, %d", mode, version, outbox.SchemaVersion())
		}
	})
}

// storedOn counts the messages NOTIFY holds on subject.
func storedOn(t *testing.T, env *testenv.Env, subject string) uint64 {
	t.Helper()
	st, err := env.JS.Stream(context.Background(), jetstream.StreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), natsjs.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
