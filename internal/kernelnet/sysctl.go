package kernelnet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// EnableForwarding turns on IPv4 and IPv6 forwarding on the attach
// interface only. bpf_fib_lookup answers BPF_FIB_LKUP_RET_FWD_DISABLED on
// an interface without it, and the forwarder would then fall back to the
// gateway MAC for every packet. It reports whether anything changed.
//
// A side effect operators should know: the kernel may then route packets
// that arrive on this interface for other hosts (as any router would);
// filter them in the forward hook if the node must not.
func EnableForwarding(iface string) (changed bool, err error) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		p := filepath.Join("/proc/sys/net", fam, "conf", iface, "forwarding")
		cur, err := os.ReadFile(p)
		if err != nil {
			if fam == "ipv6" && os.IsNotExist(err) {
				continue // IPv6 disabled on this host
			}
			return changed, fmt.Errorf("read %s: %w", p, err)
		}
		if string(bytes.TrimSpace(cur)) == "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
			return changed, fmt.Errorf("enable forwarding (%s): %w", p, err)
		}
		changed = true
	}
	return changed, nil
}
