package bench

import (
	"encoding/json"
	"math"
	"time"
)

// Goal is what a scenario's ratio must reach.
type Goal struct {
	// Text states the goal in the report, e.g. "≤ 1.2×".
	Text string
	// AtMost means the ratio must be at most Limit; otherwise at least.
	AtMost bool
	// Limit is the bound on the ratio.
	Limit float64
	// Report marks a figure reported without a goal (its verdict says so).
	Report bool `json:",omitempty"`
}

// Met reports whether ratio meets the goal. NaN never does.
func (g Goal) Met(ratio float64) bool {
	if math.IsNaN(ratio) {
		return false
	}
	if g.AtMost {
		return ratio <= g.Limit
	}
	return ratio >= g.Limit
}

// Check is a condition besides the ratio that must hold in every run, such
// as "no 429s provoked".
type Check struct {
	// Name says what is counted, e.g. "429s provoked".
	Name string
	// Max is the largest value allowed in any run.
	Max float64
	// Values are the counts, one per run.
	Values []float64
}

// Met reports whether every run kept the value within Max.
func (c Check) Met() bool {
	if len(c.Values) == 0 {
		return false
	}
	for _, v := range c.Values {
		if math.IsNaN(v) || v > c.Max {
			return false
		}
	}
	return true
}

// RunFigures are one run's figures of a scenario.
type RunFigures struct {
	// Ours is our figure, Reference the figure it is compared with,
	// measured in the same run; Ratio is Ours/Reference unless the
	// scenario defines it otherwise.
	Ours, Reference, Ratio float64
	// Extra are further figures of the run, matching Result.ExtraColumns.
	Extra []string
}

// runFiguresJSON is RunFigures with NaN (a figure a run could not produce)
// as null, which JSON can carry.
type runFiguresJSON struct {
	Ours, Reference, Ratio *float64
	Extra                  []string `json:",omitempty"`
}

// MarshalJSON writes NaN figures as null.
func (f RunFigures) MarshalJSON() ([]byte, error) {
	opt := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	return json.Marshal(runFiguresJSON{Ours: opt(f.Ours), Reference: opt(f.Reference), Ratio: opt(f.Ratio), Extra: f.Extra})
}

// UnmarshalJSON reads null figures as NaN.
func (f *RunFigures) UnmarshalJSON(b []byte) error {
	var j runFiguresJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	val := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	*f = RunFigures{Ours: val(j.Ours), Reference: val(j.Reference), Ratio: val(j.Ratio), Extra: j.Extra}
	return nil
}

// Result is one scenario (one row of the report) with all its runs.
type Result struct {
	// ID numbers the scenario as issue 7 does ("1", "3a", "4b").
	ID string
	// Title names the scenario.
	Title string
	// Ours and Reference say what the two figures are; Unit and RefUnit
	// are their units.
	Ours, Reference string
	Unit, RefUnit   string
	// Goal is what the median ratio must reach, or the median of our
	// figure with GoalOnOurs (a count that must be zero has no ratio).
	Goal       Goal
	GoalOnOurs bool
	// ShowRatio reports the ratio of a GoalOnOurs row all the same: a
	// comparison beside the goal, not judged.
	ShowRatio bool `json:",omitempty"`
	// Checks must hold in every run.
	Checks []Check
	// Runs are the measured runs, in order.
	Runs []RunFigures
	// ExtraColumns name RunFigures.Extra in the per-run table.
	ExtraColumns []string
	// Method says how the figures are measured (Markdown).
	Method string
	// Notes are findings of the run that explain the figures: CPU per
	// message by process, the server's settings, what limits the rate.
	Notes []string
	// Error says why the scenario could not complete; empty when it did.
	// The runs before the failure are kept.
	Error string
	// Elapsed is the wall time the scenario took, set-up included.
	Elapsed time.Duration
	// Load is the load average (1, 5, 15 min) when the scenario started.
	Load string
	// Measured is when the scenario started.
	Measured time.Time `json:",omitzero"`
}

// Group is the scenario group of the row: the digits its ID starts with
// ("4" for "4b").
func (r *Result) Group() string {
	i := 0
	for i < len(r.ID) && r.ID[i] >= '0' && r.ID[i] <= '9' {
		i++
	}
	return r.ID[:i]
}

// OursSummary summarises our figure over the runs.
func (r *Result) OursSummary() Summary {
	return Summarize(r.column(func(f RunFigures) float64 { return f.Ours }))
}

// ReferenceSummary summarises the reference over the runs.
func (r *Result) ReferenceSummary() Summary {
	return Summarize(r.column(func(f RunFigures) float64 { return f.Reference }))
}

// RatioSummary summarises the ratio over the runs.
func (r *Result) RatioSummary() Summary {
	return Summarize(r.column(func(f RunFigures) float64 { return f.Ratio }))
}

func (r *Result) column(f func(RunFigures) float64) []float64 {
	out := make([]float64, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = f(run)
	}
	return out
}

// Met reports whether the scenario met its goal: it completed, its median
// ratio meets the goal, and every check held in every run.
func (r *Result) Met() bool {
	judged := r.RatioSummary().Median
	if r.GoalOnOurs {
		judged = r.OursSummary().Median
	}
	if r.Error != "" || len(r.Runs) == 0 || !r.Goal.Met(judged) {
		return false
	}
	for _, c := range r.Checks {
		if !c.Met() {
			return false
		}
	}
	return true
}

// fail records why the scenario could not complete.
func (r *Result) fail(err error) {
	if r.Error == "" {
		r.Error = err.Error()
	}
}

// check returns the check named name, adding it with max if absent.
func (r *Result) check(name string, max float64) *Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	r.Checks = append(r.Checks, Check{Name: name, Max: max})
	return &r.Checks[len(r.Checks)-1]
}

// ratio returns a/b, or NaN when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
