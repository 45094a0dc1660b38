package lab

import "testing"

func TestRouteMTU(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      int
	}{
		{"v4 exception", "10.99.0.2 from 10.200.0.1 via 10.100.0.1 dev eth0 uid 0 \n    cache expires 599sec mtu 1400 \n", 1400},
		{"v6 exception", "fd00:99::2 from fd00:200::1 via fd00:100::1 dev eth0 src fd00:100::101 metric 1024 expires 599sec mtu 1300 pref medium\n", 1300},
		{"none", "10.99.0.2 via 10.100.0.1 dev eth0 src 10.100.0.101 uid 0 \n    cache \n", 0},
		{"advmss is not mtu", "10.99.0.2 dev eth0 advmss 1460\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := RouteMTU([]byte(c.out)); got != c.want {
				t.Errorf("RouteMTU = %d, want %d", got, c.want)
			}
		})
	}
}

func TestSocketPMTU(t *testing.T) {
	out := "ESTAB 0 0 10.200.0.1:5001 10.99.0.2:47870\n\t cubic wscale:7,7 rto:204 rcvmss:536 advmss:1448 rtt:0.1/0.05 mss:1348 pmtu:1400 cwnd:10\n"
	pmtu, mss := SocketPMTU([]byte(out))
	if pmtu != 1400 || mss != 1348 {
		t.Errorf("SocketPMTU = %d, %d; want 1400, 1348", pmtu, mss)
	}
	if p, m := SocketPMTU([]byte("no socket\n")); p != 0 || m != 0 {
		t.Errorf("SocketPMTU of nothing = %d, %d", p, m)
	}
}
