package datapath

// The forwarder's clocks as xlbd reads them. The programs stamp with
// bpf_ktime_get_coarse_ns and bpf_ktime_get_ns: the host's
// CLOCK_MONOTONIC, coarse or not, which no time namespace offsets. xlbd
// reads them with clock_gettime, which a time namespace does offset
// (unshare --time --monotonic; a container restored by CRIU gets one):
// its sweep would see every entry hours idle, or none, its ages would be
// wrong, its fragment reader would look silent. kernelMono takes the
// namespace's offset off, so xlbd's clock is the programs'.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// timensOffsetsFile holds the offsets of this process's time namespace
// (absent before Linux 5.6 or without CONFIG_TIME_NS: no offset).
const timensOffsetsFile = "/proc/self/timens_offsets"

// monotonicOffset is the CLOCK_MONOTONIC offset of xlbd's time
// namespace in nanoseconds, read once: a process's namespace and its
// offsets do not change (xlbd never enters another).
var monotonicOffset = sync.OnceValue(func() int64 {
	b, err := os.ReadFile(timensOffsetsFile)
	if err != nil {
		return 0
	}
	off, err := parseMonotonicOffset(b)
	if err != nil {
		return 0
	}
	return off
})

// parseMonotonicOffset returns the monotonic line's offset in
// nanoseconds from the text of /proc/<pid>/timens_offsets: lines of a
// clock (its name, or 1 for CLOCK_MONOTONIC), seconds (maybe negative)
// and nanoseconds (0 to 999999999). 0 when the clock is not listed.
func parseMonotonicOffset(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || (f[0] != "monotonic" && f[0] != strconv.Itoa(unix.CLOCK_MONOTONIC)) {
			continue
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		nsec, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || nsec < 0 || nsec >= 1e9 {
			return 0, fmt.Errorf("time namespace offsets: bad line %q", sc.Text())
		}
		return sec*1e9 + nsec, nil
	}
	return 0, sc.Err()
}

// kernelMono reads clock (CLOCK_MONOTONIC or CLOCK_MONOTONIC_COARSE) as
// the BPF programs see it: in nanoseconds, without the offset of xlbd's
// time namespace.
func kernelMono(clock int32) (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano() - monotonicOffset()), nil
}
