package jetstream_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// nkeyUser creates a user nkey, writes its seed to a file and returns the
// file and the public key.
func nkeyUser(t *testing.T) (seedFile, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	public, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return seedFile, public
}

// TestConnectWithNKeyAndPermissions connects with an nkey seed file as a
// user that may only use the JetStream API's INFO requests and its inbox:
// the refused publish and stream deletion come back as PermissionErrors
// naming the subject, and the log says which subject was refused, never the
// seed.
func TestConnectWithNKeyAndPermissions(t *testing.T) {
	seedFile, public := nkeyUser(t)
	adminSeed, adminPublic := nkeyUser(t)
	srv := natstest.Start(t, natstest.WithOptions(func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{
			{Nkey: public, Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.*"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_limited.>"}},
			}},
			{Nkey: adminPublic},
		}
	}))
	ctx := context.Background()
	admin, err := jetstream.Connect(ctx, jetstream.Options{URLs: srv.URL(), NKeyFile: adminSeed}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adminJS, err := natsjs.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminJS.CreateStream(ctx, natsjs.StreamConfig{Name: "NOTIFY", Subjects: []string{"notify.>"}}); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	nc, err := jetstream.Connect(ctx, jetstream.Options{URLs: srv.URL(), NKeyFile: seedFile, InboxPrefix: "_INBOX_limited"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	natstest.WaitFor(t, 5*time.Second, nc.IsConnected, "connected with the nkey")
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "NOTIFY"); err != nil {
		t.Fatalf("stream info, which the user may read: %v", err)
	}
	for _, tc := range []struct {
		name, subject string
		op            func(context.Context) error
	}{
		{"publish", "notify.telegram.1", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "notify.telegram.1", []byte("x"))
			return err
		}},
		{"delete a stream", "$JS.API.STREAM.DELETE.NOTIFY", func(ctx context.Context) error { return js.DeleteStream(ctx, "NOTIFY") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			octx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err := jetstream.Denied(nc, tc.op(octx))
			var pe *jetstream.PermissionError
			if !errors.As(err, &pe) || pe.Subject != tc.subject || pe.Op != "publish" {
				t.Fatalf("got %v, want a PermissionError for publish to %s", err, tc.subject)
			}
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+tc.subject+`"`) {
				t.Errorf("error %q does not match nats.ErrPermissionViolation or name the subject", err)
			}
			natstest.WaitFor(t, 5*time.Second, func() bool {
				return strings.Contains(logs.String(), "subject="+tc.subject) || strings.Contains(logs.String(), `subject="`+tc.subject+`"`)
			}, "the refusal logged with its subject")
		})
	}
	if err := jetstream.Denied(nc, errors.New("unrelated")); err.Error() != "unrelated" {
		t.Errorf("Denied changed an unrelated error: %v", err)
	}
	seed, _ := os.ReadFile(seedFile)
	if strings.Contains(logs.String(), strings.TrimSpace(string(seed))) {
		t.Fatal("the log shows the nkey seed")
	}
	if !strings.Contains(logs.String(), "auth=\"nkey seed file "+seedFile+"\"") {
		t.Errorf("the settings line does not say the nkey seed file is used:\n%s", logs.String())
	}
}
