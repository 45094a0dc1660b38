package decap

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("offload"); err == nil || !strings.Contains(err.Error(), "want auto, native or generic") {
		t.Errorf("ParseMode(offload) error = %v", err)
	}
}

func TestModeOf(t *testing.T) {
	for attached, want := range map[uint32]Mode{
		nl.XDP_ATTACHED_DRV:         ModeNative,
		nl.XDP_ATTACHED_SKB:         ModeGeneric,
		4 /* XDP_ATTACHED_MULTI */ : ModeAuto,
		nl.XDP_ATTACHED_NONE:        ModeAuto,
	} {
		if got := modeOf(attached); got != want {
			t.Errorf("modeOf(%d) = %v, want %v", attached, got, want)
		}
	}
}

func TestPinDir(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s/netns-%d/eth0", PinRoot, st.Ino)
	if d, err := pinDir("eth0"); err != nil || d != want {
		t.Errorf("pinDir(eth0) = %q, %v; want %q", d, err, want)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../etc"} {
		if _, err := pinDir(bad); err == nil {
			t.Errorf("pinDir(%q) accepted", bad)
		}
		if err := Attach(bad, ModeAuto); err == nil || !strings.Contains(err.Error(), "invalid interface name") {
			t.Errorf("Attach(%q) = %v", bad, err)
		}
	}
}

// TestCounterNames binds the names Status reports (read from BTF) to the
// constants bpf2go generated from the same enum, and to the map size.
func TestCounterNames(t *testing.T) {
	names, err := counterNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != int(decapDecapCounterDECAP_COUNTER_MAX) {
		t.Fatalf("%d names, DECAP_COUNTER_MAX = %d", len(names), decapDecapCounterDECAP_COUNTER_MAX)
	}
	for c, want := range map[decapDecapCounter]string{
		decapDecapCounterDECAP_PASS_NOT_IP:    "pass_not_ip",
		decapDecapCounterDECAP_DROP_TRUNCATED: "drop_truncated",
		decapDecapCounterDECAP_RX_GRE_4IN4:    "rx_gre_4in4",
		decapDecapCounterDECAP_RX_IPIP_6IN6:   "rx_ipip_6in6",
	} {
		if names[c] != want {
			t.Errorf("name of %d = %q, want %q", c, names[c], want)
		}
	}
	spec, err := loadDecap()
	if err != nil {
		t.Fatal(err)
	}
	if m := spec.Maps["decap_counters"]; m.MaxEntries != uint32(len(names)) {
		t.Errorf("decap_counters has %d entries, the enum %d", m.MaxEntries, len(names))
	}
}
