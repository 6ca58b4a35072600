package daemon

import (
	"errors"
	"net"

	"github.com/tgnotify/tgnotify/internal/config"
)

// HTTPFlags are a daemon's HTTP endpoint settings: -http, the address of
// /metrics, /healthz, /readyz (and the worker's /stats), and -pprof, which
// mounts net/http/pprof's profiles there too.
type HTTPFlags struct {
	// Addr is the listen address (-http).
	Addr string
	// Pprof mounts /debug/pprof/ (-pprof); refused unless Addr is a
	// loopback address.
	Pprof bool
}

// Register adds -http with default def and usage, and -pprof, to cs.
func (h *HTTPFlags) Register(cs *config.Set, def, usage string) {
	addr := config.String(cs, &h.Addr, "http", def, usage)
	config.Bool(cs, &h.Pprof, "pprof", false,
		"serve Go's profiles (net/http/pprof) under /debug/pprof/ on the -http address, which must then be a loopback address (127.0.0.1, [::1] or localhost): profiles reveal memory contents").
		Check(func(on bool) error {
			if on && !IsLoopback(h.Addr) {
				return errors.New("requires " + addr.Flag() + " on a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT), not " + h.Addr + ": profiles show memory contents, secrets included")
			}
			return nil
		})
}

// Endpoints returns e with Pprof set from the flags.
func (h HTTPFlags) Endpoints(e Endpoints) Endpoints {
	e.Pprof = h.Pprof
	return e
}

// Options returns AddHTTP's options for the flags: without the write
// timeout when profiles are served.
func (h HTTPFlags) Options() []HTTPOption {
	if h.Pprof {
		return []HTTPOption{LongResponses()}
	}
	return nil
}

// IsLoopback reports whether the listen address addr (host:port) is bound
// to a loopback interface only: 127.0.0.0/8, ::1 or localhost. An empty
// host (":9101", all interfaces) or another name is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
