package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFmtNum(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {30, "30"}, {29.43, "29.4"}, {1.234, "1.23"}, {0.3333, "0.333"},
		{407.4, "407"}, {123088.4, "123,088"}, {-12345, "-12,345"}, {1e6, "1,000,000"},
	} {
		if got := fmtNum(tc.in); got != tc.want {
			t.Errorf("fmtNum(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWriteNATSConfig(t *testing.T) {
	dir := t.TempDir()
	prod := filepath.Join("..", "..", "configs", "nats-server.conf")
	for _, tc := range []struct {
		sync     serverSync
		want     []string
		wantNone []string
	}{
		{syncAlways, []string{"listen: 127.0.0.1:4001", "http: 127.0.0.1:4002", `store_dir: "/data/js"`, "sync_interval: always"}, []string{"4222", "8222", "/var/lib/nats"}},
		{syncDefault, []string{"listen: 127.0.0.1:4001", "# sync_interval: server default"}, []string{"\n  sync_interval: always"}},
	} {
		t.Run(tc.sync.String(), func(t *testing.T) {
			out := filepath.Join(dir, "nats.conf")
			if err := writeNATSConfig(prod, out, 4001, 4002, "/data/js", tc.sync); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			conf := string(b)
			for _, w := range tc.want {
				if !strings.Contains(conf, w) {
					t.Errorf("config lacks %q", w)
				}
			}
			for _, w := range tc.wantNone {
				if strings.Contains(conf, w) {
					t.Errorf("config still has %q", w)
				}
			}
		})
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("port: 4222\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeNATSConfig(bad, filepath.Join(dir, "x.conf"), 1, 2, "/s", syncAlways); err == nil || !strings.Contains(err.Error(), "no line matches") {
		t.Errorf("a config without listen/http/store_dir: err = %v, want one naming the missing line", err)
	}
}
