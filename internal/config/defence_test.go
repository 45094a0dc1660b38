package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestDefenceDefaults: a node without a defence section gets every mode at
// its default threshold, and the file written back reads the same.
func TestDefenceDefaults(t *testing.T) {
	c, err := Parse([]byte("node: {name: n1, interface: eth0}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Defence{SecureTCP: 0.5, DropEntry: 0.75, DropPacket: 0.9, Hysteresis: 0.1,
		SecureTCPSyn: 5 * time.Second, SecureTCPFin: 10 * time.Second, DropEntryIdle: time.Minute}
	if c.Node.Defence != want {
		t.Fatalf("defaults %+v, want %+v", c.Node.Defence, want)
	}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(out, "out.yaml")
	if err != nil {
		t.Fatalf("%v in\n%s", err, out)
	}
	if c2.Node.Defence != want {
		t.Fatalf("written and read back: %+v, want %+v", c2.Node.Defence, want)
	}
}

// TestDefenceSet: each key is read; 0 turns a mode off and is no
// constraint on the order of the others.
func TestDefenceSet(t *testing.T) {
	c, err := Parse([]byte(`node:
  name: n1
  interface: eth0
  defence: {secure_tcp: 0, drop_entry: 0.6, drop_packet: 0.6, hysteresis: 0.05,
            secure_tcp_syn_timeout: 3s, secure_tcp_fin_timeout: 4s, drop_entry_idle: 30s}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Defence{SecureTCP: 0, DropEntry: 0.6, DropPacket: 0.6, Hysteresis: 0.05,
		SecureTCPSyn: 3 * time.Second, SecureTCPFin: 4 * time.Second, DropEntryIdle: 30 * time.Second}
	if c.Node.Defence != want {
		t.Fatalf("got %+v, want %+v", c.Node.Defence, want)
	}
}

// TestDefenceRejected: thresholds out of order or out of range, and a
// hysteresis that would keep a mode on, are refused naming the key.
func TestDefenceRejected(t *testing.T) {
	for _, tc := range []struct {
		name, defence string
		want          []string
	}{
		{"threshold above 1", "{drop_packet: 1.5}", []string{"node.defence.drop_packet: 1.5 is out of range 0..1"}},
		{"negative threshold", "{secure_tcp: -0.1}", []string{"node.defence.secure_tcp: -0.1 is out of range 0..1"}},
		{"not a number", "{drop_entry: lots}", []string{"node.defence.drop_entry:"}},
		{"drop_entry below secure_tcp", "{secure_tcp: 0.8, drop_entry: 0.6}",
			[]string{"node.defence.drop_entry: 0.6 is below secure_tcp (0.8): the modes go on in the order secure_tcp, drop_entry, drop_packet"}},
		{"drop_packet below drop_entry", "{drop_entry: 0.8, drop_packet: 0.7}",
			[]string{"node.defence.drop_packet: 0.7 is below drop_entry (0.8)"}},
		{"drop_packet below secure_tcp, drop_entry off", "{secure_tcp: 0.7, drop_entry: 0, drop_packet: 0.6}",
			[]string{"node.defence.drop_packet: 0.6 is below secure_tcp (0.7)"}},
		{"hysteresis out of range", "{hysteresis: 0.6}", []string{"node.defence.hysteresis: 0.6 is out of range 0..0.5"}},
		{"hysteresis not below a threshold", "{secure_tcp: 0.2, hysteresis: 0.3}",
			[]string{"node.defence.hysteresis: 0.3 is not below secure_tcp (0.2): that mode would never go off"}},
		{"timeout too short", "{secure_tcp_syn_timeout: 100ms}", []string{"node.defence.secure_tcp_syn_timeout: 100ms is out of range 1s..2h"}},
		{"unknown key", "{drop_entries: 0.5}", []string{`node.defence.drop_entries: unknown field "drop_entries"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("node: {name: n1, interface: eth0, defence: "+tc.defence+"}\n"), "c.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestDefenceValidate: Validate applies the same rules to a Config built
// by hand; the zero Defence (every mode off) is valid.
func TestDefenceValidate(t *testing.T) {
	c, err := Parse([]byte("node: {name: n1, interface: eth0}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Node.Defence = Defence{}
	if err := c.Validate(); err != nil {
		t.Fatalf("zero defence: %v", err)
	}
	c.Node.Defence = Defence{DropEntry: 0.9, DropPacket: 0.8}
	err = c.Validate()
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "node.defence.drop_packet: 0.8 is below drop_entry (0.9)") {
		t.Fatalf("out of order: %v", err)
	}
}
