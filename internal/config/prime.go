package config

import (
	"fmt"
	"math"
)

// isPrime reports whether n is prime, by trial division with 6k±1 candidates:
// deterministic and at most ~22,000 divisions for any uint32.
func isPrime(n uint32) bool {
	if n < 4 {
		return n >= 2
	}
	if n%2 == 0 || n%3 == 0 {
		return false
	}
	for i := uint64(5); i*i <= uint64(n); i += 6 {
		if uint64(n)%i == 0 || uint64(n)%(i+2) == 0 {
			return false
		}
	}
	return true
}

// prevPrime returns the largest prime <= n, or 0 when there is none.
func prevPrime(n uint32) uint32 {
	for ; n >= 2; n-- {
		if isPrime(n) {
			return n
		}
	}
	return 0
}

// nextPrime returns the smallest prime >= n, or 0 when there is none within
// uint32.
func nextPrime(n uint32) uint32 {
	for m := uint64(n); m <= math.MaxUint32; m++ {
		if isPrime(uint32(m)) {
			return uint32(m)
		}
	}
	return 0
}

// nearestPrimes describes the primes around n for a "not prime" message, such
// as "65521, 65537", keeping to sizes a table may have.
func nearestPrimes(n uint32) string {
	lo, hi := prevPrime(n), nextPrime(n)
	switch {
	case lo == 0:
		return "2"
	case hi == 0 || hi > MaxTableSize:
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d, %d", lo, hi)
}
