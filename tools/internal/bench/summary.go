package bench

import (
	"math"
	"slices"
	"time"
)

// Summary is the median, minimum and maximum of one figure over several
// runs.
type Summary struct {
	Median, Min, Max float64
	// N is the number of runs summarised.
	N int
}

// Summarize returns the summary of values; NaN values (a run that could not
// produce the figure) are left out.
func Summarize(values []float64) Summary {
	v := make([]float64, 0, len(values))
	for _, x := range values {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	return Summary{Median: median(v), Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// median returns the median of sorted values: the middle one, or the mean
// of the two middle ones.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of samples by the
// nearest-rank method: the smallest sample with at least p% of the samples
// at or below it. It returns 0 for no samples. samples is not modified.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
