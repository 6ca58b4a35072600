package delivery

import (
	"log/slog"
	"testing"
)

// TestSharedStateIgnoresStaleWatcherValues: the watcher lags behind the
// worker's own writes. A dead mark this worker wrote (revision 5) and then
// deleted must not come back when the watcher delivers revision 5 late;
// the watcher's copy of the deletion and a newer mark apply as usual, and a
// put older than what the watcher already applied is ignored.
func TestSharedStateIgnoresStaleWatcherValues(t *testing.T) {
	s := newSharedState(nil, "telegram", slog.New(slog.DiscardHandler), nil)
	mark := []byte(`{"reason":"blocked"}`)
	steps := []struct {
		what    string
		value   []byte
		deleted bool
		rev     uint64
		dead    bool
	}{
		{"own put", mark, false, 5, true},
		{"own delete", nil, true, 0, false},
		{"watcher replays the put", mark, false, 5, false},
		{"watcher delivers the delete", nil, true, 6, false},
		{"another worker marks it again", mark, false, 8, true},
		{"a deletion older than the newest mark", nil, true, 7, true},
	}
	for _, st := range steps {
		s.apply("dead.42", st.value, st.deleted, st.rev)
		if _, dead := s.deadRecipient("42"); dead != st.dead {
			t.Fatalf("after %s: dead %v, want %v", st.what, dead, st.dead)
		}
	}
}
