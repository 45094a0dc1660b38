// Package stats holds the summary statistics the benchmarks share.
package stats

import "slices"

// Median is the median of v (the mean of the middle two for an even
// count), 0 for none; v is not reordered.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
