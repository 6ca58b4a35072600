// Package system holds what the demo (examples/demo) and the chaos harness
// (tools/internal/chaos) share about running the whole tgnotify system as
// real processes: the nats-server configuration derived from the shipped
// file, Mailpit's command line, the environment the children must not
// inherit, and reading the system's state back — the daemons' JSON and
// Prometheus endpoints, every channel's consumer, the NOTIFY and
// NOTIFY_DEAD streams, the pipeline's events, the delivery records, the
// outbox, and what each provider (the Bot API, MAX and SMS emulators,
// Mailpit) accepted.
//
// Process supervision itself is internal/procs.
package system

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// The settings of the shipped nats-server.conf that WriteNATSConfig replaces.
var (
	listenLine   = regexp.MustCompile(`(?m)^listen:.*$`)
	httpLine     = regexp.MustCompile(`(?m)^http:.*$`)
	storeDirLine = regexp.MustCompile(`(?m)^(\s*)store_dir:.*$`)
	syncLine     = regexp.MustCompile(`(?m)^(\s*)sync_interval:.*$`)
)

// NATSConfig is what WriteNATSConfig changes in the shipped nats-server
// configuration.
type NATSConfig struct {
	// ClientPort and MonitorPort are the client and monitoring ports, both
	// on 127.0.0.1.
	ClientPort, MonitorPort int
	// StoreDir is the JetStream store directory.
	StoreDir string
	// ServerDefaultSync comments out the file's sync_interval, so the server
	// fsyncs on its own default schedule instead of after every write. Only
	// the benchmark sets it, to measure what `sync_interval: always` costs.
	ServerDefaultSync bool
}

// WriteNATSConfig copies the nats-server configuration at from to to, with
// the addresses and the JetStream store directory of c. Everything else,
// sync_interval included unless c.ServerDefaultSync, is the production
// file's. A file without one of the replaced settings is an error.
func WriteNATSConfig(from, to string, c NATSConfig) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("reading the nats-server configuration: %w", err)
	}
	conf := string(b)
	syncWith := "${0}" // keep the production setting
	if c.ServerDefaultSync {
		syncWith = "${1}# sync_interval: server default (commented out for this run)"
	}
	for _, r := range []struct {
		re   *regexp.Regexp
		with string
	}{
		{listenLine, "listen: " + procs.Addr(c.ClientPort)},
		{httpLine, "http: " + procs.Addr(c.MonitorPort)},
		{storeDirLine, "${1}store_dir: " + strconv.Quote(c.StoreDir)},
		{syncLine, syncWith},
	} {
		if !r.re.MatchString(conf) {
			return fmt.Errorf("%s: no line matches %s; cannot configure the server", from, r.re)
		}
		conf = r.re.ReplaceAllString(conf, r.with)
	}
	header := "# Generated from " + from + "; addresses, store_dir and sync_interval set per run.\n"
	return os.WriteFile(to, []byte(header+conf), 0o644)
}

// CleanEnv lists the environment variables of the daemons' own settings
// that are set in this process's environment, plus the NATS clients'
// standard variables (NATS_URL, NATS_CREDS, NATS_CONTEXT, ...) and the
// providers' secrets (TELEGRAM_BOT_TOKEN, ...): children started for a demo
// or a test must not inherit them, or a developer's exported PUBLISHER_NATS
// or NATS_CONTEXT would steer them elsewhere. Pass it as
// [procs.Spec.Unset].
func CleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		for _, prefix := range []string{"PUBLISHER_", "TELEGRAM_WORKER_", "MAX_WORKER_", "EMAIL_WORKER_", "SMS_WORKER_", "SHOP_",
			"EMULATOR_", "MAX_EMULATOR_", "SMS_EMULATOR_", "TGNOTIFY_"} {
			if strings.HasPrefix(name, prefix) && name != "TGNOTIFY_BIN" {
				out = append(out, name)
			}
		}
	}
	for _, env := range jetstream.StandardEnv() {
		out = append(out, env)
	}
	return append(out, "TELEGRAM_BOT_TOKEN", "MAX_BOT_TOKEN", "SMTP_PASSWORD", "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN")
}

// GetJSON GETs url and decodes its JSON body into v. A status other than 200
// is an error.
func GetJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decoding %s: %w", url, err)
	}
	return nil
}

// SendJSON makes a request with method to url, with body encoded as JSON
// (no body when nil): the emulators' control endpoints. A status other than
// 2xx is an error that quotes the answer.
func SendJSON(ctx context.Context, c *http.Client, method, url string, body any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// ScrapeGauge reads one unlabelled gauge from a Prometheus text endpoint.
func ScrapeGauge(ctx context.Context, c *http.Client, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", url, err)
	}
	mf, ok := families[name]
	if !ok || len(mf.GetMetric()) == 0 || mf.GetMetric()[0].GetGauge() == nil {
		return 0, fmt.Errorf("%s has no gauge %s", url, name)
	}
	return mf.GetMetric()[0].GetGauge().GetValue(), nil
}

// Percentile returns the p-th percentile (nearest rank) of ds, rounded to
// the millisecond; zero for no durations.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)].Round(time.Millisecond)
}

// PrepareDir empties dir if it is empty or was prepared before with the
// same marker file (an earlier run's), creates it, and marks it with marker
// so the next run may empty it. A directory holding anything else is refused:
// owner names the tool in the error ("demo", "chaos run").
func PrepareDir(dir, marker, owner string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
			return fmt.Errorf("-dir %s is not empty and not an earlier %s's (no %s); choose another directory", dir, owner, marker)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("emptying %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, marker), []byte("tgnotify "+owner+" directory: emptied by the next "+owner+"\n"), 0o644)
}
