package delivery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// pauseFile keeps the 429 pauses a worker announces in a file on its own
// host (Config.PauseFile), besides notify_chats, and gives the last one to
// the worker that starts next with the same file.
//
// notify_chats is where every worker of the channel learns of a pause, but
// it is written after the 429, and while the bucket has no leader (an
// election, its leader's node cut off; on one server, a restart) the write
// waits. A worker killed meanwhile took the pause with it, and the process
// restarted in its place (systemd's Restart=always) sent inside it: CI's
// cluster chaos run on 720c00f sent 7 requests in the last 0.23 s of a 4 s
// pause so. The file is written before the dispatcher goes on, outside
// JetStream, so the restarted process knows the pause whatever NATS is
// doing, and stores it in notify_chats itself.
//
// The file is replaced by a rename, so a kill never leaves half of it. It
// is not fsynced: a killed process's writes survive in the page cache, and
// a host that lost power is back long after any pause ended.
type pauseFile struct {
	path    string
	channel string
	log     *slog.Logger
	failed  bool // the last write failed (warn once per failing run)
}

// pauseRecord is the file's content.
type pauseRecord struct {
	// Channel is the worker's channel: one file serves one worker.
	Channel string    `json:"channel"`
	Until   time.Time `json:"until"`
	Reason  string    `json:"reason"`
}

// ErrPauseFile is wrapped by every error about Config.PauseFile.
var ErrPauseFile = errors.New("pause file")

// openPauseFile checks that path can hold channel's pauses: its directory
// exists, and the file, if there is one, is channel's. It returns nil for
// an empty path (no pause file), and the pause the file holds (zero when
// it holds none, or one that cannot be read: that is only logged, as a
// file cut short by a crash of the host must not stop the worker).
func openPauseFile(path, channel string, log *slog.Logger) (*pauseFile, pause, error) {
	if path == "" {
		return nil, pause{}, nil
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return nil, pause{}, fmt.Errorf("%w %s: its directory: %w", ErrPauseFile, path, err)
	} else if !st.IsDir() {
		return nil, pause{}, fmt.Errorf("%w %s: %s is not a directory", ErrPauseFile, path, dir)
	}
	f := &pauseFile{path: path, channel: channel, log: log}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, pause{}, nil
	case err != nil:
		return nil, pause{}, fmt.Errorf("%w %s: %w", ErrPauseFile, path, err)
	}
	var r pauseRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Channel == "" {
		log.Warn("ignoring an unreadable pause file; it is replaced at the next 429", "path", path, "bytes", len(b), "err", err)
		return f, pause{}, nil
	}
	if r.Channel != channel {
		return nil, pause{}, fmt.Errorf("%w %s holds the %s worker's pauses, not %s's: give each worker a file of its own", ErrPauseFile, path, r.Channel, channel)
	}
	return f, pause{Until: r.Until, Reason: r.Reason}, nil
}

// save replaces the file's pause with p. A failure is logged (once until a
// write succeeds): the pause still holds here and goes to notify_chats.
func (f *pauseFile) save(p pause) {
	if f == nil {
		return
	}
	err := f.write(p)
	switch {
	case err != nil && !f.failed:
		f.log.Warn("cannot write the pause file; a worker restarted here will know the pause only from notify_chats", "path", f.path, "err", err)
	case err == nil && f.failed:
		f.log.Info("the pause file is written again", "path", f.path)
	}
	f.failed = err != nil
}

func (f *pauseFile) write(p pause) error {
	b, err := json.Marshal(pauseRecord{Channel: f.channel, Until: p.Until.UTC(), Reason: p.Reason})
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}
