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
	prod := filepath.Join("..", "..", "configs", "nats-server.conf")
	store := filepath.Join(dir, "store")
	for _, tc := range []struct {
		name     string
		cfg      system.NATSConfig
		want     []string
		wantNone []string
	}{
		{"production sync", system.NATSConfig{ClientPort: 4001, MonitorPort: 4002, StoreDir: store},
			[]string{"listen: 127.0.0.1:4001", "http: 127.0.0.1:4002", `store_dir: "` + store + `"`, "\n  sync_interval: always"},
			[]string{":4222", ":8222", "/var/lib/nats"}},
		{"server default sync", system.NATSConfig{ClientPort: 4001, MonitorPort: 4002, StoreDir: store, ServerDefaultSync: true},
			[]string{"listen: 127.0.0.1:4001", "# sync_interval: server default"},
			[]string{"\n  sync_interval: always"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "nats.conf")
			if err := system.WriteNATSConfig(prod, out, tc.cfg); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			conf := string(b)
			for _, w := range tc.want {
				if !strings.Contains(conf, w) {
					t.Errorf("generated configuration lacks %q", w)
				}
			}
			for _, w := range tc.wantNone {
				if strings.Contains(conf, w) {
					t.Errorf("generated configuration still has %q", w)
				}
			}
		})
	}
	out := filepath.Join(dir, "x.conf")
	if err := system.WriteNATSConfig(out+".missing", out, system.NATSConfig{}); err == nil {
		t.Error("a missing source file: got nil error")
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("port: 4222\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := system.WriteNATSConfig(bad, out, system.NATSConfig{}); err == nil || !strings.Contains(err.Error(), "no line matches") {
		t.Errorf("a file without listen/http/store_dir: got %v, want an error naming the missing line", err)
	}
}
