package harness

import "testing"

// TestSliceSizes: a run is cut into slices of at most sliceLen that add up
// to it, as even as can be; a run from an empty table stays whole.
func TestSliceSizes(t *testing.T) {
	for _, repeat := range []uint32{1, 20000, sliceLen, sliceLen + 1, 1 << 18, 1<<18 + 7} {
		sizes := sliceSizes(repeat, fillEmpty)
		sum, lo, hi := uint32(0), sizes[0], sizes[0]
		for _, n := range sizes {
			sum += n
			lo, hi = min(lo, n), max(hi, n)
		}
		if sum != repeat || hi > sliceLen || hi-lo > 1 {
			t.Errorf("repeat %d: slices %v", repeat, sizes)
		}
		if got := sliceSizes(repeat, fillEachRun); len(got) != 1 || got[0] != repeat {
			t.Errorf("repeat %d, emptied each run: slices %v, want one", repeat, got)
		}
	}
}

// TestRoundOrder: every round runs every target once per slice, and over
// the rounds each target is in each place equally often, whatever the
// number of slices.
func TestRoundOrder(t *testing.T) {
	for _, k := range []int{1, 3, 8} {
		for _, n := range []int{1, 2, 3, 5} {
			place := make([][]int, n)
			for i := range place {
				place[i] = make([]int, n)
			}
			for r := range n * 4 {
				steps := roundOrder(r, k, n)
				if len(steps) != k*n {
					t.Fatalf("k %d n %d: %d steps", k, n, len(steps))
				}
				for s := range k {
					seen := map[int]bool{}
					for j, st := range steps[s*n : (s+1)*n] {
						if st[0] != s || seen[st[1]] {
							t.Fatalf("k %d n %d round %d: slice %d is %v", k, n, r, s, steps[s*n:(s+1)*n])
						}
						seen[st[1]] = true
						place[st[1]][j]++
					}
				}
			}
			for i := range place {
				for j := range place[i] {
					if place[i][j] != place[0][0] {
						t.Errorf("k %d n %d: target %d in place %d %d times, target 0 in place 0 %d", k, n, i, j, place[i][j], place[0][0])
					}
				}
			}
		}
	}
}

// TestRelative: the comparison is slice by slice, so a spell that slows
// both of a pair does not move it; it is the median of the pairs.
func TestRelative(t *testing.T) {
	ref := &Figure{slices: []float64{100, 200, 100, 150, 0}}
	f := &Figure{slices: []float64{110, 220, 110, 400, 50}}
	if got := relative(f, ref); got < 1.0999 || got > 1.1001 {
		t.Errorf("relative %.4f, want 1.1", got)
	}
	if got := relative(ref, ref); got != 1 {
		t.Errorf("against itself %.4f, want 1", got)
	}
}
