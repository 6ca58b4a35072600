package jetstream_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// writeContext writes a context file as `nats context save` does, under
// root/nats/context/<name>.json, and returns its path.
func writeContext(t *testing.T, root, name string, fields map[string]any) string {
	t.Helper()
	dir := filepath.Join(root, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestContextPath(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/nats/context/ops.json"},
		{map[string]string{"HOME": "/h"}, "/h/.config/nats/context/ops.json"},
	} {
		got, err := jetstream.ContextPath("ops", envOf(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("ContextPath(ops) with %v = %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "../etc", "a/b"} {
		if _, err := jetstream.ContextPath(bad, envOf(map[string]string{"HOME": "/h"})); err == nil {
			t.Errorf("ContextPath(%q): got nil error, want one", bad)
		}
	}
}

func TestLoadContext(t *testing.T) {
	root := t.TempDir()
	home := t.TempDir()
	env := map[string]string{"XDG_CONFIG_HOME": root, "HOME": home, "SECRETS": "/run/secrets", "PW_VAR": "env-pw"}
	getenv := envOf(env)

	t.Run("by name, paths expanded", func(t *testing.T) {
		writeContext(t, root, "ops", map[string]any{"url": "nats://a:4222", "creds": "$SECRETS/ops.creds", "ca": "~/ca.pem", "inbox_prefix": "_INBOX_ops"})
		c, err := jetstream.LoadContext("ops", getenv)
		if err != nil {
			t.Fatal(err)
		}
		if c.URL != "nats://a:4222" || c.Creds != "/run/secrets/ops.creds" || c.CA != filepath.Join(home, "ca.pem") || c.InboxPrefix != "_INBOX_ops" {
			t.Errorf("got %+v", *c)
		}
		if want := filepath.Join(root, "nats", "context", "ops.json"); c.Path != want {
			t.Errorf("Path = %q, want %q", c.Path, want)
		}
	})
	t.Run("a .json file", func(t *testing.T) {
		path := writeContext(t, t.TempDir(), "file", map[string]any{"url": "nats://f:1", "nkey": "file:///etc/x.nk"})
		c, err := jetstream.LoadContext(path, getenv)
		if err != nil {
			t.Fatal(err)
		}
		if c.URL != "nats://f:1" || c.NKey != "/etc/x.nk" || c.Name != "file" {
			t.Errorf("got %+v", *c)
		}
	})
	t.Run("password from env://, user alone is a token", func(t *testing.T) {
		writeContext(t, root, "pw", map[string]any{"user": "u", "password": "env://PW_VAR"})
		c, err := jetstream.LoadContext("pw", getenv)
		if err != nil || c.User != "u" || c.Password != "env-pw" {
			t.Errorf("got %+v, %v", c, err)
		}
		writeContext(t, root, "tok", map[string]any{"user": "s3cret-token"})
		c, err = jetstream.LoadContext("tok", getenv)
		if err != nil || c.User != "" || c.Token != "s3cret-token" {
			t.Errorf("got %+v, %v", c, err)
		}
		if strings.Contains(c.String(), "s3cret") {
			t.Errorf("String() shows the token: %s", c)
		}
	})
	for _, tc := range []struct {
		name   string
		fields map[string]any
		field  string
		hidden string
	}{
		{"embedded creds", map[string]any{"creds": "data:;base64,U0VDUkVULVNFRUQ="}, "creds", "U0VDUkVULVNFRUQ"},
		{"1Password", map[string]any{"nkey": "op://vault/item/seed"}, "nkey", ""},
		{"JetStream domain", map[string]any{"jetstream_domain": "hub"}, "jetstream_domain", ""},
		{"two methods", map[string]any{"creds": "/a.creds", "nkey": "/b.nk"}, "", ""},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			writeContext(t, root, "bad", tc.fields)
			_, err := jetstream.LoadContext("bad", getenv)
			var ce *jetstream.ContextError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("got %v, want a *ContextError naming field %q", err, tc.field)
			}
			if tc.hidden != "" && strings.Contains(err.Error(), tc.hidden) {
				t.Errorf("the error shows the embedded secret: %v", err)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		_, err := jetstream.LoadContext("nope", getenv)
		if err == nil || !strings.Contains(err.Error(), "nats context save nope") {
			t.Errorf("got %v, want an error saying how to create it", err)
		}
	})
}

func TestApplyContext(t *testing.T) {
	c := &jetstream.CLIContext{Name: "ops", Path: "/p/ops.json", URL: "nats://ctx:1", NKey: "/ctx.nk", CA: "/ctx-ca.pem", Cert: "/c.pem", Key: "/k.pem"}
	t.Run("fills what is unset", func(t *testing.T) {
		var o jetstream.Options
		o.ApplyContext(c, func(string) bool { return false })
		if o.URLs != "nats://ctx:1" || o.NKeyFile != "/ctx.nk" || o.TLSCA != "/ctx-ca.pem" || o.TLSCert != "/c.pem" || o.TLSKey != "/k.pem" {
			t.Errorf("got %+v", o)
		}
		if o.Origins.URL != "context ops (/p/ops.json)" || o.Origins.Auth != o.Origins.URL {
			t.Errorf("origins %+v", o.Origins)
		}
	})
	t.Run("explicit settings win, authentication as a whole", func(t *testing.T) {
		o := jetstream.Options{URLs: "nats://flag:1", CredsFile: "/flag.creds"}
		o.ApplyContext(c, func(f string) bool { return f == jetstream.FlagURL || f == jetstream.FlagCreds })
		if o.URLs != "nats://flag:1" || o.CredsFile != "/flag.creds" || o.NKeyFile != "" {
			t.Errorf("got %+v", o)
		}
		if o.Origins.URL != "" || o.Origins.Auth != "" {
			t.Errorf("origins %+v, want none from the context", o.Origins)
		}
	})
}
