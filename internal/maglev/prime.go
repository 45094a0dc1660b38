package maglev

import "math/bits"

// IsPrime reports whether n is prime. It is exact for every uint32: a
// Miller-Rabin test with the bases 2, 7 and 61 has no strong pseudoprime
// below 4,759,123,141 (Jaeschke 1993), which exceeds 2^32.
func IsPrime(n uint32) bool {
	switch {
	case n < 2:
		return false
	case n < 4:
		return true
	case n%2 == 0:
		return false
	}
	// n-1 = d * 2^s with d odd.
	d := uint64(n - 1)
	s := bits.TrailingZeros64(d)
	d >>= s
	nn := uint64(n)
	for _, a := range [...]uint64{2, 7, 61} {
		if a%nn == 0 {
			continue // a is n itself (n is 7 or 61): no witness.
		}
		x := powMod(a, d, nn)
		if x == 1 || x == nn-1 {
			continue
		}
		composite := true
		for r := 1; r < s; r++ {
			x = x * x % nn // x < 2^32, so x*x fits in 64 bits.
			if x == nn-1 {
				composite = false
				break
			}
		}
		if composite {
			return false
		}
	}
	return true
}

// powMod returns b^e mod n for n < 2^32.
func powMod(b, e, n uint64) uint64 {
	r := uint64(1)
	b %= n
	for e > 0 {
		if e&1 == 1 {
			r = r * b % n
		}
		b = b * b % n
		e >>= 1
	}
	return r
}
