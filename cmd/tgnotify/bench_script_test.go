//go:build unix

package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/builtbin"
)

// benchScriptList runs scripts/dead-letters.sh list against the server at
// url for a bounded time and reports the dead letters it listed per second.
func benchScriptList(b *testing.B, url string) {
	if os.Getenv("TGNOTIFY_BENCH_SCRIPT") != "1" {
		b.Skip("set TGNOTIFY_BENCH_SCRIPT=1 (and TGNOTIFY_BIN) to time scripts/dead-letters.sh list on the same stream")
	}
	bin := builtbin.Dir(b, "nats")
	script, err := filepath.Abs("../../scripts/dead-letters.sh")
	if err != nil {
		b.Fatal(err)
	}
	limit := 60 * time.Second
	if v := os.Getenv("TGNOTIFY_BENCH_SCRIPT_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("TGNOTIFY_BENCH_SCRIPT_SECONDS=%q is not a positive number", v)
		}
		limit = time.Duration(n) * time.Second
	}
	var listed int
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		cmd := exec.CommandContext(ctx, "sh", script, "list")
		cmd.Env = append(os.Environ(), "NATS_URL="+url, "NATS_CLI="+filepath.Join(bin, "nats"), "HOME="+b.TempDir())
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			listed++
		}
		listed-- // the header line
		err = cmd.Wait()
		cancel()
		if err != nil && ctx.Err() == nil {
			b.Fatalf("dead-letters.sh list: %v", err)
		}
	}
	b.ReportMetric(float64(listed)/b.Elapsed().Seconds(), "letters/s")
	b.ReportMetric(float64(listed)/float64(b.N), "listed/op")
}
