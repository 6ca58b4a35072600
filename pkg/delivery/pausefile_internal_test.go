package delivery

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A pause saved is what the next worker with the same file reads; a file
// that was never written holds none, and no path means no file.
func TestPauseFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "telegram.pause")
	f, p, err := openPauseFile(path, "telegram", slog.New(slog.DiscardHandler))
	if err != nil || f == nil || !p.Until.IsZero() {
		t.Fatalf("a new file: %v, %+v, %v; want a file holding no pause", f, p, err)
	}
	until := time.Date(2026, 12, 3, 8, 29, 13, 574_000_000, time.UTC)
	f.save(pause{Until: until, Reason: "429: retry after 4"})
	_, p, err = openPauseFile(path, "telegram", slog.New(slog.DiscardHandler))
	if err != nil || !p.Until.Equal(until) || p.Reason != "429: retry after 4" {
		t.Fatalf("read back %+v, %v; want the pause until %v", p, err, until)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file is left: %v", err)
	}
	if f, _, err := openPauseFile("", "telegram", nil); f != nil || err != nil {
		t.Errorf("no path: %v, %v; want no file and no error", f, err)
	}
}

// Bad settings get an error that names the file and what is wrong with it;
// a file the worker cannot parse (cut short by a crash of the host) is
// ignored with a warning, not a reason to stay down.
func TestPauseFileErrors(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "shared.pause")
	if err := os.WriteFile(other, []byte(`{"channel":"email","until":"2026-12-03T08:29:13Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		{filepath.Join(dir, "missing", "telegram.pause"), "its directory"},
		{filepath.Join(notDir, "telegram.pause"), "is not a directory"},
		{other, "holds the email worker's pauses, not telegram's"},
	} {
		_, _, err := openPauseFile(tc.path, "telegram", slog.New(slog.DiscardHandler))
		if !errors.Is(err, ErrPauseFile) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("openPauseFile(%s) = %v, want ErrPauseFile naming it and %q", tc.path, err, tc.want)
		}
	}
	for _, content := range []string{"", `{"channel":"tele`, `{}`} {
		path := filepath.Join(dir, "cut.pause")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs strings.Builder
		f, p, err := openPauseFile(path, "telegram", slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil || f == nil || !p.Until.IsZero() || !strings.Contains(logs.String(), "ignoring an unreadable pause file") {
			t.Errorf("a file holding %q: %v, %+v, %v, logs %q; want it ignored with a warning", content, f, p, err, logs.String())
		}
	}
}

// A pause file that cannot be written is reported once, and again when it
// can be; the pause still holds in the worker.
func TestPauseFileWriteFailureIsReportedOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "telegram.pause")
	var logs strings.Builder
	f, _, err := openPauseFile(path, "telegram", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path+".tmp", 0o700); err != nil { // the write fails
		t.Fatal(err)
	}
	f.save(pause{Until: time.Now().Add(time.Second)})
	f.save(pause{Until: time.Now().Add(2 * time.Second)})
	if n := strings.Count(logs.String(), "cannot write the pause file"); n != 1 {
		t.Errorf("%d warnings for two failed writes, want 1: %s", n, logs.String())
	}
	if err := os.Remove(path + ".tmp"); err != nil {
		t.Fatal(err)
	}
	f.save(pause{Until: time.Now().Add(3 * time.Second)})
	if !strings.Contains(logs.String(), "the pause file is written again") {
		t.Errorf("no word that the file is written again: %s", logs.String())
	}
}
