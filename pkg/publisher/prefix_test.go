package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/operator"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// deployment is one environment on the shared server: its names, an outbox
// database with a publisher draining it, and a telegram worker.
type deployment struct {
	env  *testenv.Env
	keys []string
}

// startDeployment runs a publisher (on an outbox of its own) and a telegram
// worker under env's names until the end of the test.
func startDeployment(t *testing.T, env *testenv.Env) *deployment {
	t.Helper()
	ctx := context.Background()
	env.StartWorker(testenv.WorkerOptions{})
	path := filepath.Join(t.TempDir(), env.Names.Prefix+".db")
	app, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatalf("opening outbox: %v", err)
	}
	t.Cleanup(func() { app.Close() })
	opts := testOptions(nil)
	opts.Names = env.Names
	p, err := publisher.Open(ctx, path, env.NC, opts)
	if err != nil {
		t.Fatalf("opening the %s publisher: %v", env.Names.Prefix, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s publisher Run = %v, want nil", env.Names.Prefix, err)
		}
		p.Close()
	})

	d := &deployment{env: env}
	prefix := env.Names.Prefix
	tx, err := app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same chats in both deployments: only the names keep them apart.
	for i := range 10 {
		n := notify.Notification{Key: fmt.Sprintf("%s-k-%d", prefix, i), ChatID: int64(100 + i%2), Text: fmt.Sprintf("%s message %d", prefix, i)}
		if _, err := outbox.Enqueue(ctx, tx, n); err != nil {
			t.Fatal(err)
		}
		d.keys = append(d.keys, n.Key)
	}
	// Chat 666 blocked the bot: a dead letter and a recipient_dead event.
	if _, err := outbox.Enqueue(ctx, tx, notify.Notification{Key: prefix + "-dead", ChatID: 666, Text: prefix + " to a blocked chat"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTwoPrefixesShareAServer runs two deployments, the default prefix and
// staging, on one NATS server and checks that neither sees the other's
// messages, dead letters, events or records.
func TestTwoPrefixesShareAServer(t *testing.T) {
	prod := testenv.New(t, testenv.Options{})
	staging := prod.WithPrefix("staging", jetstream.StreamSettings{})
	if prod.Names.Stream != "NOTIFY" || staging.Names.Stream != "STAGING" {
		t.Fatalf("streams %s and %s, want NOTIFY and STAGING", prod.Names.Stream, staging.Names.Stream)
	}
	prod.Emu.Block(666)
	deps := []*deployment{startDeployment(t, prod), startDeployment(t, staging)}

	natstest.WaitFor(t, 30*time.Second, func() bool {
		return len(prod.Emu.Messages()) == 20 && len(prod.DeadLetters()) == 1 && len(staging.DeadLetters()) == 1 &&
			len(prod.Events("delivered")) == 10 && len(staging.Events("delivered")) == 10
	}, "both deployments delivered 10 messages and dead-lettered one")

	texts := map[string]int{}
	for _, m := range prod.Emu.Messages() {
		texts[m.Text]++
	}
	ctx := context.Background()
	for i, d := range deps {
		n, other := d.env.Names, deps[1-i].env.Names
		t.Run(n.Prefix, func(t *testing.T) {
			for j := range 10 {
				if text := fmt.Sprintf("%s message %d", n.Prefix, j); texts[text] != 1 {
					t.Errorf("%q sent %d times, want once", text, texts[text])
				}
			}

			// The work stream holds this deployment's subjects only.
			s, err := prod.JS.Stream(ctx, n.Stream)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx, natsjs.WithSubjectFilter(">"))
			if err != nil {
				t.Fatal(err)
			}
			for subj := range info.State.Subjects {
				if !strings.HasPrefix(subj, n.Prefix+".") {
					t.Errorf("%s holds subject %s, want only %s.*", n.Stream, subj, n.Prefix)
				}
			}

			// Dead letters: this deployment's one, on its dead-letter subjects.
			dead := d.env.DeadLetters()
			if len(dead) != 1 {
				t.Fatalf("%s holds %d dead letters, want 1", n.DeadStream, len(dead))
			}
			if ch, _, r, err := n.ParseDeadLetterSubject(dead[0].Subject); err != nil || ch != "telegram" || r != "666" {
				t.Errorf("dead letter on %s (%v), want %s", dead[0].Subject, err, n.DeadLetterSubject("telegram", "<reason>", "666"))
			}
			if got := dead[0].Header.Get(jetstream.HeaderKey); got != n.Prefix+"-dead" {
				t.Errorf("dead letter key %q, want %q", got, n.Prefix+"-dead")
			}
			var listed []string
			if err := operator.List(ctx, prod.JS, n, operator.Filter{}, func(dl operator.DeadLetter) error {
				listed = append(listed, dl.Key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(listed, []string{n.Prefix + "-dead"}) {
				t.Errorf("operator.List(%s) = %q, want [%s-dead]", n.Prefix, listed, n.Prefix)
			}

			// Events: this deployment's keys only.
			var delivered []string
			for _, ev := range d.env.Events("delivered") {
				delivered = append(delivered, ev.Key)
			}
			slices.Sort(delivered)
			if want := slices.Sorted(slices.Values(d.keys)); !slices.Equal(delivered, want) {
				t.Errorf("delivered events of %s = %q, want %q", n.Prefix, delivered, want)
			}
			if got := d.env.Events("recipient_dead"); len(got) != 1 {
				t.Errorf("%d recipient_dead events on %s, want 1", len(got), n.SubjectRecipientDead)
			}

			// Records: this deployment's bucket has its keys, not the other's.
			kv, err := prod.JS.KeyValue(ctx, n.BucketDelivered)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range d.keys {
				if _, err := kv.Get(ctx, delivery.RecordKey(k)); err != nil {
					t.Errorf("%s has no record of %s: %v", n.BucketDelivered, k, err)
				}
			}
			for _, k := range deps[1-i].keys {
				if _, err := kv.Get(ctx, delivery.RecordKey(k)); !errors.Is(err, natsjs.ErrKeyNotFound) {
					t.Errorf("%s has %s's record of %s (err %v), want none", n.BucketDelivered, other.Prefix, k, err)
				}
			}
			chats, err := prod.JS.KeyValue(ctx, n.BucketChats)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := chats.Get(ctx, delivery.DeadRecipientKey("telegram", "666")); err != nil {
				t.Errorf("%s does not mark chat 666 dead: %v", n.BucketChats, err)
			}
		})
	}
}
