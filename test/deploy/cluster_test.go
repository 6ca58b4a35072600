package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/system"
)

const clusterDir = "../../configs/nats-cluster"

// clusterUsers are the NKEY_* variables the cluster nodes' configuration
// reads: the users of nats-server-auth.conf and the system account's.
var clusterUsers = []string{"PUBLISHER", "TELEGRAM_WORKER", "MAX_WORKER", "EMAIL_WORKER", "SMS_WORKER", "SHOP", "PROVISION", "OPERATOR", "SYSTEM"}

// TestNATSClusterConfigs checks the three node files of configs/nats-cluster:
// the real nats-server accepts each (-t) with the users' public keys set;
// they differ only in the node's name and zone; each keeps the production
// settings of the single node (sync_interval: always, lame duck mode), lists
// the same three routes, and includes the least-privilege users beside it.
func TestNATSClusterConfigs(t *testing.T) {
	bin := builtbin.Dir(t, "nats-server")
	env := os.Environ()
	for _, u := range clusterUsers {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "NKEY_"+u+"="+pub)
	}
	files := map[string]string{}
	for _, n := range system.ClusterNodes() {
		path := filepath.Join(clusterDir, n+".conf")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files[n] = string(b)
		cmd := exec.Command(filepath.Join(bin, "nats-server"), "-c", path, "-t")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("nats-server -t rejects %s: %v\n%s", path, err, out)
		}
		conf := files[n]
		for _, want := range []string{
			"\nserver_name: " + n + "\n",
			"\n  sync_interval: always\n",
			"\nlame_duck_duration: ",
			"\nlame_duck_grace_period: ",
			"\ninclude ./nats-server-auth.conf\n",
			"\nsystem_account: SYS\n",
			"  routes: [\n    nats-route://nats-1.internal:6222\n    nats-route://nats-2.internal:6222\n    nats-route://nats-3.internal:6222\n  ]\n",
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("%s lacks %q", path, want)
			}
		}
	}
	// The files differ only in the node's name and zone.
	norm := regexp.MustCompile(`\bn[123]\b|az:[123]`)
	want := norm.ReplaceAllString(files["n1"], "N")
	for _, n := range []string{"n2", "n3"} {
		if got := norm.ReplaceAllString(files[n], "N"); got != want {
			t.Errorf("%s.conf differs from n1.conf in more than the node's name and zone", n)
		}
	}
	// The users' file beside the nodes is the single node's.
	auth, err := os.ReadFile(filepath.Join(clusterDir, "nats-server-auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	single, err := os.ReadFile(natsAuthConf)
	if err != nil {
		t.Fatal(err)
	}
	if string(auth) != string(single) {
		t.Error("configs/nats-cluster/nats-server-auth.conf is not configs/nats-server-auth.conf")
	}
}
