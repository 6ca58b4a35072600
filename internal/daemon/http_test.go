package daemon_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9101": true, "127.1.2.3:1": true, "[::1]:9101": true, "localhost:9101": true,
		":9101": false, "0.0.0.0:9101": false, "[::]:9101": false, "10.0.0.5:9101": false, "metrics.example:9101": false, "nonsense": false,
	} {
		if got := daemon.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestPprofFlag(t *testing.T) {
	parse := func(args ...string) (daemon.HTTPFlags, error) {
		var h daemon.HTTPFlags
		cs := config.New("test", config.Options{Output: io.Discard, Getenv: func(string) string { return "" }})
		h.Register(cs, "127.0.0.1:9101", "address")
		return h, cs.Parse(args)
	}
	if h, err := parse("-pprof"); err != nil || !h.Pprof || len(h.Options()) != 1 {
		t.Errorf("-pprof on the default loopback address: %+v, %v", h, err)
	}
	_, err := parse("-pprof", "-http", "0.0.0.0:9101")
	if err == nil || !strings.Contains(err.Error(), "-pprof") || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("-pprof -http 0.0.0.0:9101: got %v, want an error naming -pprof and loopback", err)
	}
	if h, err := parse("-http", "0.0.0.0:9101"); err != nil || h.Pprof {
		t.Errorf("-http 0.0.0.0:9101 without -pprof: %+v, %v", h, err)
	}
}

func TestEndpointsPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		reg := daemon.NewRegistry(daemon.BuildInfo("test-daemon", "v9.9.9"))
		srv := httptest.NewServer(daemon.Endpoints{Registry: reg, Ready: func() error { return nil }, Pprof: on}.Handler())
		resp, err := http.Get(srv.URL + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 404, true: 200}[on]; resp.StatusCode != want {
			t.Errorf("Pprof=%v: /debug/pprof/ answered %d, want %d", on, resp.StatusCode, want)
		}
		srv.Close()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == "tgnotify_build_info" && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge().GetValue() == 1 {
				labels := map[string]string{}
				for _, l := range mf.GetMetric()[0].GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				found = labels["daemon"] == "test-daemon" && labels["version"] == "v9.9.9" && strings.HasPrefix(labels["goversion"], "go")
			}
		}
		if !found {
			t.Errorf("no tgnotify_build_info{daemon=\"test-daemon\",version=\"v9.9.9\",goversion=...} 1 in %v", mfs)
		}
	}
}

func TestVersion(t *testing.T) {
	if got := daemon.Version("v1.2.3"); got != "v1.2.3" {
		t.Errorf("Version(v1.2.3) = %q", got)
	}
	if got := daemon.Version("dev"); got == "" {
		t.Error("Version(dev) is empty")
	}
}
