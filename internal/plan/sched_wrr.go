package plan

// The wrr scheduler's Go part (bpf/sched/wrr.h is its C): the stride the
// data plane walks the line of weights by (sched.Info.Stride).

// wrrStride is the stride of wrr's walk over total weight units: coprime
// with total (every unit once per total new flows) and near the golden
// section of it, so consecutive new flows land far apart on the line of
// weights, interleaving the backends.
func wrrStride(total uint32) uint32 {
	if total <= 2 {
		return 1
	}
	st := uint32(uint64(total) * 618 / 1000)
	for gcd(total, st) != 1 {
		st++
	}
	return st
}
