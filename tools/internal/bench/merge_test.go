package bench_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/tools/internal/bench"
)

// A run of some groups keeps the other groups' rows and plots of the
// earlier report, in scenario order, and the report says which and when.
func TestMergeKeepsTheGroupsNotRun(t *testing.T) {
	earlier := time.Date(2026, 11, 30, 7, 12, 0, 0, time.UTC)
	prev := &bench.Report{Machine: bench.Machine{Date: earlier},
		Results: []*bench.Result{{ID: "1"}, {ID: "4a"}, {ID: "4d"}, {ID: "7a", Title: "old"}},
		Plots:   []bench.Plot{{File: "telegram-limit.png"}, {Scenario: "4d", File: "429-storm.png"}},
	}
	rep := &bench.Report{Machine: bench.Machine{Date: earlier.Add(24 * time.Hour)}, Config: bench.Config{Only: []string{"7"}},
		Results: []*bench.Result{{ID: "7a", Title: "new"}, {ID: "7a′"}}}
	m := bench.Merge(prev, rep)
	var ids []string
	for _, r := range m.Results {
		ids = append(ids, r.ID)
	}
	if got, want := strings.Join(ids, " "), "1 4a 4d 7a 7a′"; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	if m.Results[3].Title != "new" {
		t.Errorf("row 7a is %q, want the new run's", m.Results[3].Title)
	}
	if len(m.Plots) != 2 {
		t.Errorf("plots %+v, want the two of group 4 kept", m.Plots)
	}
	if !m.Kept["1"].Equal(earlier) || !m.Kept["4"].Equal(earlier) {
		t.Errorf("kept %v, want groups 1 and 4 from %v", m.Kept, earlier)
	}
	md := m.Markdown(bench.MarkdownOptions{Command: "make bench BENCH_FLAGS=\"-only 7\""})
	if !strings.Contains(md, "This run measured scenario groups 7; the rows of groups 1 (2026-11-30 07:12 UTC), 4 (2026-11-30 07:12 UTC) are kept") {
		t.Errorf("the report does not say which rows are kept:\n%s", md[:min(len(md), 1500)])
	}
	if bench.Merge(prev, &bench.Report{Results: rep.Results}) == nil {
		t.Error("Merge of a full run returned nil")
	}
}
