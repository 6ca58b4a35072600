package useragent_test

import (
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/internal/useragent"
)

func TestOfAndPid(t *testing.T) {
	ua := useragent.Of("max-worker", 4711)
	if ua != "tgnotify-max-worker (pid 4711)" {
		t.Fatalf("Of = %q", ua)
	}
	if pid, ok := useragent.Pid(ua, "max-worker"); !ok || pid != 4711 {
		t.Errorf("Pid(%q, max-worker) = %d, %v; want 4711, true", ua, pid, ok)
	}
	for _, tc := range []struct{ ua, daemon string }{
		{ua, "sms-worker"}, // another daemon's
		{"Go-http-client/1.1", "max-worker"},
		{"tgnotify-max-worker (pid 0)", "max-worker"},
		{"tgnotify-max-worker (pid -3)", "max-worker"},
		{"tgnotify-max-worker (pid 12", "max-worker"},
		{"tgnotify-max-worker (pid x)", "max-worker"},
		{"", "max-worker"},
	} {
		if pid, ok := useragent.Pid(tc.ua, tc.daemon); ok {
			t.Errorf("Pid(%q, %s) = %d, true; want false", tc.ua, tc.daemon, pid)
		}
	}
}

func TestCheck(t *testing.T) {
	if err := useragent.Check(useragent.Of("sms-worker", 1)); err != nil {
		t.Errorf("Check of a worker's User-Agent: %v", err)
	}
	for ua, want := range map[string]string{
		"":          "empty",
		"a\nb":      "byte 1",
		"caf\u00e9": "byte 3",
	} {
		if err := useragent.Check(ua); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want an error with %q", ua, err, want)
		}
	}
}
