package daemon_test

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// parseNATS parses args and env as a daemon with prefix TEST would.
func parseNATS(t *testing.T, env map[string]string, args ...string) (jetstream.Options, error) {
	t.Helper()
	var o jetstream.Options
	cs := config.New("test", config.Options{EnvPrefix: "TEST", Getenv: func(k string) string { return env[k] }, Output: io.Discard})
	daemon.NATSFlags(cs, &o)
	err := cs.Parse(args)
	return o, err
}

// touch creates an empty file and returns its path.
func touch(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNATSFlagsSources(t *testing.T) {
	creds, nk, otherCreds := touch(t, "a.creds"), touch(t, "b.nk"), touch(t, "c.creds")
	xdg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(xdg, "nats", "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"url": "nats://ctx:4222", "nkey": nk})
	if err := os.WriteFile(filepath.Join(xdg, "nats", "context", "ops.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctxOrigin := "context ops (" + filepath.Join(xdg, "nats", "context", "ops.json") + ")"

	for _, tc := range []struct {
		name        string
		env         map[string]string
		args        []string
		url, auth   string
		creds, nkey string
		user        string
		urlFrom     string
		authFrom    string
	}{
		{name: "NATS_CREDS alone", env: map[string]string{"NATS_URL": "nats://env:1", "NATS_CREDS": creds},
			url: "nats://env:1", creds: creds, urlFrom: "env NATS_URL", authFrom: "env NATS_CREDS"},
		{name: "the daemon's own variable beats NATS_CREDS", env: map[string]string{"NATS_CREDS": otherCreds, "TEST_NATS_CREDS": creds},
			creds: creds, urlFrom: "default", authFrom: "env TEST_NATS_CREDS"},
		{name: "an own method makes the standard ones ignored", env: map[string]string{"NATS_USER": "bob", "NATS_PASSWORD": "pw"}, args: []string{"-nats-nkey", nk},
			nkey: nk, urlFrom: "default", authFrom: "flag -nats-nkey (ignoring NATS_USER, NATS_PASSWORD)"},
		{name: "a context by NATS_CONTEXT", env: map[string]string{"NATS_CONTEXT": "ops", "XDG_CONFIG_HOME": xdg},
			url: "nats://ctx:4222", nkey: nk, urlFrom: ctxOrigin, authFrom: ctxOrigin},
		{name: "a flag beats the context's URL; its auth stays", env: map[string]string{"XDG_CONFIG_HOME": xdg}, args: []string{"-nats-context", "ops", "-nats", "nats://flag:1"},
			url: "nats://flag:1", nkey: nk, urlFrom: "flag -nats", authFrom: ctxOrigin},
		{name: "NATS_CREDS beats the context's auth", env: map[string]string{"XDG_CONFIG_HOME": xdg, "NATS_CREDS": creds}, args: []string{"-nats-context", "ops"},
			url: "nats://ctx:4222", creds: creds, urlFrom: ctxOrigin, authFrom: "env NATS_CREDS"},
		{name: "user and the password from the daemon's variable", env: map[string]string{"TEST_NATS_PASSWORD": "pw"}, args: []string{"-nats-user", "alice"},
			user: "alice", urlFrom: "default", authFrom: "flag -nats-user, password from env TEST_NATS_PASSWORD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseNATS(t, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if o.URLs != tc.url || o.CredsFile != tc.creds || o.NKeyFile != tc.nkey || o.User != tc.user {
				t.Errorf("got URLs %q creds %q nkey %q user %q, want %q %q %q %q", o.URLs, o.CredsFile, o.NKeyFile, o.User, tc.url, tc.creds, tc.nkey, tc.user)
			}
			if o.Origins.URL != tc.urlFrom || o.Origins.Auth != tc.authFrom {
				t.Errorf("got origins %+v, want URL %q, auth %q", o.Origins, tc.urlFrom, tc.authFrom)
			}
		})
	}

	t.Run("two standard methods are an error naming both", func(t *testing.T) {
		_, err := parseNATS(t, map[string]string{"NATS_CREDS": creds, "NATS_TOKEN": "s3cret-tok"})
		if err == nil || !strings.Contains(err.Error(), "env NATS_CREDS") || !strings.Contains(err.Error(), "env NATS_TOKEN") {
			t.Fatalf("got %v, want an error naming both variables", err)
		}
		if strings.Contains(err.Error(), "s3cret-tok") {
			t.Errorf("the error shows the token: %v", err)
		}
	})
	t.Run("a missing context names the flag and how to create it", func(t *testing.T) {
		_, err := parseNATS(t, map[string]string{"XDG_CONFIG_HOME": xdg, "NATS_CONTEXT": "nope"})
		if err == nil || !strings.Contains(err.Error(), "-nats-context (from NATS_CONTEXT)") || !strings.Contains(err.Error(), "nats context save nope") {
			t.Fatalf("got %v", err)
		}
	})
}
