package config

import (
	"math"
	"testing"
)

func TestIsPrimeAgainstSieve(t *testing.T) {
	const n = 200000
	composite := make([]bool, n)
	for i := 2; i*i < n; i++ {
		if !composite[i] {
			for j := i * i; j < n; j += i {
				composite[j] = true
			}
		}
	}
	for i := 0; i < n; i++ {
		want := i >= 2 && !composite[i]
		if got := isPrime(uint32(i)); got != want {
			t.Fatalf("isPrime(%d) = %v, want %v", i, got, want)
		}
	}
}

func TestIsPrimeLarge(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint32
		want bool
	}{
		{"paper default", 65537, true},
		{"paper large", 655373, true},
		{"largest allowed", 4194301, true},
		{"max table size", MaxTableSize, false},
		{"square of a prime", 65521 * 65521, false},
		{"product of two large primes", 65519 * 65521, false},
		{"Mersenne 31", 2147483647, true},
		{"largest uint32 prime", 4294967291, true},
		{"max uint32", math.MaxUint32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isPrime(tc.n); got != tc.want {
				t.Errorf("isPrime(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}

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
