package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

func TestParseFlags(t *testing.T) {
	cfg, addr, _, err := parseFlags([]string{
		"-http", "127.0.0.1:0",
		"-invalid", "+15005550001, +15005550002",
		"-unsubscribed", "+15005550003",
		"-not-mobile", "+15005550004",
		"-blocked-regions", "+98,+850",
		"-senders", "+15005550006",
		"-limits=false",
		"-request-rate", "10",
		"-segments-per-second", "3",
		"-queue-window", "1h",
		"-no-retry-after",
		"-latency", "5ms",
		"-fault", "5xx",
		"-fault-probability", "0.5",
		"-seed", "9",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1:0" || cfg.AccountSID != defaultAccountSID || cfg.AuthToken != defaultAuthToken ||
		cfg.Numbers["+15005550002"] != emulator.NumberInvalid || cfg.Numbers["+15005550003"] != emulator.NumberUnsubscribed ||
		cfg.Numbers["+15005550004"] != emulator.NumberNotMobile || len(cfg.BlockedRegions) != 2 || cfg.Senders[0] != "+15005550006" ||
		cfg.Limits.Enabled || cfg.Limits.RequestRate != 10 || cfg.Limits.SegmentsPerSecond != 3 || cfg.Limits.QueueWindow != time.Hour ||
		!cfg.Limits.NoRetryAfter || cfg.Latency != 5*time.Millisecond ||
		cfg.Outage == nil || cfg.Outage.Mode != emulator.Fault5xx || cfg.Outage.Probability != 0.5 || cfg.Seed != 9 {
		t.Errorf("parsed %+v (outage %+v) addr %q", cfg, cfg.Outage, addr)
	}
}

func TestParseFlagsEnvironment(t *testing.T) {
	t.Setenv("SMS_EMULATOR_AUTH_TOKEN", "from-env")
	t.Setenv("SMS_EMULATOR_UNSUBSCRIBED", "+15005550003")
	t.Setenv("SMS_EMULATOR_REQUEST_RATE", "2")
	cfg, _, _, err := parseFlags([]string{"-request-rate", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuthToken != "from-env" || cfg.Numbers["+15005550003"] != emulator.NumberUnsubscribed {
		t.Errorf("parsed %+v, want the token and the number from SMS_EMULATOR_", cfg)
	}
	if cfg.Limits.RequestRate != 3 {
		t.Errorf("RequestRate = %v, want 3: a flag wins over the environment", cfg.Limits.RequestRate)
	}
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"-invalid", "+1500,x"}, "-invalid"},
		{[]string{"-unsubscribed", "79991234567"}, "-unsubscribed"},
		{[]string{"-request-rate", "0"}, "-request-rate"},
		{[]string{"-max-concurrent", "-1"}, "-max-concurrent"},
		{[]string{"-queue-window", "0s"}, "-queue-window"},
		{[]string{"-latency", "fast"}, "-latency"},
		{[]string{"-fault", "meteor"}, "-fault"},
		{[]string{"-fault-probability", "2"}, "-fault-probability"},
		{[]string{"-fault-status", "404"}, "-fault-status"},
		{[]string{"-account-sid", "AC12"}, "-account-sid"},
		{[]string{"-senders", "+1"}, "-senders"},
		{[]string{"-log-level", "loud"}, "-log-level"},
		{[]string{"-nope"}, "-nope"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			code := realMain(context.Background(), tt.args, io.Discard, &stderr)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), tt.flag) {
				t.Errorf("stderr %q does not name %s", stderr.String(), tt.flag)
			}
		})
	}
}

func TestBadEnvironmentNamesTheVariable(t *testing.T) {
	t.Setenv("SMS_EMULATOR_REQUEST_BURST", "many")
	var stderr strings.Builder
	if code := realMain(context.Background(), nil, io.Discard, &stderr); code != exitUsage {
		t.Errorf("exit status %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "SMS_EMULATOR_REQUEST_BURST") {
		t.Errorf("stderr %q does not name SMS_EMULATOR_REQUEST_BURST", stderr.String())
	}
}

// syncWriter lets the test read what the server prints while it runs.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestServe starts the emulator, uses it over HTTP and stops it.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- realMain(ctx, []string{"-http", "127.0.0.1:0", "-unsubscribed", "+15005550003"}, &syncWriter{w: pw}, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the address: %v", err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "sms-emulator listening on ")
	if !ok {
		t.Fatalf("first line %q, want the listening address", line)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	form := url.Values{"To": {"+15005550003"}, "From": {"+15005550006"}, "Body": {"hi"}}
	req, _ := http.NewRequest("POST", base+"/2010-04-01/Accounts/"+defaultAccountSID+"/Messages.json", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(defaultAccountSID, defaultAuthToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unsubscribed number: HTTP %d, want 400", resp.StatusCode)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the emulator did not stop")
	}
}
