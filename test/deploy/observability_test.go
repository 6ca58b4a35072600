package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v2"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
)

const (
	dashboardPath    = "../../configs/grafana/tgnotify.json"
	alertmanagerPath = "../../configs/alertmanager/alertmanager.yml"
)

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// TestGrafanaDashboard checks configs/grafana/tgnotify.json: every query
// names only metrics the daemons export (read from their real
// constructors) and no deprecated name, every panel reads the dashboard's
// Prometheus data source, and the dashboard shows what an operator watches:
// delivery per channel, fallbacks, dead letters by reason, 429s, the
// breaker, degradation, queue depth, the publisher's backlog and
// commit→PubAck latency.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both", d.Title, d.UID)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if q, ok := v.Query.(map[string]any); ok {
			checkMetricNames(t, "variable "+v.Name, fmt.Sprint(q["query"]), codeMetricsOnce(t))
		}
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: the dashboard must not hard-code a Prometheus")
	}
	metrics := codeMetricsOnce(t)
	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] {
			t.Errorf("%s: id repeated", where)
		}
		ids[p.ID] = true
		if p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: gridPos %+v does not fit the 24-column grid", where, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: datasource %+v, want uid ${datasource}", where, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", where)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" || q.RefID == "" {
				t.Errorf("%s: a target without expr or refId", where)
			}
			if err := balanced(q.Expr); err != nil {
				t.Errorf("%s: %q: %v", where, q.Expr, err)
			}
			checkMetricNames(t, where, q.Expr, metrics)
			for _, m := range metricRef.FindAllString(q.Expr, -1) {
				used[strings.TrimSuffix(m, "_bucket")] = true
			}
		}
	}
	for _, want := range []string{
		"tgnotify_worker_sent_total", "tgnotify_worker_fallbacks_total", "tgnotify_worker_dead_letters_total",
		"tgnotify_worker_rate_limited_total", "tgnotify_worker_breaker_state", "tgnotify_worker_degraded_slow",
		"tgnotify_worker_shedding_bulk", "tgnotify_worker_queue_depth_messages", "tgnotify_publisher_backlog_rows",
		"tgnotify_publisher_commit_to_ack_seconds", "tgnotify_worker_delivery_latency_seconds", "tgnotify_build_info",
	} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}

// codeMetricsOnce is codeMetrics, computed once per test binary.
func codeMetricsOnce(t *testing.T) map[string]bool {
	t.Helper()
	if cachedMetrics == nil {
		cachedMetrics = codeMetrics(t)
	}
	return cachedMetrics
}

// cachedMetrics holds codeMetrics' answer for the tests of this package,
// which run one after the other.
var cachedMetrics map[string]bool

// alertmanagerConfig mirrors the part of Alertmanager's configuration
// schema (config/config.go and config/notifiers.go of prometheus/alertmanager)
// the shipped file uses. It is decoded strictly: an unknown or misspelt key
// fails the test, as it fails `amtool check-config`.
type alertmanagerConfig struct {
	Global       map[string]any `yaml:"global,omitempty"`
	Templates    []string       `yaml:"templates,omitempty"`
	Route        *amRoute       `yaml:"route"`
	Receivers    []amReceiver   `yaml:"receivers"`
	InhibitRules []struct {
		SourceMatchers []string `yaml:"source_matchers"`
		TargetMatchers []string `yaml:"target_matchers"`
		Equal          []string `yaml:"equal,omitempty"`
	} `yaml:"inhibit_rules,omitempty"`
}

type amRoute struct {
	Receiver       string     `yaml:"receiver,omitempty"`
	GroupBy        []string   `yaml:"group_by,omitempty"`
	Matchers       []string   `yaml:"matchers,omitempty"`
	Continue       bool       `yaml:"continue,omitempty"`
	GroupWait      string     `yaml:"group_wait,omitempty"`
	GroupInterval  string     `yaml:"group_interval,omitempty"`
	RepeatInterval string     `yaml:"repeat_interval,omitempty"`
	Routes         []*amRoute `yaml:"routes,omitempty"`
}

type amReceiver struct {
	Name            string `yaml:"name"`
	TelegramConfigs []struct {
		SendResolved         *bool          `yaml:"send_resolved,omitempty"`
		HTTPConfig           map[string]any `yaml:"http_config,omitempty"`
		APIURL               string         `yaml:"api_url,omitempty"`
		BotToken             string         `yaml:"bot_token,omitempty"`
		BotTokenFile         string         `yaml:"bot_token_file,omitempty"`
		ChatID               int64          `yaml:"chat_id,omitempty"`
		MessageThreadID      int            `yaml:"message_thread_id,omitempty"`
		Message              string         `yaml:"message,omitempty"`
		DisableNotifications bool           `yaml:"disable_notifications,omitempty"`
		ParseMode            string         `yaml:"parse_mode,omitempty"`
	} `yaml:"telegram_configs,omitempty"`
	EmailConfigs []map[string]any `yaml:"email_configs,omitempty"`
}

// matcherRE is Alertmanager's matcher form: label, =, !=, =~ or !~, and a
// quoted value.
var matcherRE = regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"$`)

// matches reports whether labels satisfy every matcher.
func matches(t *testing.T, matchers []string, labels map[string]string) bool {
	t.Helper()
	for _, m := range matchers {
		p := matcherRE.FindStringSubmatch(m)
		if p == nil {
			t.Fatalf("matcher %q is not label=\"value\" (or !=, =~, !~)", m)
		}
		v := labels[p[1]]
		re := regexp.MustCompile("^(?:" + p[3] + ")$")
		ok := map[string]bool{"=": v == p[3], "!=": v != p[3], "=~": re.MatchString(v), "!~": !re.MatchString(v)}[p[2]]
		if !ok {
			return false
		}
	}
	return true
}

// receiverOf walks the routing tree as Alertmanager does (first matching
// child, unless continue) and returns the receivers an alert reaches.
func receiverOf(t *testing.T, r *amRoute, labels map[string]string, inherited string) []string {
	t.Helper()
	recv := r.Receiver
	if recv == "" {
		recv = inherited
	}
	var out []string
	for _, c := range r.Routes {
		if !matches(t, c.Matchers, labels) {
			continue
		}
		out = append(out, receiverOf(t, c, labels, recv)...)
		if !c.Continue {
			return out
		}
	}
	if len(out) == 0 {
		out = []string{recv}
	}
	return out
}

// TestAlertmanagerConfig checks configs/alertmanager/alertmanager.yml
// against Alertmanager's schema and rules: known keys only, every route's
// receiver defined, each telegram_config with its bot token in a file (never
// inline), a chat id and a parse mode Telegram knows, templates closed; and
// routing: every critical alert of alerts.yml reaches the Telegram receiver,
// and no warning pages the administrators.
func TestAlertmanagerConfig(t *testing.T) {
	b, err := os.ReadFile(alertmanagerPath)
	if err != nil {
		t.Fatal(err)
	}
	var c alertmanagerConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("%s: %v", alertmanagerPath, err)
	}
	if c.Route == nil || c.Route.Receiver == "" {
		t.Fatal("no root route with a receiver")
	}
	receivers := map[string]amReceiver{}
	for _, r := range c.Receivers {
		if r.Name == "" || receivers[r.Name].Name != "" {
			t.Errorf("receiver name %q empty or repeated", r.Name)
		}
		receivers[r.Name] = r
		for i, tc := range r.TelegramConfigs {
			where := fmt.Sprintf("receiver %s telegram_configs[%d]", r.Name, i)
			if tc.BotToken != "" || tc.BotTokenFile == "" {
				t.Errorf("%s: the bot token must be in bot_token_file, never inline", where)
			}
			if tc.ChatID == 0 {
				t.Errorf("%s: chat_id missing", where)
			}
			if !slices.Contains([]string{"", "HTML", "Markdown", "MarkdownV2"}, tc.ParseMode) {
				t.Errorf("%s: parse_mode %q, want HTML, Markdown or MarkdownV2", where, tc.ParseMode)
			}
			if err := templatesClosed(tc.Message); err != nil {
				t.Errorf("%s: message: %v", where, err)
			}
			if !strings.Contains(tc.Message, ".Annotations.runbook_url") {
				t.Errorf("%s: the message does not link the alert's runbook_url", where)
			}
		}
	}
	var walk func(r *amRoute)
	walk = func(r *amRoute) {
		if r.Receiver != "" && receivers[r.Receiver].Name == "" {
			t.Errorf("route to receiver %q, which is not defined", r.Receiver)
		}
		for _, m := range r.Matchers {
			if !matcherRE.MatchString(m) {
				t.Errorf("matcher %q is not label=\"value\"", m)
			}
		}
		for _, c := range r.Routes {
			walk(c)
		}
	}
	walk(c.Route)
	for _, ir := range c.InhibitRules {
		for _, m := range append(append([]string{}, ir.SourceMatchers...), ir.TargetMatchers...) {
			if !matcherRE.MatchString(m) {
				t.Errorf("inhibit matcher %q is not label=\"value\"", m)
			}
		}
	}

	ab, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(ab, &rf); err != nil {
		t.Fatal(err)
	}
	critical := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			labels := map[string]string{"alertname": r.Alert}
			for k, v := range r.Labels {
				labels[k] = v
			}
			got := receiverOf(t, c.Route, labels, "")
			telegram := slices.ContainsFunc(got, func(name string) bool { return len(receivers[name].TelegramConfigs) > 0 })
			switch {
			case r.Labels["severity"] == "critical" && !telegram:
				t.Errorf("critical alert %s reaches %v, not the Telegram receiver", r.Alert, got)
			case r.Labels["severity"] != "critical" && telegram:
				t.Errorf("%s alert %s pages the administrators (%v)", r.Labels["severity"], r.Alert, got)
			}
			if r.Labels["severity"] == "critical" {
				critical++
			}
		}
	}
	if critical == 0 {
		t.Error("alerts.yml has no critical alert to route")
	}
}

// TestDeprecatedMetricsDocumented checks that the runbook's metrics table
// lists every deprecated former name the daemons still export, beside the
// name that replaces it.
func TestDeprecatedMetricsDocumented(t *testing.T) {
	b, err := os.ReadFile(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	runbook := string(b)
	n := 0
	for name, deprecated := range codeMetricsOnce(t) {
		if !deprecated {
			continue
		}
		n++
		if !strings.Contains(runbook, "`"+name+"`") {
			t.Errorf("docs/RUNBOOK.md does not list the deprecated metric %s", name)
		}
	}
	if n == 0 {
		t.Error("no deprecated metric found: drop this test with the former names")
	}
}

// TestDaemonsExportBuildInfoAndPprof starts the built publisher and
// telegram worker: each exports tgnotify_build_info with its name, the
// version the build stamped and Go's version, and the dashboard's worker and
// publisher metrics under their new names; with -pprof each serves
// /debug/pprof/, and -pprof with -http on every interface is refused.
func TestDaemonsExportBuildInfoAndPprof(t *testing.T) {
	dir := builtbin.Dir(t, "publisher", "telegram-worker", "botapi-emulator")
	srv := natstest.Start(t)
	sup, err := procs.New(filepath.Join(t.TempDir(), "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	free := func() string {
		p, err := procs.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return procs.Addr(p)
	}
	const token = "123456789:DEPLOY-test-token"
	emu := free()
	start := func(spec procs.Spec, ready string) {
		t.Helper()
		spec.Unset = system.CleanEnv()
		p, err := sup.Start(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitReady(context.Background(), ready, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	start(procs.Spec{Name: "botapi-emulator", Path: filepath.Join(dir, "botapi-emulator"), Args: []string{"-http", emu, "-token", token}}, "http://"+emu+"/emulator/healthz")
	for _, d := range []struct {
		name string
		args []string
		want []string
	}{
		{"publisher", []string{"-db", filepath.Join(t.TempDir(), "app.db")}, []string{"tgnotify_publisher_backlog_rows", "tgnotify_publisher_batch_size_rows_bucket"}},
		{"telegram-worker", []string{"-telegram-api", "http://" + emu}, []string{"tgnotify_worker_queue_depth_messages", "tgnotify_worker_in_flight_requests"}},
	} {
		t.Run(d.name, func(t *testing.T) {
			addr := free()
			start(procs.Spec{Name: d.name, Path: filepath.Join(dir, d.name), Env: []string{"TELEGRAM_BOT_TOKEN=" + token},
				Args: append(d.args, "-nats", srv.URL(), "-http", addr, "-pprof")}, "http://"+addr+"/readyz")
			metrics := httpGet(t, "http://"+addr+"/metrics")
			out, err := exec.Command(filepath.Join(dir, d.name), "-version").CombinedOutput()
			if err != nil {
				t.Fatal(err)
			}
			version := strings.TrimSpace(string(out))
			info := regexp.MustCompile(`tgnotify_build_info\{daemon="` + d.name + `",goversion="go[^"]+",version="` + regexp.QuoteMeta(version) + `"\} 1`)
			if !info.MatchString(metrics) {
				t.Errorf("/metrics has no tgnotify_build_info for %s version %s:\n%s", d.name, version, grepLines(metrics, "build_info"))
			}
			for _, m := range d.want {
				if !strings.Contains(metrics, m) {
					t.Errorf("/metrics lacks %s", m)
				}
			}
			if body := httpGet(t, "http://"+addr+"/debug/pprof/"); !strings.Contains(body, "goroutine") {
				t.Errorf("/debug/pprof/ with -pprof answered %q", body)
			}
			cmd := exec.Command(filepath.Join(dir, d.name), append(d.args, "-nats", srv.URL(), "-http", "0.0.0.0:0", "-pprof")...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TELEGRAM_BOT_TOKEN=" + token}
			out, err = cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "-pprof") || !strings.Contains(string(out), "loopback") {
				t.Errorf("-pprof -http 0.0.0.0:0: %v, want exit 2 naming -pprof and loopback:\n%s", err, out)
			}
		})
	}
}

// httpGet returns the body of a 200 answer to a GET of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
