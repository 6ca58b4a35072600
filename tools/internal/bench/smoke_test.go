package bench_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/tools/internal/bench"
)

// TestSmoke runs every scenario of the suite end to end at tiny sizes, one
// run each, against the built binaries, then renders the report and the
// plots: the benchmarks cannot rot unnoticed. No figure is asserted beyond
// its existence; the sizes are far too small to mean anything.
func TestSmoke(t *testing.T) {
	bin := builtbin.Dir(t)
	dir := t.TempDir()
	root := filepath.Join("..", "..", "..")
	cfg := bench.Smoke(bin, filepath.Join(dir, "work"), filepath.Join(root, "configs", "nats-server.conf"), filepath.Join(root, "scripts", "dead-letters.sh"))
	var progress strings.Builder
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	wantIDs := []string{"1", "2", "2a", "2b", "2′", "3a", "3a′", "3b", "4a", "4b", "4c", "4d", "5", "5′", "6", "7a", "7a′", "7b", "7b′", "7c", "7c′", "7d", "7d′", "8a", "8b", "9"}
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.ID)
		if r.Error != "" {
			t.Errorf("scenario %s (%s) failed: %s", r.ID, r.Title, r.Error)
			continue
		}
		if len(r.Runs) != 1 {
			t.Errorf("scenario %s: %d runs, want 1", r.ID, len(r.Runs))
			continue
		}
		if f := r.Runs[0]; math.IsNaN(f.Ours) || math.IsNaN(f.Reference) {
			t.Errorf("scenario %s produced no figure: ours %v, reference %v", r.ID, f.Ours, f.Reference)
		}
		if f := r.Runs[0]; len(f.Extra) != len(r.ExtraColumns) {
			t.Errorf("scenario %s: %d extra figures %q for the %d columns %q", r.ID, len(f.Extra), f.Extra, len(r.ExtraColumns), r.ExtraColumns)
		}
	}
	if strings.Join(got, " ") != strings.Join(wantIDs, " ") {
		t.Errorf("scenarios %v, want %v", got, wantIDs)
	}
	if t.Failed() {
		t.Logf("progress:\n%s", progress.String())
	}

	plots := filepath.Join(dir, "plots")
	if err := bench.WritePlots(rep, plots); err != nil {
		t.Fatalf("WritePlots: %v", err)
	}
	for _, name := range []string{"telegram-limit.png", "429-storm.png"} {
		if fi, err := os.Stat(filepath.Join(plots, name)); err != nil || fi.Size() == 0 {
			t.Errorf("plot %s not written: %v", name, err)
		}
	}
	md := rep.Markdown(bench.MarkdownOptions{Command: "make bench", PlotDir: "plots", Analysis: "Nothing missed."})
	for _, want := range []string{"| 4d |", "(plots/429-storm.png)", "## Machine and load", "make bench", "Nothing missed."} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
