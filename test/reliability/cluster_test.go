package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// TestClusterUnderLeastPrivilege runs the three nodes of
// configs/nats-cluster as shipped (routes between all three, the
// least-privilege users and the system account's user, fresh nkeys) and
// goes through docs/RUNBOOK.md's cluster procedures with the real CLIs:
// `tgnotify provision` with replicas 3 places every stream, consumer and
// bucket on all three nodes; the shop, the publisher and the telegram
// worker, each under its own user and given all three URLs, deliver an
// order before and after the operator's `nats stream cluster step-down
// NOTIFY`, after a SIGKILL of NOTIFY's leader node, and after a node is
// replaced (stopped, `nats server cluster peer-remove` by the system user,
// started again with an empty store). The publisher, with -gather-leaders,
// keeps every group's leader on NOTIFY's node. No node refuses anyone
// anything.
func TestClusterUnderLeastPrivilege(t *testing.T) {
	sup := supervisor(t)
	users := map[string]natsUser{}
	var env []string
	for _, name := range []string{"publisher", "telegram-worker", "max-worker", "email-worker", "sms-worker", "shop", "provision", "operator", "system"} {
		seed, public := nkeySeedFile(t)
		u := natsUser{name: name, env: "NKEY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")), seed: seed}
		users[name] = u
		env = append(env, u.env+"="+public)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := system.StartCluster(ctx, system.ClusterOptions{Sup: sup, Bin: filepath.Dir(bin(t, "nats-server")), ConfigDir: "../../configs/nats-cluster",
		Dir: dir, Auth: true, Env: env, Unset: system.CleanEnv(), ReadyTimeout: 30 * time.Second, StopTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	urls := c.URLs()
	// The operator uses the nats CLI's default inbox (_INBOX.>), as
	// nats-server-auth.conf allows it.
	var opLog syncLog
	op, err := jetstream.Connect(ctx, jetstream.Options{URLs: urls, NKeyFile: users["operator"].seed}, opLog.logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	if err := system.WaitMetaLeader(ctx, op); err != nil {
		t.Fatal(err)
	}

	decl := filepath.Join(dir, "jetstream.yaml")
	if err := os.WriteFile(decl, []byte("replicas: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var provisioned result
	natstest.WaitFor(t, 60*time.Second, func() bool {
		provisioned = runBinary(t, bin(t, "tgnotify"), nil, append([]string{"provision", "-config", decl, "-timeout", "10s"}, users["provision"].args(urls)...)...)
		return provisioned.code == 0
	}, "tgnotify provision -replicas 3 (as the provision user) to succeed")
	streams := []string{jetstream.StreamNotify, jetstream.StreamDead, "KV_" + jetstream.BucketDelivered, "KV_" + jetstream.BucketChats, "KV_" + jetstream.BucketAttempts}
	for _, s := range streams {
		p, err := system.StreamPlacement(ctx, op, s)
		if err != nil || p.Leader == "" || len(p.Replicas) != 2 {
			t.Errorf("stream %s after provisioning: %+v, %v; want a leader and two more replicas", s, p, err)
		}
	}
	if p, err := system.ConsumerPlacement(ctx, op, jetstream.StreamNotify, jetstream.ConsumerTelegram); err != nil || len(p.Replicas) != 2 {
		t.Errorf("consumer %s: %+v, %v; want three replicas", jetstream.ConsumerTelegram, p, err)
	}

	emuAddr := freeAddr(t)
	emuURL := "http://" + emuAddr
	start(t, sup, procs.Spec{Name: "botapi-emulator", Path: bin(t, "botapi-emulator"),
		Args: []string{"-http", emuAddr, "-token", emulatorToken, "-limits=false"}}, emuURL+"/emulator/healthz")
	db := filepath.Join(t.TempDir(), "shop.db")
	shopAddr := freeAddr(t)
	daemons := []*procs.Process{start(t, sup, procs.Spec{Name: "shop", Path: bin(t, "shop"),
		Args: append([]string{"-db", db, "-http", shopAddr}, users["shop"].args(urls)...)}, "http://"+shopAddr+"/healthz")}
	for _, d := range []struct {
		user string
		args []string
		env  []string
	}{
		{"publisher", []string{"-db", db, "-gather-leaders"}, nil},
		{"telegram-worker", []string{"-telegram-api", emuURL}, []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken}},
	} {
		addr := freeAddr(t)
		args := append(append(d.args, "-http", addr, "-provision=false", "-jetstream-config", decl), users[d.user].args(urls)...)
		daemons = append(daemons, start(t, sup, procs.Spec{Name: d.user, Path: bin(t, d.user), Args: args, Env: d.env}, "http://"+addr+"/readyz"))
	}
	deliver := func(id string, chat int64) {
		t.Helper()
		b, err := json.Marshal(shop.Order{ID: id, ChatID: chat, Customer: "Ann", Items: []shop.Item{{Name: "Green tea", Qty: 1, PriceCents: 450}}})
		if err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 60*time.Second, func() bool {
			resp, err := http.Post("http://"+shopAddr+"/orders", "application/json", bytes.NewReader(b))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK
		}, "the shop to take order "+id)
		natstest.WaitFor(t, 90*time.Second, func() bool {
			var o shop.PlacedOrder
			if code, body := get("http://" + shopAddr + "/orders/" + id); code == 200 {
				_ = json.Unmarshal([]byte(body), &o)
			}
			return o.Notification.Status == shop.StatusDelivered && o.Notification.Channel == "telegram"
		}, fmt.Sprintf("order %s delivered by Telegram, as the shop's events say", id))
	}
	nats := func(user string, args ...string) result {
		return runBinary(t, bin(t, "nats"), nil, append([]string{"--server", urls, "--nkey", users[user].seed}, args...)...)
	}

	deliver("C1", 100)

	leader, err := system.WaitLeader(ctx, op, jetstream.StreamNotify, "")
	if err != nil {
		t.Fatal(err)
	}
	if r := nats("operator", "stream", "cluster", "step-down", jetstream.StreamNotify); r.code != 0 {
		t.Fatalf("nats stream cluster step-down NOTIFY as the operator: exit %d\n%s", r.code, r.output)
	}
	if _, err := system.WaitLeader(ctx, op, jetstream.StreamNotify, leader); err != nil {
		t.Fatal(err)
	}
	deliver("C2", 101)

	if leader, err = system.WaitLeader(ctx, op, jetstream.StreamNotify, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Kill(leader); !ok {
		t.Fatalf("NOTIFY's leader %s was not running", leader)
	}
	deliver("C3", 102)
	if err := c.Start(ctx, leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// Replace n3 by n4: stop it, remove it from the cluster, start a node
	// named n4 on its address with an empty store; every stream and
	// consumer places its third replica on n4 by itself.
	if err := c.Stop("n3"); err != nil {
		t.Fatal(err)
	}
	if r := nats("system", "server", "cluster", "peer-remove", "n3", "-f"); r.code != 0 {
		t.Fatalf("nats server cluster peer-remove n3 as the system user: exit %d\n%s", r.code, r.output)
	}
	if err := c.Replace(ctx, "n3", "n4"); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		natstest.WaitFor(t, 2*time.Minute, func() bool {
			p, err := system.StreamPlacement(ctx, op, s)
			return err == nil && threeCurrentOn(p, "n4")
		}, "stream "+s+" back on three current replicas, one on n4")
	}
	// The consumer's replica on n4 catches up after its stream's: wait for
	// it too (CI once read the consumer a moment too early, with its
	// leader and one replica).
	natstest.WaitFor(t, 2*time.Minute, func() bool {
		p, err := system.ConsumerPlacement(ctx, op, jetstream.StreamNotify, jetstream.ConsumerTelegram)
		return err == nil && threeCurrentOn(p, "n4")
	}, "consumer "+jetstream.ConsumerTelegram+" back on three current replicas, one on n4")
	if r := nats("system", "server", "report", "jetstream"); r.code != 0 || !strings.Contains(r.output, "n4") {
		t.Errorf("nats server report jetstream as the system user: exit %d\n%s", r.code, r.output)
	}
	deliver("C4", 103)

	// The publisher's -gather-leaders keeps every group's leader on
	// NOTIFY's node (docs/RUNBOOK.md, "Keeping the leaders together").
	natstest.WaitFor(t, 2*time.Minute, func() bool {
		p, err := system.StreamPlacement(ctx, op, jetstream.StreamNotify)
		if err != nil || p.Leader == "" {
			return false
		}
		for _, s := range streams {
			if q, err := system.StreamPlacement(ctx, op, s); err != nil || q.Leader != p.Leader {
				return false
			}
		}
		q, err := system.ConsumerPlacement(ctx, op, jetstream.StreamNotify, jetstream.ConsumerTelegram)
		return err == nil && q.Leader == p.Leader
	}, "every stream, bucket and the telegram consumer led by NOTIFY's leader (-gather-leaders)")

	for _, p := range c.Processes() {
		if log := readLog(t, p); strings.Contains(log, "Violation") {
			t.Errorf("%s refused a user something it needs:\n%s", p.Name(), grepLines(log, "Violation"))
		}
	}
	for _, p := range daemons {
		if err := p.Stop(); err != nil {
			t.Errorf("stopping %s: %v", p.Name(), err)
		}
		if log := readLog(t, p); strings.Contains(log, "refused an operation") {
			t.Errorf("%s was refused an operation:\n%s", p.Name(), grepLines(log, "refused"))
		}
	}
}

// threeCurrentOn reports whether p has a leader and two current replicas
// online, one of the three on node.
func threeCurrentOn(p system.Replication, node string) bool {
	if p.Leader == "" {
		return false
	}
	names := []string{p.Leader}
	for _, r := range p.Replicas {
		if r.Current && !r.Offline {
			names = append(names, r.Name)
		}
	}
	return len(names) == 3 && slices.Contains(names, node)
}
