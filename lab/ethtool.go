package lab

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Feature is an interface offload that the lab switches with the legacy
// ethtool ioctls (the ones behind `ethtool -K dev gro on|tx off`).
type Feature int

const (
	// FeatureGRO is generic receive offload. On a veth it also turns on the
	// NAPI receive path, without which the device drops the frames its peer
	// sends with XDP_TX or XDP_REDIRECT (unless it runs an XDP program).
	FeatureGRO Feature = iota
	// FeatureTxCsum is transmit checksum offload. On a veth it lets the
	// stack hand over packets whose L4 checksum is only partial (pseudo
	// header); an XDP program that bounces such a packet with XDP_TX sends
	// the partial checksum on the wire, and the receiver drops it.
	FeatureTxCsum
)

// Legacy ethtool commands (linux/ethtool.h) and the ioctl that carries them.
const (
	siocEthtool    = 0x8946
	ethtoolGTxCsum = 0x16
	ethtoolSTxCsum = 0x17
	ethtoolGGRO    = 0x2b
	ethtoolSGRO    = 0x2c
)

func (f Feature) String() string {
	switch f {
	case FeatureGRO:
		return "gro"
	case FeatureTxCsum:
		return "tx-checksumming"
	}
	return fmt.Sprintf("feature(%d)", int(f))
}

func (f Feature) cmds() (get, set uint32) {
	switch f {
	case FeatureGRO:
		return ethtoolGGRO, ethtoolSGRO
	case FeatureTxCsum:
		return ethtoolGTxCsum, ethtoolSTxCsum
	}
	panic("lab: unknown feature")
}

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with the ifr_data member of the union.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte // rest of the union
}

func ethtoolIoctl(dev string, v *ethtoolValue) error {
	if len(dev) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q too long", dev)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var ifr ifreqData
	copy(ifr.name[:], dev)
	ifr.data = uintptr(unsafe.Pointer(v))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), siocEthtool, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(v)
	if errno != 0 {
		return errno
	}
	return nil
}

// SetFeature turns feature f of interface dev on or off inside the namespace.
func (n *NS) SetFeature(dev string, f Feature, on bool) error {
	_, set := f.cmds()
	v := &ethtoolValue{cmd: set}
	if on {
		v.data = 1
	}
	err := n.Do(func() error { return ethtoolIoctl(dev, v) })
	if err != nil {
		return fmt.Errorf("set %s %s=%v in %s: %w", dev, f, on, n.Name, err)
	}
	return nil
}

// Feature reports whether feature f of interface dev is on inside the
// namespace.
func (n *NS) Feature(dev string, f Feature) (bool, error) {
	get, _ := f.cmds()
	v := &ethtoolValue{cmd: get}
	err := n.Do(func() error { return ethtoolIoctl(dev, v) })
	if err != nil {
		return false, fmt.Errorf("get %s %s in %s: %w", dev, f, n.Name, err)
	}
	return v.data != 0, nil
}
