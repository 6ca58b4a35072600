package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// TestSubjectPrefix provisions a staging deployment next to the default one
// on one server and reads each one's dead letters with -subject-prefix.
func TestSubjectPrefix(t *testing.T) {
	srv := natstest.Start(t)
	env := map[string]string{"NATS_URL": srv.URL()}
	if code, stdout, stderr := run(t, env, "provision"); code != 0 {
		t.Fatalf("provision: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr := run(t, env, "provision", "-subject-prefix", "staging")
	want := "created stream STAGING\ncreated stream STAGING_DEAD\ncreated consumer telegram-worker on STAGING\n" +
		"created consumer max-worker on STAGING\ncreated consumer email-worker on STAGING\ncreated consumer sms-worker on STAGING\n" +
		"created bucket staging_delivered\ncreated bucket staging_chats\ncreated bucket staging_attempts\n"
	if code != 0 || !strings.HasPrefix(stdout, want) {
		t.Fatalf("provision -subject-prefix staging: exit %d\n%s%s\nwant the output to start with\n%s", code, stdout, stderr, want)
	}
	if code, stdout, stderr := run(t, map[string]string{"NATS_URL": srv.URL(), "TGNOTIFY_SUBJECT_PREFIX": "staging"}, "provision"); code != 0 ||
		!strings.HasPrefix(stdout, "up to date: the 9 declared objects") {
		t.Fatalf("provision with TGNOTIFY_SUBJECT_PREFIX=staging: exit %d\n%s%s, want up to date", code, stdout, stderr)
	}

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	staging, err := jetstream.NewNames("staging")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		names jetstream.Names
		key   string
	}{{jetstream.DefaultNames(), "k-notify"}, {staging, "k-staging"}} {
		m := nats.NewMsg(d.names.DeadLetterSubject("telegram", "blocked", "7"))
		m.Header.Set(jetstream.HeaderKey, d.key)
		m.Header.Set(jetstream.HeaderReason, "blocked")
		m.Data = []byte(`{}`)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatalf("publishing a dead letter to %s: %v", m.Subject, err)
		}
	}

	code, stdout, stderr = run(t, env, "dlq", "list")
	if code != 0 || !strings.Contains(stdout, "k-notify") || strings.Contains(stdout, "k-staging") {
		t.Errorf("dlq list: exit %d\n%s%s\nwant k-notify only", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, env, "dlq", "list", "-subject-prefix", "staging")
	if code != 0 || !strings.Contains(stdout, "k-staging") || strings.Contains(stdout, "k-notify") {
		t.Errorf("dlq list -subject-prefix staging: exit %d\n%s%s\nwant k-staging only", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, env, "dlq", "show", "-subject-prefix", "staging", "1")
	if code != 0 || !strings.Contains(stdout, "STAGING_DEAD #1") || !strings.Contains(stdout, "dead_staging.staging.telegram.blocked.7") {
		t.Errorf("dlq show -subject-prefix staging 1: exit %d\n%s%s\nwant STAGING_DEAD #1 on dead_staging.staging.telegram.blocked.7", code, stdout, stderr)
	}

	for _, args := range [][]string{{"provision", "-subject-prefix", "Staging"}, {"dlq", "list", "-subject-prefix", "dead"}} {
		code, _, stderr := run(t, env, args...)
		if code != 2 || !strings.Contains(stderr, "-subject-prefix") {
			t.Errorf("%q: exit %d\n%s\nwant 2 and an error naming -subject-prefix", args, code, stderr)
		}
	}
}
