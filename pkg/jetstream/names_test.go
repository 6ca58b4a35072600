package jetstream_test

import (
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// TestDefaultNamesAreToday pins the names of the default prefix: they are
// those of every deployment made before prefixes, which must keep working.
func TestDefaultNamesAreToday(t *testing.T) {
	for _, prefix := range []string{"", jetstream.DefaultPrefix} {
		n, err := jetstream.NewNames(prefix)
		if err != nil {
			t.Fatalf("NewNames(%q): %v", prefix, err)
		}
		if n != jetstream.DefaultNames() {
			t.Errorf("NewNames(%q) = %+v, want DefaultNames() %+v", prefix, n, jetstream.DefaultNames())
		}
		for _, c := range []struct{ name, got, want string }{
			{"Stream", n.Stream, jetstream.StreamNotify},
			{"Stream", n.Stream, "NOTIFY"},
			{"StreamSubjects", n.StreamSubjects, jetstream.StreamNotifySubjects},
			{"StreamSubjects", n.StreamSubjects, "notify.>"},
			{"DeadStream", n.DeadStream, jetstream.StreamDead},
			{"DeadStream", n.DeadStream, "NOTIFY_DEAD"},
			{"DeadSubjects", n.DeadSubjects, jetstream.StreamDeadSubjects},
			{"DeadSubjects", n.DeadSubjects, "dead.>"},
			{"DeadPrefix", n.DeadPrefix, jetstream.DeadPrefix},
			{"BucketDelivered", n.BucketDelivered, jetstream.BucketDelivered},
			{"BucketDelivered", n.BucketDelivered, "notify_delivered"},
			{"BucketChats", n.BucketChats, jetstream.BucketChats},
			{"BucketChats", n.BucketChats, "notify_chats"},
			{"BucketAttempts", n.BucketAttempts, jetstream.BucketAttempts},
			{"BucketAttempts", n.BucketAttempts, "notify_attempts"},
			{"SubjectDelivered", n.SubjectDelivered, jetstream.SubjectDelivered},
			{"SubjectDelivered", n.SubjectDelivered, "notify.events.delivered"},
			{"SubjectFallback", n.SubjectFallback, jetstream.SubjectFallback},
			{"SubjectDead", n.SubjectDead, jetstream.SubjectDead},
			{"SubjectRecipientDead", n.SubjectRecipientDead, jetstream.SubjectRecipientDead},
			{"SubjectRecipientRedirected", n.SubjectRecipientRedirected, jetstream.SubjectRecipientRedirected},
			{"SubjectRecipientRevived", n.SubjectRecipientRevived, jetstream.SubjectRecipientRevived},
			{"SubjectEvents", n.SubjectEvents, "notify.events.>"},
			{"Subject", n.Subject("email", "eab"), "notify.email.eab"},
			{"ChannelFilter", n.ChannelFilter("telegram"), jetstream.TelegramFilter},
			{"DeadLetterSubject", n.DeadLetterSubject("telegram", "blocked", "42"), "dead.notify.telegram.blocked.42"},
			{"TelegramSubject", n.TelegramSubject(-5), "notify.telegram.-5"},
			{"PinSubject", n.PinSubject("telegram"), "tgnotify.worker.telegram.pinned"},
		} {
			if c.got != c.want {
				t.Errorf("NewNames(%q).%s = %q, want %q", prefix, c.name, c.got, c.want)
			}
		}
	}
	// The declaration of the default settings keeps today's objects.
	d := jetstream.Declare(jetstream.DefaultSettings())
	if got := []string{d.Streams[0].Name, d.Streams[0].Subjects[0], d.Streams[1].Name, d.Streams[1].Subjects[0]}; strings.Join(got, " ") != "NOTIFY notify.> NOTIFY_DEAD dead.>" {
		t.Errorf("default streams = %q, want NOTIFY notify.> NOTIFY_DEAD dead.>", got)
	}
	if c := d.Consumers[0].Config; c.Durable != "telegram-worker" || c.FilterSubject != "notify.telegram.>" || d.Consumers[0].Stream != "NOTIFY" {
		t.Errorf("default telegram consumer = %s on %s filter %s, want telegram-worker on NOTIFY filter notify.telegram.>", c.Durable, d.Consumers[0].Stream, c.FilterSubject)
	}
}

func TestPrefixedNames(t *testing.T) {
	n, err := jetstream.NewNames("staging")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"Stream", n.Stream, "STAGING"},
		{"StreamSubjects", n.StreamSubjects, "staging.>"},
		{"DeadStream", n.DeadStream, "STAGING_DEAD"},
		{"DeadSubjects", n.DeadSubjects, "dead_staging.>"},
		{"BucketDelivered", n.BucketDelivered, "staging_delivered"},
		{"BucketChats", n.BucketChats, "staging_chats"},
		{"BucketAttempts", n.BucketAttempts, "staging_attempts"},
		{"SubjectDelivered", n.SubjectDelivered, "staging.events.delivered"},
		{"SubjectRecipientRevived", n.SubjectRecipientRevived, "staging.events.recipient_revived"},
		{"SubjectEvents", n.SubjectEvents, "staging.events.>"},
		{"Subject", n.Subject("sms", "p1"), "staging.sms.p1"},
		{"ChannelFilter", n.ChannelFilter("max"), "staging.max.>"},
		{"DeadLetterSubject", n.DeadLetterSubject("telegram", "blocked", "42"), "dead_staging.staging.telegram.blocked.42"},
		{"TelegramSubject", n.TelegramSubject(42), "staging.telegram.42"},
		{"PinSubject", n.PinSubject("telegram"), "tgnotify.staging.worker.telegram.pinned"},
	} {
		if c.got != c.want {
			t.Errorf("staging %s = %q, want %q", c.name, c.got, c.want)
		}
	}

	t.Run("parse", func(t *testing.T) {
		if ch, r, err := n.ParseSubject("staging.email.eab"); err != nil || ch != "email" || r != "eab" {
			t.Errorf("ParseSubject(staging.email.eab) = %q %q %v, want email eab", ch, r, err)
		}
		for _, s := range []string{"notify.email.eab", "staging.events.delivered", "dead_staging.staging.email.blocked.eab"} {
			if _, _, err := n.ParseSubject(s); err == nil {
				t.Errorf("staging ParseSubject(%q) succeeded, want an error", s)
			}
		}
		if ch, reason, r, err := n.ParseDeadLetterSubject("dead_staging.staging.telegram.blocked.42"); err != nil || ch != "telegram" || reason != "blocked" || r != "42" {
			t.Errorf("ParseDeadLetterSubject = %q %q %q %v, want telegram blocked 42", ch, reason, r, err)
		}
		for _, s := range []string{"dead.notify.telegram.blocked.42", "dead.staging.telegram.blocked.42", "dead_staging.notify.telegram.blocked.42"} {
			if _, _, _, err := n.ParseDeadLetterSubject(s); err == nil {
				t.Errorf("staging ParseDeadLetterSubject(%q) succeeded, want an error", s)
			}
		}
		for _, s := range []string{"staging.telegram.42", "dead_staging.staging.telegram.blocked.42"} {
			if id, err := n.ParseTelegramSubject(s); err != nil || id != 42 {
				t.Errorf("staging ParseTelegramSubject(%q) = %d %v, want 42", s, id, err)
			}
		}
		if _, err := n.ParseTelegramSubject("notify.telegram.42"); err == nil {
			t.Error("staging ParseTelegramSubject(notify.telegram.42) succeeded, want an error")
		}
	})

	t.Run("declaration", func(t *testing.T) {
		s := jetstream.DefaultSettings()
		s.Prefix = "staging"
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		d := jetstream.Declare(s)
		if d.Names != n {
			t.Errorf("Declare names = %+v, want %+v", d.Names, n)
		}
		var got []string
		for _, o := range d.Objects() {
			got = append(got, o.String())
		}
		want := "stream STAGING, stream STAGING_DEAD, consumer telegram-worker on STAGING, consumer max-worker on STAGING, " +
			"consumer email-worker on STAGING, consumer sms-worker on STAGING, bucket staging_delivered, bucket staging_chats, bucket staging_attempts"
		if strings.Join(got, ", ") != want {
			t.Errorf("objects = %s, want %s", strings.Join(got, ", "), want)
		}
		if f := d.Consumers[2].Config.FilterSubject; f != "staging.email.>" {
			t.Errorf("email consumer filter = %q, want staging.email.>", f)
		}
		if subj := d.Streams[1].Subjects; len(subj) != 1 || subj[0] != "dead_staging.>" {
			t.Errorf("dead stream subjects = %q, want [dead_staging.>]", subj)
		}
		if len(d.AtomicBuckets) != 1 || d.AtomicBuckets[0] != "staging_delivered" {
			t.Errorf("atomic buckets = %q, want [staging_delivered]", d.AtomicBuckets)
		}
		if w, err := d.ForWorker("sms"); err != nil || w.Names != n || len(w.AtomicBuckets) != 1 {
			t.Errorf("ForWorker(sms) = names %+v, atomic %q, %v; want the staging names and [staging_delivered]", w.Names, w.AtomicBuckets, err)
		}
	})
}

// TestPrefixesDoNotOverlap checks what lets two deployments share an
// account: no stream subject of one overlaps one of the other's, and no two
// objects share a name.
func TestPrefixesDoNotOverlap(t *testing.T) {
	prefixes := []string{"notify", "staging", "qa-eu", "notify_x", "n0"}
	seen := map[string]string{}
	var subjects [][2]string // subject, prefix
	for _, p := range prefixes {
		n, err := jetstream.NewNames(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"stream " + n.Stream, "stream " + n.DeadStream, "bucket " + n.BucketDelivered,
			"bucket " + n.BucketChats, "bucket " + n.BucketAttempts, "pin " + n.PinSubject("telegram")} {
			if other, ok := seen[name]; ok {
				t.Errorf("%s is used by prefixes %s and %s", name, other, p)
			}
			seen[name] = p
		}
		subjects = append(subjects, [2]string{n.StreamSubjects, p}, [2]string{n.DeadSubjects, p})
	}
	for i, a := range subjects {
		for _, b := range subjects[i+1:] {
			if a[1] != b[1] && overlap(a[0], b[0]) {
				t.Errorf("%s (prefix %s) overlaps %s (prefix %s)", a[0], a[1], b[0], b[1])
			}
		}
	}
}

// overlap reports whether two subject filters ending in > can match one
// subject: one's literal tokens are a prefix of the other's.
func overlap(a, b string) bool {
	ta, tb := strings.Split(strings.TrimSuffix(a, ".>"), "."), strings.Split(strings.TrimSuffix(b, ".>"), ".")
	for i := 0; i < min(len(ta), len(tb)); i++ {
		if ta[i] != tb[i] {
			return false
		}
	}
	return true
}

func TestPrefixValidation(t *testing.T) {
	for _, ok := range []string{"notify", "staging", "qa-eu", "env_2", "a", strings.Repeat("x", 32)} {
		if _, err := jetstream.NewNames(ok); err != nil {
			t.Errorf("NewNames(%q) = %v, want no error", ok, err)
		}
	}
	for _, c := range []struct{ prefix, want string }{
		{"Staging", "lower-case"},
		{"stag.ing", "one subject token"},
		{"stag*", "one subject token"},
		{">", "one subject token"},
		{"st aging", "one subject token"},
		{"2env", "starting with a letter"},
		{"_env", "starting with a letter"},
		{"$kv", "one subject token"},
		{"stäging", "one subject token"},
		{strings.Repeat("x", 33), "at most 32"},
		{"dead", "dead-letter"},
		{"dead_staging", "dead-letter"},
		{"kv_x", "key-value"},
		{"tgnotify", "failover"},
	} {
		_, err := jetstream.NewNames(c.prefix)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "-"+jetstream.FlagPrefix) {
			t.Errorf("NewNames(%q) = %v, want an error naming -%s and saying %q", c.prefix, err, jetstream.FlagPrefix, c.want)
		}
		s := jetstream.DefaultSettings()
		s.Prefix = c.prefix
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "-"+jetstream.FlagPrefix) {
			t.Errorf("Settings{Prefix: %q}.Validate() = %v, want an error naming -%s", c.prefix, err, jetstream.FlagPrefix)
		}
	}
}
