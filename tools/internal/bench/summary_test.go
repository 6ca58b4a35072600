package bench_test

import (
	"math"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/tools/internal/bench"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want bench.Summary
	}{
		{"odd", []float64{3, 1, 2}, bench.Summary{Median: 2, Min: 1, Max: 3, N: 3}},
		{"even", []float64{4, 1, 3, 2}, bench.Summary{Median: 2.5, Min: 1, Max: 4, N: 4}},
		{"one", []float64{7}, bench.Summary{Median: 7, Min: 7, Max: 7, N: 1}},
		{"NaN left out", []float64{math.NaN(), 5, 1}, bench.Summary{Median: 3, Min: 1, Max: 5, N: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bench.Summarize(tc.in); got != tc.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
	if got := bench.Summarize(nil); got.N != 0 || !math.IsNaN(got.Median) {
		t.Errorf("Summarize(nil) = %+v, want N 0 and a NaN median", got)
	}
}

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := bench.Percentile(s, tc.p); got != tc.want {
			t.Errorf("Percentile(1..100 ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if s[0] != 100*time.Millisecond {
		t.Errorf("Percentile sorted its argument")
	}
	if got := bench.Percentile(nil, 99); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}

func TestResultMet(t *testing.T) {
	atLeast := bench.Goal{Text: "≥ 0.8×", Limit: 0.8}
	atMost := bench.Goal{Text: "≤ 1.2×", AtMost: true, Limit: 1.2}
	runs := func(ratios ...float64) []bench.RunFigures {
		var out []bench.RunFigures
		for _, r := range ratios {
			out = append(out, bench.RunFigures{Ours: r, Reference: 1, Ratio: r})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		r    bench.Result
		want bool
	}{
		{"median meets at least", bench.Result{Goal: atLeast, Runs: runs(0.7, 0.85, 0.9)}, true},
		{"median misses at least", bench.Result{Goal: atLeast, Runs: runs(0.7, 0.75, 0.9)}, false},
		{"median meets at most", bench.Result{Goal: atMost, Runs: runs(1.1, 1.3, 1.0)}, true},
		{"no runs", bench.Result{Goal: atLeast}, false},
		{"NaN ratio", bench.Result{Goal: atLeast, Runs: runs(math.NaN())}, false},
		{"failed check", bench.Result{Goal: atLeast, Runs: runs(1), Checks: []bench.Check{{Name: "429s", Max: 0, Values: []float64{0, 2}}}}, false},
		{"passed check", bench.Result{Goal: atLeast, Runs: runs(1), Checks: []bench.Check{{Name: "429s", Max: 0, Values: []float64{0, 0}}}}, true},
		{"goal on ours", bench.Result{Goal: bench.Goal{AtMost: true, Limit: 0}, GoalOnOurs: true, Runs: []bench.RunFigures{{Ours: 0, Ratio: math.NaN()}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Met(); got != tc.want {
				t.Errorf("Met() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var sends []time.Time
	for i := range 75 { // 30 msg/s for 2.5 s
		sends = append(sends, t0.Add(time.Duration(i)*time.Second/30))
	}
	s := bench.RateSeries{Sends: sends, Limit: 30, Bin: time.Second}
	got := s.Rates()
	if len(got) != 2 {
		t.Fatalf("Rates() has %d bins, want 2 complete ones: %v", len(got), got)
	}
	for i, xy := range got {
		if xy.X != float64(i) || xy.Y != 30 {
			t.Errorf("bin %d = (%v, %v), want (%d, 30)", i, xy.X, xy.Y, i)
		}
	}
}
