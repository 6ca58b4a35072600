package shop_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

const killChildEnv = "SHOP_TEST_KILL_CHILD_DB"

// TestKillChild is the child half of TestSIGKILLLeavesNoOrphans: it places
// orders as fast as it can and reports each committed one on stdout.
func TestKillChild(t *testing.T) {
	path := os.Getenv(killChildEnv)
	if path == "" {
		t.Skip("child process of TestSIGKILLLeavesNoOrphans")
	}
	ctx := context.Background()
	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := shop.NewService(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		id := fmt.Sprint("K", i)
		if _, _, err := svc.PlaceOrder(ctx, order(id)); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(os.Stdout, "committed", id)
	}
}

// A process killed with SIGKILL in the middle of a stream of orders leaves
// every committed order with its outbox row, and no row without its order.
func TestSIGKILLLeavesNoOrphans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.v")
	cmd.Env = append(os.Environ(), killChildEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	committed := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && len(committed) < 300 {
		if id, ok := strings.CutPrefix(sc.Text(), "committed "); ok {
			committed[id] = true
		}
	}
	if len(committed) < 300 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child committed only %d orders before its output ended", len(committed))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	db, err := outbox.Open(context.Background(), path, outbox.Options{})
	if err != nil {
		t.Fatalf("reopening after SIGKILL: %v", err)
	}
	defer db.Close()
	var ok string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check = %q, %v", ok, err)
	}
	var orphanOrders, orphanRows, orders int
	db.QueryRow(`SELECT COUNT(*) FROM orders WHERE 'order:' || id || ':accepted' NOT IN (SELECT key FROM outbox)`).Scan(&orphanOrders)
	db.QueryRow(`SELECT COUNT(*) FROM outbox WHERE key NOT IN (SELECT 'order:' || id || ':accepted' FROM orders)`).Scan(&orphanRows)
	db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&orders)
	if orphanOrders != 0 || orphanRows != 0 {
		t.Fatalf("%d orders without an outbox row, %d outbox rows without an order", orphanOrders, orphanRows)
	}
	for id := range committed {
		var n int
		db.QueryRow(`SELECT COUNT(*) FROM orders WHERE id = ?`, id).Scan(&n)
		if n != 1 {
			t.Fatalf("order %s was reported committed but is missing after SIGKILL", id)
		}
	}
	if orders < len(committed) {
		t.Fatalf("%d orders in the database, %d reported committed", orders, len(committed))
	}
	t.Logf("killed after %d reported commits; %d orders survived, all with their outbox rows", len(committed), orders)
}
