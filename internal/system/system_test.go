package system_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/system"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}} {
		if got := system.Percentile(ds, tt.p); got != tt.want {
			t.Errorf("p%v: got %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestWriteNATSConfig(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "nats.conf")
	if err := system.WriteNATSConfig("../../configs/nats-server.conf", out, 14222, 18222, filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, want := range []string{"listen: 127.0.0.1:14222", "http: 127.0.0.1:18222", `store_dir: "` + filepath.Join(dir, "store") + `"`, "sync_interval: always"} {
		if !strings.Contains(conf, want) {
			t.Errorf("generated configuration lacks %q", want)
		}
	}
	if strings.Contains(conf, "/var/lib/nats") {
		t.Error("generated configuration still points at /var/lib/nats")
	}
	if err := system.WriteNATSConfig(out+".missing", out, 1, 2, dir); err == nil {
		t.Error("a missing source file: got nil error")
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("port: 4222\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := system.WriteNATSConfig(bad, out, 1, 2, dir); err == nil || !strings.Contains(err.Error(), "no line matches") {
		t.Errorf("a file without listen/http/store_dir: got %v, want an error naming the missing line", err)
	}
}
