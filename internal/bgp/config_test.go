package bgp

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

func validConfig() Config {
	return Config{
		ASN:                 65001,
		RouterID:            netip.MustParseAddr("10.0.0.11"),
		ListenPort:          179,
		GracefulRestartTime: 120 * time.Second,
		ShutdownWait:        5 * time.Second,
		Peers: []Peer{{
			Addr: netip.MustParseAddr("10.0.0.1"), ASN: 65000,
			HoldTime: 3 * time.Second, Keepalive: time.Second,
		}},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string // substring of the error; "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"defaults", func(c *Config) { c.Peers[0].HoldTime, c.Peers[0].Keepalive = 0, 0 }, ""},
		{"no graceful restart", func(c *Config) { c.GracefulRestartTime = 0 }, ""},
		{"zero asn", func(c *Config) { c.ASN = 0 }, "ASN"},
		{"v6 router id", func(c *Config) { c.RouterID = netip.MustParseAddr("2001:db8::1") }, "RouterID"},
		{"no router id", func(c *Config) { c.RouterID = netip.Addr{} }, "RouterID"},
		{"port", func(c *Config) { c.ListenPort = 70000 }, "ListenPort"},
		{"restart time too long", func(c *Config) { c.GracefulRestartTime = 4096 * time.Second }, "GracefulRestartTime"},
		{"restart time fraction", func(c *Config) { c.GracefulRestartTime = 1500 * time.Millisecond }, "GracefulRestartTime"},
		{"negative wait", func(c *Config) { c.ShutdownWait = -time.Second }, "ShutdownWait"},
		{"nexthop4 v6", func(c *Config) { c.NextHop4 = netip.MustParseAddr("2001:db8::1") }, "NextHop4"},
		{"nexthop6 v4", func(c *Config) { c.NextHop6 = netip.MustParseAddr("10.0.0.1") }, "NextHop6"},
		{"nexthop6 link-local", func(c *Config) { c.NextHop6 = netip.MustParseAddr("fe80::1") }, "NextHop6"},
		{"no peers", func(c *Config) { c.Peers = nil }, "Peers"},
		{"peer addr", func(c *Config) { c.Peers[0].Addr = netip.Addr{} }, "Peers[0].Addr"},
		{"peer link-local", func(c *Config) { c.Peers[0].Addr = netip.MustParseAddr("fe80::1") }, "link-local"},
		{"duplicate peer", func(c *Config) {
			c.Peers = append(c.Peers, Peer{Addr: netip.MustParseAddr("::ffff:10.0.0.1"), ASN: 65000})
		}, "same address as Peers[0]"},
		{"peer asn", func(c *Config) { c.Peers[0].ASN = 0 }, "Peers[0].ASN"},
		{"hold time 2s", func(c *Config) { c.Peers[0].HoldTime = 2 * time.Second }, "HoldTime"},
		{"hold time fraction", func(c *Config) { c.Peers[0].HoldTime = 3500 * time.Millisecond }, "HoldTime"},
		{"keepalive not below hold", func(c *Config) { c.Peers[0].Keepalive = 3 * time.Second }, "Keepalive"},
		{"keepalive above default hold", func(c *Config) { c.Peers[0].HoldTime, c.Peers[0].Keepalive = 0, 91*time.Second }, "Keepalive"},
		{"password", func(c *Config) { c.Peers[0].Password = strings.Repeat("x", 81) }, "Password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.modify(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig naming %q", err, tt.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	v4only := validConfig()
	with6 := validConfig()
	with6.NextHop6 = netip.MustParseAddr("2001:db8::11")
	v6peer := validConfig()
	v6peer.Peers[0].Addr = netip.MustParseAddr("2001:db8::1")
	pfx := netip.MustParsePrefix
	tests := []struct {
		name string
		cfg  Config
		in   []netip.Prefix
		want []netip.Prefix
		err  error
	}{
		{"v4", v4only, []netip.Prefix{pfx("192.0.2.1/32"), pfx("192.0.2.1/32")}, []netip.Prefix{pfx("192.0.2.1/32")}, nil},
		{"mapped", v4only, []netip.Prefix{pfx("::ffff:192.0.2.1/128")}, []netip.Prefix{pfx("192.0.2.1/32")}, nil},
		{"not host", v4only, []netip.Prefix{pfx("192.0.2.0/24")}, nil, ErrNotHostPrefix},
		{"unspecified", v4only, []netip.Prefix{pfx("0.0.0.0/32")}, nil, ErrNotHostPrefix},
		{"invalid", v4only, []netip.Prefix{{}}, nil, ErrNotHostPrefix},
		{"v6 over v4 without next hop", v4only, []netip.Prefix{pfx("2001:db8::10/128")}, nil, ErrNoSession},
		{"v6 over v4 with next hop", with6, []netip.Prefix{pfx("2001:db8::10/128")}, []netip.Prefix{pfx("2001:db8::10/128")}, nil},
		{"v4 over v6 without next hop", v6peer, []netip.Prefix{pfx("192.0.2.1/32")}, nil, ErrNoSession},
		{"v6 over v6", v6peer, []netip.Prefix{pfx("2001:db8::10/128")}, []netip.Prefix{pfx("2001:db8::10/128")}, nil},
		{"empty", v4only, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.normalize(tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("normalize error = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("normalize = %v, want %v", got, tt.want)
			}
			for _, p := range tt.want {
				if _, ok := got[p]; !ok {
					t.Fatalf("normalize = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestTargetAndDiff(t *testing.T) {
	a, b, c := netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.2/32"), netip.MustParsePrefix("2001:db8::1/128")
	desired := map[netip.Prefix]struct{}{a: {}, b: {}}
	tests := []struct {
		name string
		cur  rib
		mode drainMode
		want []change
	}{
		{"announce all", rib{}, inService, []change{{Prefix: a}, {Prefix: b}}},
		{"nothing to do", rib{a: false, b: false}, inService, nil},
		{"add and withdraw", rib{a: false, c: false}, inService, []change{{Prefix: b}, {Prefix: c, Withdraw: true}}},
		{"draining re-announces", rib{a: false, b: false}, draining, []change{{Prefix: a, GShut: true}, {Prefix: b, GShut: true}}},
		{"drained withdraws", rib{a: true, b: true}, drained, []change{{Prefix: a, Withdraw: true}, {Prefix: b, Withdraw: true}}},
		{"undrain", rib{a: true, b: true}, inService, []change{{Prefix: a}, {Prefix: b}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := diff(tt.cur, target(desired, tt.mode))
			if len(got) != len(tt.want) {
				t.Fatalf("diff = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("diff = %+v, want %+v", got, tt.want)
				}
			}
		})
	}
}

func TestPathAttributes(t *testing.T) {
	cfg := validConfig()
	cfg.NextHop6 = netip.MustParseAddr("2001:db8::11")
	tests := []struct {
		name    string
		ch      change
		family  bgppkt.Family
		nexthop string
		gshut   bool
	}{
		{"v4 next hop self", change{Prefix: netip.MustParsePrefix("192.0.2.1/32")}, bgppkt.RF_IPv4_UC, "0.0.0.0", false},
		{"v4 draining", change{Prefix: netip.MustParsePrefix("192.0.2.1/32"), GShut: true}, bgppkt.RF_IPv4_UC, "0.0.0.0", true},
		{"v6 configured next hop", change{Prefix: netip.MustParsePrefix("2001:db8::10/128")}, bgppkt.RF_IPv6_UC, "2001:db8::11", false},
		{"withdraw drops community", change{Prefix: netip.MustParsePrefix("192.0.2.1/32"), GShut: true, Withdraw: true}, bgppkt.RF_IPv4_UC, "0.0.0.0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := cfg.path(tt.ch)
			if err != nil {
				t.Fatal(err)
			}
			if p.Family != tt.family || p.Withdrawal != tt.ch.Withdraw || p.Nlri.String() != tt.ch.Prefix.String() {
				t.Fatalf("path = %v %v withdraw=%v", p.Family, p.Nlri, p.Withdrawal)
			}
			var origin, nh, gshut bool
			for _, a := range p.Attrs {
				switch a := a.(type) {
				case *bgppkt.PathAttributeOrigin:
					origin = a.Value == bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP
				case *bgppkt.PathAttributeNextHop:
					nh = a.Value.String() == tt.nexthop
				case *bgppkt.PathAttributeMpReachNLRI:
					nh = a.Nexthop.String() == tt.nexthop
				case *bgppkt.PathAttributeCommunities:
					gshut = len(a.Value) == 1 && a.Value[0] == 0xFFFF0000
				}
			}
			if !origin || !nh || gshut != tt.gshut {
				t.Fatalf("attrs %v: origin IGP %v, next hop %s %v, graceful shutdown %v (want %v)", p.Attrs, origin, tt.nexthop, nh, gshut, tt.gshut)
			}
		})
	}
}

func TestAPIPeer(t *testing.T) {
	cfg := validConfig()
	cfg.NextHop6 = netip.MustParseAddr("2001:db8::11")
	cfg.Restarting = true
	cfg.Peers[0].Password = "s3cret"
	p := cfg.apiPeer(cfg.Peers[0])
	if p.Conf.PeerAsn != 65000 || p.Conf.AuthPassword != "s3cret" || p.Conf.NeighborAddress != "10.0.0.1" {
		t.Errorf("conf = %v", p.Conf)
	}
	if p.Timers.Config.HoldTime != 3 || p.Timers.Config.KeepaliveInterval != 1 {
		t.Errorf("timers = %v", p.Timers.Config)
	}
	gr := p.GracefulRestart
	if gr == nil || !gr.Enabled || gr.RestartTime != 120 || !gr.LocalRestarting || gr.DeferralTime != 10 || gr.NotificationEnabled || gr.LonglivedEnabled {
		t.Errorf("graceful restart = %v", gr)
	}
	if len(p.AfiSafis) != 2 || !p.AfiSafis[0].MpGracefulRestart.Config.Enabled {
		t.Errorf("families = %v, want v4 and v6 with graceful restart", p.AfiSafis)
	}
	cfg.GracefulRestartTime = 0
	if p := cfg.apiPeer(cfg.Peers[0]); p.GracefulRestart != nil || p.AfiSafis[0].MpGracefulRestart.Config.Enabled {
		t.Errorf("graceful restart advertised with GracefulRestartTime 0: %v", p.GracefulRestart)
	}
}

func TestRestartDeferral(t *testing.T) {
	for _, tt := range []struct{ restart, want time.Duration }{
		{1 * time.Second, time.Second},
		{6 * time.Second, time.Second},
		{30 * time.Second, 7 * time.Second},
		{120 * time.Second, 10 * time.Second},
	} {
		c := Config{GracefulRestartTime: tt.restart}
		if got := c.restartDeferral(); got != tt.want {
			t.Errorf("restartDeferral(%v) = %v, want %v", tt.restart, got, tt.want)
		}
	}
}
