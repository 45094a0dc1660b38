package datapath

import "testing"

// The monotonic line of /proc/<pid>/timens_offsets, by name or clock id,
// with negative seconds; other clocks ignored; a bad line refused.
func TestParseMonotonicOffset(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       int64
		bad        bool
	}{
		{"host", "monotonic           0         0\nboottime            0         0\n", 0, false},
		{"ahead", "monotonic       10800         0\nboottime            0         0\n", 10800e9, false},
		{"behind", "monotonic      -10800 500000000\nboottime 7 0\n", -10800e9 + 5e8, false},
		{"by id", "1 3 25\n7 9 0\n", 3e9 + 25, false},
		{"boottime only", "boottime 3600 0\n", 0, false},
		{"empty", "", 0, false},
		{"bad nanoseconds", "monotonic 1 1000000000\n", 0, true},
		{"bad seconds", "monotonic x 0\n", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseMonotonicOffset([]byte(c.text))
			if (err != nil) != c.bad || got != c.want {
				t.Fatalf("%q: %d, %v; want %d, error %v", c.text, got, err, c.want, c.bad)
			}
		})
	}
}
