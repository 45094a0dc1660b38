package config

import "testing"

func TestNearestPrimes(t *testing.T) {
	for _, tc := range []struct {
		n    uint32
		want string
	}{
		{0, "2"},
		{1, "2"},
		{4, "3, 5"},
		{65536, "65521, 65537"},
		{4194302, "4194301"},
	} {
		if got := nearestPrimes(tc.n); got != tc.want {
			t.Errorf("nearestPrimes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
