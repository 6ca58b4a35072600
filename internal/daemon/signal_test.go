//go:build unix

package daemon_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/run"

	"github.com/tgnotify/tgnotify/internal/daemon"
)

// TestSignalHandlerHoldsAnEarlySignal: a SIGTERM that arrives after the
// handler is made but before the group runs (the daemon is still starting,
// its endpoints may already answer) must end the group as a signal, not
// kill the process: with run.SignalHandler this test binary would die.
func TestSignalHandlerHoldsAnEarlySignal(t *testing.T) {
	execute, interrupt := daemon.SignalHandler(context.Background())
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var g run.Group
	g.Add(execute, interrupt)
	block := make(chan struct{})
	g.Add(func() error { <-block; return nil }, func(error) { close(block) })
	done := make(chan error, 1)
	go func() { done <- g.Run() }()
	select {
	case err := <-done:
		if !errors.Is(err, run.ErrSignal) || !daemon.SignalStopped(err) {
			t.Fatalf("the group ended with %v, want the signal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the early SIGTERM did not end the group")
	}
}

func TestSignalHandlerStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	execute, _ := daemon.SignalHandler(ctx)
	cancel()
	if err := execute(); !errors.Is(err, context.Canceled) {
		t.Fatalf("execute() = %v, want context.Canceled", err)
	}
}
