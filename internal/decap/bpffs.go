package decap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ensureBPFFS mounts bpffs at BPFFS unless one is mounted there already.
//
// It refuses to mount one in a mount namespace other than init's: that is
// what 'ip netns exec' runs in (it remounts /sys, hiding the host's bpffs),
// and a bpffs mounted there goes away with the command, taking the pinned
// link and so the attachment with it.
func ensureBPFFS() error {
	if bpffsMounted() {
		return nil
	}
	if privateMountNS() {
		return fmt.Errorf("no bpffs at %s in this mount namespace, which is not the host's "+
			"(ip netns exec?): a pin made here would vanish when the command exits "+
			"(enter only the network namespace: nsenter --net=/run/netns/NAME xlb-decap ...)", BPFFS)
	}
	if err := os.MkdirAll(BPFFS, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", BPFFS, err)
	}
	if err := unix.Mount("bpf", BPFFS, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w (run as root, or mount it: mount -t bpf bpf %s)", BPFFS, err, BPFFS)
	}
	return nil
}

// bpffsMounted reports whether a bpffs is mounted at BPFFS.
func bpffsMounted() bool {
	var st unix.Statfs_t
	return unix.Statfs(BPFFS, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// errNoBPFFS explains why pins cannot be found when no bpffs is mounted.
func errNoBPFFS() error {
	return fmt.Errorf("no bpffs mounted at %s, so no pins to look at "+
		"(under 'ip netns exec' the host's is hidden: use nsenter --net=/run/netns/NAME)", BPFFS)
}

// privateMountNS reports whether this process's mount namespace differs
// from its parent's or init's, as far as they can be read (reading
// another process's namespace needs ptrace access to it). 'ip netns exec'
// execs the command in place, so its parent is the caller's shell.
func privateMountNS() bool {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	for _, other := range []string{fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()), "/proc/1/ns/mnt"} {
		if ns, err := os.Readlink(other); err == nil && ns != self {
			return true
		}
	}
	return false
}
