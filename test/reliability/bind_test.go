package reliability_test

import (
	"errors"
	"net"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
)

// TestHTTPEndpointsBindLoopbackByDefault starts each binary that serves
// HTTP without -http: it must listen on 127.0.0.1 only (its -h says so, and
// the port does not answer on the machine's other addresses). A binary
// whose default port is taken on this machine is skipped.
func TestHTTPEndpointsBindLoopbackByDefault(t *testing.T) {
	srv := natstest.Start(t)
	cases := []struct {
		binary string
		port   string
		args   []string
		env    []string
		ready  string
	}{
		{"publisher", "9101", []string{"-nats", srv.URL(), "-db", "DB"}, nil, "/healthz"},
		{"telegram-worker", "9102", []string{"-nats", srv.URL(), "-telegram-api", "CLOSED", "-request-timeout", "1s"},
			[]string{"TELEGRAM_BOT_TOKEN=1:unused"}, "/healthz"},
		{"shop", "8080", []string{"-db", "DB"}, nil, "/healthz"},
		{"botapi-emulator", "8081", nil, nil, "/emulator/healthz"},
	}
	others := nonLoopbackIPs(t)
	for _, c := range cases {
		t.Run(c.binary, func(t *testing.T) {
			path := bin(t, c.binary)
			help := runBinary(t, path, nil, "-h")
			def := regexp.MustCompile(`(?m)^\s+-http .*\n(?:\s{4,}.*\n)*?.*\(default "([^"]+)"\)`)
			m := def.FindStringSubmatch(help.output)
			if m == nil || m[1] != "127.0.0.1:"+c.port {
				t.Fatalf("-h does not show -http defaulting to 127.0.0.1:%s:\n%s", c.port, help.output)
			}

			ln, err := net.Listen("tcp", "127.0.0.1:"+c.port)
			if err != nil {
				t.Skipf("the default port %s is in use on this machine: %v", c.port, err)
			}
			ln.Close()
			args := make([]string, len(c.args))
			for i, a := range c.args {
				switch a {
				case "DB":
					a = filepath.Join(t.TempDir(), "app.db")
				case "CLOSED":
					a = closedURL(t)
				}
				args[i] = a
			}
			sup := supervisor(t)
			p, err := sup.Start(procs.Spec{Name: c.binary, Path: path, Args: args, Env: c.env, Unset: system.CleanEnv()})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.WaitReady(t.Context(), "http://127.0.0.1:"+c.port+c.ready, 30*time.Second); err != nil {
				if p.AddrInUse() {
					t.Skipf("the default port %s was taken meanwhile", c.port)
				}
				t.Fatal(err)
			}
			for _, ip := range others {
				conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, c.port), 2*time.Second)
				if err == nil {
					conn.Close()
					t.Errorf("%s answers on %s:%s, want loopback only", c.binary, ip, c.port)
				} else if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Logf("dialing %s:%s: %v", ip, c.port, err)
				}
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// nonLoopbackIPs returns this machine's IPv4 addresses other than loopback.
func nonLoopbackIPs(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			out = append(out, n.IP.String())
		}
	}
	if len(out) == 0 {
		t.Log("no address besides loopback: only the -h defaults and the loopback listener are checked")
	}
	return out
}
