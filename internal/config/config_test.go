package config_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
)

// settings is a command's configuration as the tests build it.
type settings struct {
	nats     string
	password string
	batch    int
	base     time.Duration
	cap      time.Duration
	rate     float64
	paid     bool
	level    string
}

// env is a fake environment.
type env map[string]string

func (e env) get(k string) string { return e[k] }

// newSet declares the test command's settings the way a main does.
func newSet(t *testing.T, e env, out *strings.Builder) (*config.Set, *settings) {
	t.Helper()
	s := &settings{}
	if out == nil {
		out = &strings.Builder{}
	}
	cs := config.New("demo", config.Options{EnvPrefix: "DEMO", Getenv: e.get, ConfigFlag: "config", Output: out, Usage: "Usage: demo [flags]\n\n"})
	config.String(cs, &s.nats, "nats", "", "NATS `URLs`")
	cs.Alias("nats", "NATS_URL")
	config.String(cs, &s.password, "nats-password", "", "NATS password")
	cs.Secret("nats-password")
	config.Int(cs, &s.batch, "batch-size", 256, "rows per batch").Check(config.Positive)
	base := config.Duration(cs, &s.base, "backoff-base", 2*time.Second, "first delay").Check(config.Positive)
	config.Duration(cs, &s.cap, "backoff-cap", 10*time.Minute, "largest delay").Check(config.AtLeastFlag(base))
	rate := config.Float(cs, &s.rate, "bot-rate", 30, "messages per second").Check(config.Positive)
	config.Bool(cs, &s.paid, "paid-broadcast", false, "paid broadcast").Check(func(on bool) error {
		if on && rate.Value() <= 30 {
			return fmt.Errorf("requires %s above 30 (got %s)", rate.Flag(), rate.Text())
		}
		return nil
	})
	config.String(cs, &s.level, "log-level", "info", "log level").Check(config.OneOf("debug", "info", "warn", "error"))
	cs.Removed("replicas", "set it in the JetStream declaration")
	return cs, s
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "demo.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, "batch-size: 100\nbackoff-base: 3s\nbackoff-cap: 1h\nnats: nats://file:4222\nlog-level: warn\n")
	cs, s := newSet(t, env{"DEMO_BACKOFF_BASE": "4s", "DEMO_BACKOFF_CAP": "2h", "NATS_URL": "nats://env:4222"}, nil)
	if err := cs.Parse([]string{"-config", file, "-backoff-cap", "3h"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, got, want string
		origin          config.Source
	}{
		{"batch-size", fmt.Sprint(s.batch), "100", config.FromFile},
		{"backoff-base", s.base.String(), "4s", config.FromEnv},
		{"backoff-cap", s.cap.String(), "3h0m0s", config.FromFlag},
		{"nats", s.nats, "nats://env:4222", config.FromEnv},
		{"bot-rate", fmt.Sprint(s.rate), "30", config.FromDefault},
	} {
		if c.got != c.want || cs.Origin(c.name).Source != c.origin {
			t.Errorf("%s = %s from %v, want %s from %v", c.name, c.got, cs.Origin(c.name), c.want, c.origin)
		}
	}
	if got := cs.Origin("batch-size").Where; !strings.HasSuffix(got, "demo.yaml:1") {
		t.Errorf("batch-size came from %q, want the file and line 1", got)
	}
	if got := cs.Origin("nats").Where; got != "NATS_URL" {
		t.Errorf("nats came from %q, want NATS_URL", got)
	}
}

func TestPrefixedVariableBeatsAlias(t *testing.T) {
	cs, s := newSet(t, env{"DEMO_NATS": "nats://prefixed:1", "NATS_URL": "nats://alias:1"}, nil)
	if err := cs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if s.nats != "nats://prefixed:1" {
		t.Fatalf("nats = %s, want DEMO_NATS's value", s.nats)
	}
}

func TestErrorsNameTheFlag(t *testing.T) {
	cases := []struct {
		name string
		env  env
		args []string
		file string
		want []string
	}{
		{"check against another flag", nil, []string{"-backoff-base", "2s", "-backoff-cap", "1s"}, "",
			[]string{"-backoff-cap 1s: must be at least -backoff-base 2s"}},
		{"contradiction names both", nil, []string{"-paid-broadcast", "-bot-rate", "30"}, "",
			[]string{"-paid-broadcast: requires -bot-rate above 30 (got 30)"}},
		{"bad value from the environment", env{"DEMO_BATCH_SIZE": "lots"}, nil, "",
			[]string{"-batch-size lots (from DEMO_BATCH_SIZE): not an integer"}},
		{"failed check from the environment", env{"DEMO_BATCH_SIZE": "-3"}, nil, "",
			[]string{"-batch-size -3 (from DEMO_BATCH_SIZE): must be positive"}},
		{"bad value in the file", nil, nil, "batch-size: 1\nbackoff-base: soon\n",
			[]string{"-backoff-base soon (from ", "demo.yaml:2): not a duration"}},
		{"unknown key in the file", nil, nil, "batch-size: 1\nturbo: true\n",
			[]string{"demo.yaml:2: unknown key \"turbo\""}},
		{"repeated key", nil, nil, "batch-size: 1\nbatch-size: 2\n", []string{"demo.yaml:2: key \"batch-size\" repeats the one on line 1"}},
		{"not YAML", nil, nil, "batch-size: [1\n", []string{"-config ", "not valid YAML"}},
		{"not a mapping", nil, nil, "- a\n- b\n", []string{"want a mapping"}},
		{"key without value", nil, nil, "nats:\n", []string{"-nats (from ", "no value"}},
		{"removed flag", nil, []string{"-replicas", "3"}, "", []string{"-replicas", "set it in the JetStream declaration"}},
		{"removed variable", env{"DEMO_REPLICAS": "3"}, nil, "", []string{"-replicas (from DEMO_REPLICAS): removed: set it in the JetStream declaration"}},
		{"removed key", nil, nil, "replicas: 3\n", []string{"-replicas (from ", "removed: set it in the JetStream declaration"}},
		{"one of", nil, []string{"-log-level", "loud"}, "", []string{"-log-level loud: want debug, info, warn or error"}},
		{"every problem at once", nil, []string{"-batch-size", "0", "-bot-rate", "0"}, "",
			[]string{"-batch-size 0: must be positive", "-bot-rate 0: must be positive"}},
		{"unexpected argument", nil, []string{"now"}, "", []string{`unexpected arguments ["now"]`}},
		{"missing file", nil, []string{"-config", "/nonexistent/demo.yaml"}, "", []string{"-config /nonexistent/demo.yaml: open"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs, _ := newSet(t, tc.env, nil)
			args := tc.args
			if tc.file != "" {
				args = append([]string{"-config", writeFile(t, tc.file)}, args...)
			}
			err := cs.Parse(args)
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse(%q) = %v, want an error matching ErrInvalid", args, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestSecretsStayHidden(t *testing.T) {
	cs, _ := newSet(t, env{"DEMO_NATS_PASSWORD": "hunter2"}, nil)
	if err := cs.Parse([]string{"-batch-size", "7"}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range cs.Explicit() {
		got[s.Name] = s.Value + " (" + s.Origin.String() + ")"
	}
	want := map[string]string{"batch-size": "7 (flag)", "nats-password": "[redacted] (env DEMO_NATS_PASSWORD)"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Explicit() = %v, want %v", got, want)
	}
	if a := cs.LogAttr().String(); strings.Contains(a, "hunter2") {
		t.Fatalf("the log attribute shows the password: %s", a)
	}
}

func TestFileWithOnlyComments(t *testing.T) {
	cs, s := newSet(t, nil, nil)
	if err := cs.Parse([]string{"-config", writeFile(t, "# batch-size: 256\n")}); err != nil {
		t.Fatal(err)
	}
	if s.batch != 256 || len(cs.Explicit()) != 0 {
		t.Fatalf("batch-size %d, explicit %v; want the defaults", s.batch, cs.Explicit())
	}
}

func TestFileNamedByTheEnvironment(t *testing.T) {
	file := writeFile(t, "batch-size: 9\n")
	cs, s := newSet(t, env{"DEMO_CONFIG": file}, nil)
	if err := cs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if s.batch != 9 {
		t.Fatalf("batch-size = %d, want 9 from the file DEMO_CONFIG names", s.batch)
	}
}

func TestFileKeys(t *testing.T) {
	cs, _ := newSet(t, nil, nil)
	cs.FileKeys("this file holds batch settings only", "batch-size")
	err := cs.Parse([]string{"-config", writeFile(t, "batch-size: 1\nnats: nats://x:1\n")})
	if err == nil || !strings.Contains(err.Error(), `key "nats" does not belong in this file: this file holds batch settings only`) {
		t.Fatalf("Parse = %v, want the nats key refused", err)
	}
}

func TestLoadFile(t *testing.T) {
	var n int
	cs := config.New("declaration", config.Options{})
	config.Int(cs, &n, "replicas", 1, "replicas").Check(config.Between(1, 5))
	if err := cs.LoadFile(writeFile(t, "replicas: 3\n")); err != nil || n != 3 {
		t.Fatalf("LoadFile: replicas %d, %v; want 3", n, err)
	}
	err := cs.LoadFile(writeFile(t, "replicas: 7\n"))
	if err == nil || !strings.Contains(err.Error(), "-replicas 7 (from ") || !strings.Contains(err.Error(), "must be between 1 and 5") {
		t.Fatalf("LoadFile = %v, want -replicas refused", err)
	}
}

func TestForeignFlagsFollowThePrecedence(t *testing.T) {
	cs, _ := newSet(t, env{"DEMO_NATS_USER": "bob"}, nil)
	user := cs.FlagSet().String("nats-user", "", "user")
	tls := cs.FlagSet().String("nats-tls-ca", "", "CA file")
	if err := cs.Parse([]string{"-config", writeFile(t, "nats-user: alice\nnats-tls-ca: /ca.pem\n")}); err != nil {
		t.Fatal(err)
	}
	if *user != "bob" || *tls != "/ca.pem" {
		t.Fatalf("nats-user %q, nats-tls-ca %q; want bob (env), /ca.pem (file)", *user, *tls)
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	cs, _ := newSet(t, nil, &out)
	if err := cs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h returned %v, want flag.ErrHelp", err)
	}
	h := out.String()
	for _, want := range []string{"Usage: demo [flags]", "-backoff-cap duration", "(default 10m)", "-nats URLs", "(also $NATS_URL)", "-log-level string", `(default "info")`, "-paid-broadcast\n"} {
		if !strings.Contains(h, want) {
			t.Errorf("-h does not show %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "replicas") {
		t.Errorf("-h lists the removed flag:\n%s", h)
	}
}
