package reliability_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinariesRefuseBadSettings starts each binary with a bad flag, a bad
// environment variable or a bad configuration file: each must exit with
// status 2 at once, before doing anything, with a message that names the
// setting. (The daemons' cmd packages test their parsers in-process; this
// checks what an operator actually sees.)
func TestBinariesRefuseBadSettings(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := []string{"TELEGRAM_BOT_TOKEN=1:not-used"}
	tests := []struct {
		binary string
		name   string
		env    []string
		args   []string
		want   string
	}{
		{"publisher", "no database", nil, nil, "-db"},
		{"publisher", "negative batch", nil, []string{"-db", "x.db", "-batch-size", "-1"}, "-batch-size"},
		{"publisher", "not a duration", nil, []string{"-db", "x.db", "-ack-timeout", "soon"}, "ack-timeout"},
		{"publisher", "unknown key in the file", nil, []string{"-config", file("p1.yaml", "db: x.db\nturbo: true\n")}, "turbo"},
		{"publisher", "bad value in the file", nil, []string{"-config", file("p2.yaml", "db: x.db\nbatch-size: lots\n")}, "batch-size"},
		{"publisher", "not YAML", nil, []string{"-config", file("p3.yaml", "db: [x.db\n")}, "YAML"},
		{"publisher", "missing file", nil, []string{"-config", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"publisher", "bad environment", []string{"PUBLISHER_MAX_IN_FLIGHT=many"}, []string{"-db", "x.db"}, "max-in-flight"},
		{"publisher", "bad NATS URL", nil, []string{"-db", "x.db", "-nats", "http://127.0.0.1:4222"}, "-nats"},
		{"publisher", "password without user", nil, []string{"-db", "x.db", "-nats-password", "pw"}, "-nats-password"},
		{"publisher", "missing CA file", nil, []string{"-db", "x.db", "-nats-tls-ca", filepath.Join(dir, "ca.pem")}, "-nats-tls-ca"},
		{"publisher", "taken HTTP address", nil, []string{"-db", "x.db", "-http", "256.1.1.1:1"}, "-http"},

		{"telegram-worker", "no token", nil, nil, "TELEGRAM_BOT_TOKEN"},
		{"telegram-worker", "missing token file", nil, []string{"-token-file", filepath.Join(dir, "token")}, "-token-file"},
		{"telegram-worker", "not a duration", token, []string{"-ack-wait", "soon"}, "ack-wait"},
		{"telegram-worker", "ack wait too short", token, []string{"-ack-wait", "10ms"}, "-ack-wait"},
		{"telegram-worker", "negative rate", token, []string{"-bot-rate", "-1"}, "-bot-rate"},
		{"telegram-worker", "cap below base", token, []string{"-backoff-base", "1m", "-backoff-cap", "1s"}, "-backoff-cap"},
		{"telegram-worker", "unknown key in the file", token, []string{"-config", file("w1.yaml", "chat-rate: 1\nturbo: true\n")}, "turbo"},
		{"telegram-worker", "bad value in the file", token, []string{"-config", file("w2.yaml", "max-in-flight: lots\n")}, "max-in-flight"},
		{"telegram-worker", "bad environment", append([]string{"TELEGRAM_WORKER_MAX_ATTEMPTS=-3"}, token...), nil, "-max-attempts"},
		{"telegram-worker", "bad API URL", token, []string{"-telegram-api", "ftp://example"}, "bot API"},
		{"telegram-worker", "two NATS auth methods", token, []string{"-nats-user", "u", "-nats-token", "t"}, "-nats-token"},

		{"shop", "zero read timeout", nil, []string{"-read-timeout", "0s"}, "-read-timeout"},
		{"shop", "bad log level", nil, []string{"-log-level", "loud"}, "-log-level"},
		{"shop", "unknown flag", nil, []string{"-turbo"}, "-turbo"},
		{"shop", "bad environment", []string{"SHOP_WRITE_TIMEOUT=later"}, nil, "write-timeout"},

		{"botapi-emulator", "negative rate", nil, []string{"-bot-rate", "-5"}, "-bot-rate"},
		{"botapi-emulator", "unknown fault", nil, []string{"-fault", "nonsense"}, "-fault"},
		{"botapi-emulator", "bad environment", []string{"EMULATOR_CHAT_RATE=fast"}, nil, "EMULATOR_CHAT_RATE"},
		{"botapi-emulator", "bad chat list", nil, []string{"-blocked", "1,two"}, "-blocked"},
	}
	for _, tt := range tests {
		t.Run(tt.binary+"/"+tt.name, func(t *testing.T) {
			args := tt.args
			if tt.binary == "shop" && !contains(args, "-db") {
				// Refusals come before the database is opened; point it
				// into the test's directory all the same.
				args = append([]string{"-db", filepath.Join(t.TempDir(), "shop.db")}, args...)
			}
			r := runBinary(t, bin(t, tt.binary), tt.env, args...)
			if r.code != 2 {
				t.Fatalf("exit status %d, want 2; output:\n%s", r.code, r.output)
			}
			if !strings.Contains(r.output, tt.want) {
				t.Fatalf("the message does not name %q:\n%s", tt.want, r.output)
			}
			if strings.Contains(r.output, "goroutine ") || strings.Contains(r.output, "panic") {
				t.Fatalf("the binary panicked:\n%s", r.output)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
