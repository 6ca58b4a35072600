package telegram_test

import (
	"testing"

	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
)

func TestUserAgentNamesTheProcess(t *testing.T) {
	t.Parallel()
	ua := telegram.UserAgent(4711)
	if ua != "tgnotify-telegram-worker (pid 4711)" {
		t.Errorf("UserAgent(4711) = %q", ua)
	}
	if pid, ok := telegram.PidOfUserAgent(ua); !ok || pid != 4711 {
		t.Errorf("PidOfUserAgent(%q) = %d, %v; want 4711, true", ua, pid, ok)
	}
	for _, bad := range []string{"", "Go-http-client/1.1", "tgnotify-telegram-worker (pid )", "tgnotify-telegram-worker (pid 12", "tgnotify-telegram-worker (pid -3)", "tgnotify-telegram-worker (pid x1)"} {
		if pid, ok := telegram.PidOfUserAgent(bad); ok {
			t.Errorf("PidOfUserAgent(%q) = %d, true; want false", bad, pid)
		}
	}
}
