package config

import (
	"fmt"
	"math"

	"github.com/xlbproject/xlb/internal/maglev"
)

// prevPrime returns the largest prime <= n, or 0 when there is none.
func prevPrime(n uint32) uint32 {
	for ; n >= 2; n-- {
		if maglev.IsPrime(n) {
			return n
		}
	}
	return 0
}

// nextPrime returns the smallest prime >= n, or 0 when there is none within
// uint32.
func nextPrime(n uint32) uint32 {
	for m := uint64(n); m <= math.MaxUint32; m++ {
		if maglev.IsPrime(uint32(m)) {
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
