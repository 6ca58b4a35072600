package natstest

import (
	"testing"
	"time"
)

// pollInterval is how often WaitFor evaluates its condition.
const pollInterval = 5 * time.Millisecond

// WaitFor polls cond until it returns true, and fails the test with msg if
// that does not happen within timeout. It is the way tests wait for
// asynchronous effects: never a bare sleep.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	if !Waited(timeout, cond) {
		t.Fatalf("timed out after %v waiting for: %s", timeout, msg)
	}
}

// Waited polls cond until it returns true or timeout passes, and reports
// whether it did: for a test that describes the state it found when the
// wait fails.
func Waited(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
