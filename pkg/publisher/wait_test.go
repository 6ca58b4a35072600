package publisher_test

import (
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
)

func waitFor(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	natstest.WaitFor(t, timeout, cond, msg)
}
