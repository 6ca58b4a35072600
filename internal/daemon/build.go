package daemon

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version returns the daemon's version: stamped, as the build sets it with
// -ldflags "-X main.version=...", unless it is empty or "dev"; else what the
// Go toolchain recorded in the binary (the module version, or the VCS
// revision of a build from a checkout, "+dirty" when it had changes); else
// "dev".
func Version(stamped string) string {
	if stamped != "" && stamped != "dev" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev + dirty
}

// BuildInfo returns the gauge tgnotify_build_info{version,goversion,daemon}
// = 1, which tells a dashboard which build of which daemon it is looking at.
// Register it with [NewRegistry].
func BuildInfo(daemon, version string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tgnotify_build_info",
		Help: "Always 1: the daemon's name, its version and the Go version it was built with, as labels.",
	}, []string{"version", "goversion", "daemon"})
	g.WithLabelValues(version, runtime.Version(), daemon).Set(1)
	return g
}
