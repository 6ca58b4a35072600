// Package deploy_test checks the deployment files in configs/: the Prometheus
// alert rules (format, every metric they use exported by the daemons, every
// runbook link a heading of the runbook), the Grafana dashboard, the
// Alertmanager configuration, the systemd units (credentials, lame duck
// mode), the nats-server configuration and the daemons' YAML files.
package deploy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v2"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

const (
	alertsPath   = "../../configs/prometheus/alerts.yml"
	scrapePath   = "../../configs/prometheus/scrape.yml"
	runbookPath  = "../../docs/RUNBOOK.md"
	natsConf     = "../../configs/nats-server.conf"
	natsAuthConf = "../../configs/nats-server-auth.conf"
	systemdDir   = "../../configs/systemd"
)

// ruleFile mirrors Prometheus' rule file format (rulefmt.RuleGroups). It is
// decoded strictly: an unknown or misspelt key fails the test, as it fails
// `promtool check rules`.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record,omitempty"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for,omitempty"`
			Labels      map[string]string `yaml:"labels,omitempty"`
			Annotations map[string]string `yaml:"annotations,omitempty"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// recorder is a prometheus.Registerer that keeps the names of the metrics
// registered on it, each mapped to whether its help says it is deprecated
// (a former name exported for one release beside the new one).
type recorder struct{ names map[string]bool }

var _ prometheus.Registerer = (*recorder)(nil)

// fqName and help extract the metric name and help from a Desc's String.
var (
	fqName = regexp.MustCompile(`fqName: "([^"]+)"`)
	help   = regexp.MustCompile(`help: "((?:[^"\\]|\\.)*)"`)
)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			h := help.FindStringSubmatch(d.String())
			r.names[m[1]] = h != nil && strings.HasPrefix(h[1], "Deprecated:")
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return true }

// codeMetrics returns the names of every metric the worker and the
// publisher register, read from the real constructors (the drift gauge and
// tgnotify_build_info are the daemons' own, internal/daemon), each mapped to
// whether it is a deprecated former name.
func codeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recorder{names: map[string]bool{}}
	env := testenv.New(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := env.StartWorker(testenv.WorkerOptions{})
	w.Stop(t)
	ch, err := telegram.New(telegram.Config{}, env.Client(testenv.Token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delivery.New(delivery.Config{}, delivery.Deps{JS: env.JS, Resources: w.Resources, Channel: ch, Logger: env.Log, Registry: rec}); err != nil {
		t.Fatalf("creating a worker: %v", err)
	}
	p, err := publisher.Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), env.NC, publisher.Options{Registerer: rec})
	if err != nil {
		t.Fatalf("opening a publisher: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	if _, err := daemon.NewObjects(jetstream.Declare(jetstream.DefaultSettings()), daemon.JetStreamFlags{}, env.Log, rec); err != nil {
		t.Fatalf("creating the daemons' JetStream keeper: %v", err)
	}
	_ = rec.Register(daemon.BuildInfo("telegram-worker", "test"))
	return rec.names
}

// runbookBase is the published runbook the alerts link to; operators
// rewrite it when they install the rules (alerts.yml's header says how).
const runbookBase = "https://github.com/tgnotify/tgnotify/blob/main/docs/RUNBOOK.md"

// checkMetricNames checks that every tgnotify_ metric expr names is
// exported by a daemon, and is not a deprecated former name.
func checkMetricNames(t *testing.T, where, expr string, metrics map[string]bool) {
	t.Helper()
	for _, m := range metricRef.FindAllString(expr, -1) {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(m, suffix); ok {
				if _, known := metrics[s]; known {
					base = s
				}
			}
		}
		deprecated, known := metrics[base]
		switch {
		case !known:
			t.Errorf("%s: metric %s is not exported by any daemon (known: %v)", where, m, sortedKeys(metrics))
		case deprecated:
			t.Errorf("%s: metric %s is a deprecated former name; use its new name", where, m)
		}
	}
}

// alertName is the form of the project's alert names.
var alertName = regexp.MustCompile(`^Tgnotify[A-Z][A-Za-z0-9]*$`)

// metricRef finds metric names in an expression.
var metricRef = regexp.MustCompile(`\btgnotify_[a-z0-9_]+`)

// slug is GitHub's anchor of a markdown heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if h, ok := strings.CutPrefix(sc.Text(), "#"); ok {
			anchors[slug(strings.TrimLeft(h, "#"))] = true
		}
	}
	return anchors
}

func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	if len(rf.Groups) == 0 {
		t.Fatalf("%s has no rule groups", alertsPath)
	}
	metrics := codeMetrics(t)
	anchors := runbookAnchors(t)
	alerts := map[string]bool{}
	groups := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q is empty or repeated", g.Name)
		}
		groups[g.Name] = true
		if len(g.Rules) == 0 {
			t.Errorf("group %s has no rules", g.Name)
		}
		for _, r := range g.Rules {
			where := fmt.Sprintf("group %s, alert %q", g.Name, r.Alert)
			if r.Alert == "" || r.Record != "" {
				t.Errorf("%s: every rule here is an alert with a name", where)
			}
			if !alertName.MatchString(r.Alert) {
				t.Errorf("%s: alert names are Tgnotify<CamelCase>", where)
			}
			if alerts[r.Alert] {
				t.Errorf("%s: alert name repeated", where)
			}
			alerts[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: empty expr", where)
			}
			if err := balanced(r.Expr); err != nil {
				t.Errorf("%s: expr %q: %v", where, r.Expr, err)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			checkMetricNames(t, where, r.Expr, metrics)
			if sev := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, sev) {
				t.Errorf("%s: severity %q, want critical, warning or info", where, sev)
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: annotation %s is missing", where, k)
				}
			}
			for k, v := range r.Annotations {
				if err := templatesClosed(v); err != nil {
					t.Errorf("%s: annotation %s: %v", where, k, err)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase+"#")
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is not %s#<a heading of docs/RUNBOOK.md>", where, r.Annotations["runbook_url"], runbookBase)
			}
			if _, old := r.Annotations["runbook"]; old {
				t.Errorf("%s: the relative runbook annotation is replaced by runbook_url", where)
			}
		}
	}
	for _, want := range []string{
		"TgnotifyDeadLettersGrowing", "TgnotifyQueueDepthHigh", "TgnotifyOutboxOldestPending",
		"TgnotifyBreakerOpen", "TgnotifyTokenRejected", "TgnotifyPublisherLag",
	} {
		if !alerts[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
}

// balanced checks that brackets, braces, parentheses and quotes pair up.
func balanced(s string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quote != 0 || len(stack) > 0 {
		return fmt.Errorf("unclosed %q", append(stack, quote))
	}
	return nil
}

// templatesClosed checks that every {{ of an annotation template is closed
// by }} before the next one opens.
func templatesClosed(s string) error {
	for {
		i := strings.Index(s, "{{")
		if i < 0 {
			if strings.Contains(s, "}}") {
				return errors.New("}} without {{")
			}
			return nil
		}
		if j := strings.Index(s[:i], "}}"); j >= 0 {
			return errors.New("}} without {{")
		}
		j := strings.Index(s[i:], "}}")
		if j < 0 || strings.Contains(s[i+2:i+j], "{{") {
			return errors.New("{{ without }}")
		}
		s = s[i+j+2:]
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestScrapeConfigMatchesDownAlerts(t *testing.T) {
	b, err := os.ReadFile(scrapePath)
	if err != nil {
		t.Fatal(err)
	}
	var sc struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.UnmarshalStrict(b, &sc); err != nil {
		t.Fatalf("%s: %v", scrapePath, err)
	}
	alerts, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	jobs := regexp.MustCompile(`job=(~?)"([^"]+)"`).FindAllStringSubmatch(string(alerts), -1)
	if len(jobs) == 0 {
		t.Fatal("no alert selects a scrape job")
	}
	for _, j := range jobs {
		re := regexp.MustCompile("^" + regexp.QuoteMeta(j[2]) + "$")
		if j[1] == "~" {
			re = regexp.MustCompile("^(?:" + j[2] + ")$")
		}
		found := false
		for _, c := range sc.ScrapeConfigs {
			found = found || re.MatchString(c.JobName)
		}
		if !found {
			t.Errorf("alerts select job %s%q, which no job of scrape.yml matches", j[1], j[2])
		}
	}
	for _, w := range []string{"publisher", "telegram-worker", "max-worker", "email-worker", "sms-worker"} {
		found := false
		for _, c := range sc.ScrapeConfigs {
			found = found || c.JobName == "tgnotify-"+w
		}
		if !found {
			t.Errorf("scrape.yml has no job tgnotify-%s", w)
		}
	}
}

// unit is a parsed systemd unit file: section → key → values.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not KEY=value inside a section", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u unit) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// secret is a secret a unit hands its daemon as a systemd credential.
type secret struct {
	// id is the credential's name in $CREDENTIALS_DIRECTORY.
	id string
	// flag is the daemon's flag that reads the file.
	flag string
}

func TestSystemdUnits(t *testing.T) {
	nkey := secret{"nats.nk", "-nats-nkey"}
	units := map[string]struct {
		binary, config string
		secrets        []secret
		natsUser       string
		oneshot        bool
		// timer: started by a .timer of the same name, not at boot.
		timer bool
	}{
		"nats-server.service":        {binary: "nats-server", config: "nats-server.conf"},
		"tgnotify-provision.service": {binary: "tgnotify", config: "jetstream.yaml", oneshot: true, secrets: []secret{nkey}, natsUser: "provision"},
		// The operator's user, whose replies use the default _INBOX.
		"tgnotify-dlq-report.service":      {binary: "tgnotify", config: "dlq-report.yaml", oneshot: true, timer: true, secrets: []secret{nkey}},
		"tgnotify-publisher.service":       {binary: "publisher", config: "publisher.yaml", secrets: []secret{nkey}, natsUser: "publisher"},
		"tgnotify-telegram-worker.service": {binary: "telegram-worker", config: "telegram-worker.yaml", secrets: []secret{nkey, {"telegram-bot-token", "-token-file"}}, natsUser: "telegram-worker"},
		"tgnotify-max-worker.service":      {binary: "max-worker", config: "max-worker.yaml", secrets: []secret{nkey, {"max-bot-token", "-token-file"}}, natsUser: "max-worker"},
		"tgnotify-email-worker.service":    {binary: "email-worker", config: "email-worker.yaml", secrets: []secret{nkey, {"smtp-password", "-smtp-password-file"}}, natsUser: "email-worker"},
		"tgnotify-sms-worker.service": {binary: "sms-worker", config: "sms-worker.yaml",
			secrets: []secret{nkey, {"twilio-account-sid", "-account-sid-file"}, {"twilio-auth-token", "-auth-token-file"}}, natsUser: "sms-worker"},
	}
	auth, err := os.ReadFile(natsAuthConf)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(systemdDir, "*.service"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(units) {
		t.Errorf("configs/systemd holds %d units, want %d", len(files), len(units))
	}
	for name, want := range units {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(systemdDir, name)
			u := parseUnit(t, path)
			start := u.get("Service", "ExecStart")
			if !strings.HasPrefix(start, "/usr/local/bin/"+want.binary+" ") {
				t.Errorf("ExecStart %q does not run /usr/local/bin/%s", start, want.binary)
			}
			if !strings.Contains(start, "/etc/tgnotify/"+want.config) {
				t.Errorf("ExecStart %q does not use /etc/tgnotify/%s", start, want.config)
			}
			if _, err := os.Stat(filepath.Join("../../configs", want.config)); err != nil {
				t.Errorf("the configuration it installs is missing: %v", err)
			}
			checks := map[string]string{
				"Restart": "always", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
				"PrivateTmp": "yes", "PrivateDevices": "yes", "KillSignal": "SIGTERM",
			}
			switch {
			case want.oneshot:
				// It runs once and exits: retried on failure, nothing to stop.
				checks["Restart"], checks["Type"], checks["KillSignal"] = "on-failure", "oneshot", ""
			case name == "nats-server.service":
				// Lame duck mode: see TestNATSServerStopsInLameDuckMode.
				checks["KillSignal"] = "SIGUSR2"
			}
			if strings.HasPrefix(name, "tgnotify-") && !want.oneshot {
				if !strings.Contains(start, "-jetstream-config /etc/tgnotify/jetstream.yaml") {
					t.Errorf("ExecStart %q does not read the JetStream declaration the provision unit applies", start)
				}
				if !strings.Contains(u.get("Unit", "After"), "tgnotify-provision.service") {
					t.Error("not After=tgnotify-provision.service")
				}
				if strings.HasSuffix(name, "-worker.service") &&
					(!strings.Contains(start, "-pause-file ${STATE_DIRECTORY}/") || u.get("Service", "StateDirectory") == "") {
					t.Errorf("ExecStart %q: a worker keeps its 429 pauses in its StateDirectory (-pause-file ${STATE_DIRECTORY}/...), for the process restarted in its place", start)
				}
				if !strings.Contains(start, "-provision=false") {
					t.Errorf("ExecStart %q: a daemon under its least-privilege NATS user runs with -provision=false", start)
				}
			}
			for key, value := range checks {
				if got := u.get("Service", key); got != value {
					t.Errorf("%s=%q, want %q", key, got, value)
				}
			}
			if u.get("Service", "DynamicUser") != "yes" && u.get("Service", "User") == "" {
				t.Error("neither DynamicUser=yes nor a service User")
			}
			if got := u.get("Service", "CapabilityBoundingSet"); got != "" || len(u["Service"]["CapabilityBoundingSet"]) == 0 {
				t.Errorf("CapabilityBoundingSet=%q: want it set and empty", got)
			}
			// Every secret is a credential read from $CREDENTIALS_DIRECTORY
			// (%d) by the daemon's file flag; none is in the environment or
			// on the command line.
			creds := map[string]string{}
			for _, lc := range u["Service"]["LoadCredential"] {
				id, src, ok := strings.Cut(lc, ":")
				if !ok || !strings.HasPrefix(src, "/etc/tgnotify/credentials/") {
					t.Errorf("LoadCredential=%s: want ID:/etc/tgnotify/credentials/FILE", lc)
				}
				creds[id] = src
			}
			for _, s := range want.secrets {
				if creds[s.id] == "" {
					t.Errorf("no LoadCredential=%s:...", s.id)
				}
				if !strings.Contains(start, s.flag+" %d/"+s.id) && !strings.Contains(start, s.flag+" ${CREDENTIALS_DIRECTORY}/"+s.id) {
					t.Errorf("ExecStart %q does not pass %s %%d/%s", start, s.flag, s.id)
				}
			}
			if len(creds) != len(want.secrets) {
				t.Errorf("LoadCredential %v, want exactly %v", creds, want.secrets)
			}
			for _, env := range u["Service"]["EnvironmentFile"] {
				if !strings.HasPrefix(env, "-/etc/tgnotify/nats") {
					t.Errorf("EnvironmentFile=%s: secrets are credentials, the environment files hold only NATS_URL and public keys", env)
				}
			}
			for _, bad := range []string{"TOKEN=", "PASSWORD=", " -token ", "-nats-password", "-nats-token"} {
				if strings.Contains(start, bad) || strings.Contains(strings.Join(u["Service"]["Environment"], " "), bad) {
					t.Errorf("a secret (%s) on the command line or in Environment=", bad)
				}
			}
			if want.natsUser != "" {
				prefix := "_INBOX_" + want.natsUser
				if !strings.Contains(start, "-nats-inbox-prefix "+prefix) {
					t.Errorf("ExecStart %q does not use the inbox prefix of its NATS user, %s", start, prefix)
				}
				if !strings.Contains(string(auth), `"`+prefix+`.>"`) {
					t.Errorf("nats-server-auth.conf lets no user subscribe to %s.>", prefix)
				}
			}
			if want.timer {
				timer := parseUnit(t, strings.TrimSuffix(path, ".service")+".timer")
				if timer.get("Timer", "Unit") != name || timer.get("Timer", "OnCalendar") == "" || timer.get("Install", "WantedBy") != "timers.target" {
					t.Errorf("its timer: Unit=%q OnCalendar=%q WantedBy=%q, want this unit, a calendar and timers.target",
						timer.get("Timer", "Unit"), timer.get("Timer", "OnCalendar"), timer.get("Install", "WantedBy"))
				}
				if len(u["Install"]) != 0 {
					t.Error("a unit started by its timer has no [Install] section")
				}
				if !strings.Contains(start, "${STATE_DIRECTORY}") || u.get("Service", "StateDirectory") == "" {
					t.Errorf("ExecStart %q keeps no state in its StateDirectory", start)
				}
				if _, err := exec.LookPath("systemd-analyze"); err == nil {
					// verify checks the timer and the unit it starts together.
					out, _ := exec.Command("systemd-analyze", "verify", strings.TrimSuffix(path, ".service")+".timer").CombinedOutput()
					for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
						if line != "" && !strings.Contains(line, "is not executable") {
							t.Errorf("systemd-analyze verify (timer): %s", line)
						}
					}
				}
			} else if u.get("Install", "WantedBy") != "multi-user.target" {
				t.Error("not WantedBy=multi-user.target")
			}
			systemdAnalyze(t, path)
		})
	}
}

// systemdAnalyze runs `systemd-analyze verify` (ignoring that the binaries
// are not installed here) and `systemd-analyze security`, when available.
func systemdAnalyze(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed: skipping its checks")
		return
	}
	out, _ := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.Contains(line, "is not executable") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--threshold=25", path).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.5 or error: %v\n%s", err, out)
	}
}

func TestNATSServerConfig(t *testing.T) {
	b, err := os.ReadFile(natsConf)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	if !regexp.MustCompile(`(?m)^\s*sync_interval:\s*always\s*$`).MatchString(conf) {
		t.Error("nats-server.conf must set sync_interval: always")
	}
	if !strings.Contains(conf, "Jepsen") {
		t.Error("nats-server.conf must say why sync_interval is always")
	}
	bin := builtbin.Dir(t, "nats-server")
	out, err := exec.Command(filepath.Join(bin, "nats-server"), "-c", natsConf, "-t").CombinedOutput()
	if err != nil {
		t.Fatalf("nats-server -t rejects the configuration: %v\n%s", err, out)
	}
}

// TestDaemonConfigFilesParse starts each daemon with its documented
// configuration file, the shipped JetStream declaration and -version: an
// unknown key or a bad value would stop it with a usage error before it
// prints the version.
func TestDaemonConfigFilesParse(t *testing.T) {
	bin := builtbin.Dir(t, "publisher", "telegram-worker", "max-worker", "email-worker", "sms-worker")
	for daemon, file := range map[string]string{
		"telegram-worker": "../../configs/telegram-worker.yaml",
		"max-worker":      "../../configs/max-worker.yaml",
		"email-worker":    "../../configs/email-worker.yaml",
		"sms-worker":      "../../configs/sms-worker.yaml",
		"publisher":       "../../configs/publisher.yaml",
	} {
		// The settings a worker requires have no default to show in its
		// file: the units' operator sets them there.
		required := map[string][]string{"email-worker": {"-smtp", "127.0.0.1:25", "-from", "noreply@shop.example"}, "sms-worker": {"-from", "+15005550006"}}[daemon]
		cmd := exec.Command(filepath.Join(bin, daemon), append([]string{"-config", file, "-jetstream-config", "../../configs/jetstream.yaml", "-version"}, required...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s rejects %s: %v\n%s", daemon, file, err, out)
		}
	}
}

// TestNATSServerStopsInLameDuckMode sends the real nats-server, running the
// shipped configuration, the signal nats-server.service stops it with: the
// server enters lame duck mode (its clients are told and it accepts no new
// ones), waits lame_duck_grace_period, closes its clients and exits by
// itself, well within the unit's TimeoutStopSec, which leaves room for the
// configured lame duck duration and grace period.
func TestNATSServerStopsInLameDuckMode(t *testing.T) {
	bin := builtbin.Dir(t, "nats-server")
	u := parseUnit(t, filepath.Join(systemdDir, "nats-server.service"))
	if u.get("Service", "ExecStop") != "" {
		t.Errorf("ExecStop=%q: systemd sends KillSignal right after it returns, which can cut lame duck mode short", u.get("Service", "ExecStop"))
	}
	sig := map[string]syscall.Signal{"SIGUSR2": syscall.SIGUSR2, "SIGTERM": syscall.SIGTERM}[u.get("Service", "KillSignal")]
	if sig != syscall.SIGUSR2 {
		t.Fatalf("KillSignal=%s, want SIGUSR2 (lame duck mode)", u.get("Service", "KillSignal"))
	}
	b, err := os.ReadFile(natsConf)
	if err != nil {
		t.Fatal(err)
	}
	setting := func(name string) time.Duration {
		m := regexp.MustCompile(`(?m)^` + name + `:\s*"?([0-9a-z]+)"?\s*$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("nats-server.conf does not set %s", name)
		}
		d, err := time.ParseDuration(string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	ldm, grace := setting("lame_duck_duration"), setting("lame_duck_grace_period")
	stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec") + "s")
	if err != nil {
		t.Fatal(err)
	}
	if stop < ldm+grace+10*time.Second {
		t.Errorf("TimeoutStopSec=%v leaves no room for lame_duck_duration %v + lame_duck_grace_period %v: systemd would SIGKILL the server mid-way", stop, ldm, grace)
	}

	dir := t.TempDir()
	ports := make([]int, 2)
	for i := range ports {
		if ports[i], err = procs.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "nats-server.conf")
	if err := system.WriteNATSConfig(natsConf, conf, system.NATSConfig{ClientPort: ports[0], MonitorPort: ports[1], StoreDir: filepath.Join(dir, "js")}); err != nil {
		t.Fatal(err)
	}
	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	p, err := sup.Start(procs.Spec{Name: "nats-server", Path: filepath.Join(bin, "nats-server"), Args: []string{"-c", conf}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	told := make(chan struct{}, 1)
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports[0]), nats.NoReconnect(),
		nats.LameDuckModeHandler(func(*nats.Conn) { told <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	if err := p.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-told:
	case <-time.After(10 * time.Second):
		t.Error("the client was not told the server entered lame duck mode")
	}
	select {
	case <-p.Done():
	case <-time.After(grace + 30*time.Second):
		t.Fatal("the server did not finish lame duck mode and exit by itself")
	}
	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Entering lame duck mode") {
		t.Errorf("the server's log does not say it entered lame duck mode:\n%s", log)
	}
}

// TestUnitCommandLinesParse runs each daemon unit's ExecStart command line,
// with the installed paths mapped to the repository's files and the
// credentials to empty files, plus -version: a misspelt flag, a bad value or
// a missing credential flag would stop it with a usage error first.
func TestUnitCommandLinesParse(t *testing.T) {
	bin := builtbin.Dir(t, "publisher", "telegram-worker", "max-worker", "email-worker", "sms-worker")
	creds := t.TempDir()
	for _, unit := range []string{"publisher", "telegram-worker", "max-worker", "email-worker", "sms-worker"} {
		t.Run(unit, func(t *testing.T) {
			u := parseUnit(t, filepath.Join(systemdDir, "tgnotify-"+unit+".service"))
			args := strings.Fields(u.get("Service", "ExecStart"))[1:]
			for i, a := range args {
				switch {
				case strings.HasPrefix(a, "/etc/tgnotify/"):
					args[i] = filepath.Join("../../configs", strings.TrimPrefix(a, "/etc/tgnotify/"))
				case strings.HasPrefix(a, "%d/"):
					args[i] = filepath.Join(creds, strings.TrimPrefix(a, "%d/"))
					if err := os.WriteFile(args[i], nil, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			required := map[string][]string{"email-worker": {"-smtp", "127.0.0.1:25", "-from", "noreply@shop.example"}, "sms-worker": {"-from", "+15005550006"}}[unit]
			cmd := exec.Command(filepath.Join(bin, unit), append(append(args, "-version"), required...)...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s %v: %v\n%s", unit, args, err, out)
			}
		})
	}
}
