package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/lab"
)

// explained is what `xlbctl -o json explain` prints that the test reads.
type explained struct {
	Verdict   string
	Backend   string
	Conntrack string
}

// explain runs xlbctl explain against node 0's xlbd.
func (e *env) explain(t *testing.T, src, dst netip.AddrPort, flags string) explained {
	t.Helper()
	out, err := e.ctl(t, "-o", "json", "explain", src.String(), dst.String(), "tcp", "--flags", flags)
	if err != nil {
		t.Fatalf("explain %s > %s: %v\n%s", src, dst, err, out)
	}
	var x explained
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("explain: not JSON: %v\n%s", err, out)
	}
	return x
}

// echoFrom opens a TCP connection from the client's local address to the
// VIP's line echo (no keepalives: the test sends every packet) and
// returns it and the backend that answered its first line.
func echoFrom(t *testing.T, e *env, local netip.AddrPort) (net.Conn, string) {
	t.Helper()
	var c net.Conn
	err := e.lab.Client.NS.Do(func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(local), KeepAlive: -1, Timeout: 5 * time.Second}
		var err error
		c, err = d.Dial("tcp", e.echo4().String())
		return err
	})
	if err != nil {
		t.Fatalf("connect from %s: %v", local, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(lab.TCPTimeout))
	fmt.Fprintf(c, "hello\n")
	reply, err := bufio.NewReader(c).ReadString('\n')
	name, rest, _ := strings.Cut(strings.TrimSpace(reply), " ")
	if err != nil || rest != "hello" {
		t.Fatalf("echo from %s: %q, %v", local, reply, err)
	}
	return c, name
}

// TestExplainAgainstXLBD: `xlbctl explain` against a running xlbd (the real
// binary, its API socket): for an established connection it reports the
// backend that serves it and a conntrack hit; for a new flow a miss and
// the backend the flow then really reaches; and it moves no conntrack
// counter, no service or backend counter, and writes no conntrack entry.
func TestExplainAgainstXLBD(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	addrOf := map[string]string{}
	for _, b := range e.lab.Backends {
		addrOf[b.Short] = b.Addr4.String()
	}
	client := e.lab.Client.Addr4
	est, fresh := netip.AddrPortFrom(client, 47001), netip.AddrPortFrom(client, 47002)
	_, served := echoFrom(t, e, est)

	p := e.pinned(t)
	freshTuple := maglev.Tuple{Src: client, Dst: e.lab.VIP4(), SrcPort: fresh.Port(), DstPort: e.echo4().Port(), Proto: 6}
	entries := func() int {
		es, err := p.FlowEntries(freshTuple)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	counts := func() map[string]uint64 {
		st := e.stats(t)
		out := map[string]uint64{}
		for _, k := range []string{"ct_hit", "ct_remote_hit", "ct_miss", "ct_reselect", "flood_untracked"} {
			out[k] = st[k]
		}
		for _, s := range e.services(t) {
			out[s.Key.String()+" packets"], out[s.Key.String()+" new"] = s.Counters.Packets, s.Counters.NewFlows
			for _, r := range s.Reals {
				out[r.Real.Addr.String()+" packets"] = r.Counters.Packets
			}
		}
		return out
	}
	// Background traffic of the node (the self-check's probes through the
	// forwarder) can move these counters at any moment: a window in which
	// something moved is measured again, and the test fails only when
	// every window moved, which is what explain itself moving them gives.
	var x, y explained
	var entriesBefore, entriesAfter int
	var moved []string
	for range 5 {
		before := counts()
		entriesBefore = entries()
		x = e.explain(t, est, e.echo4(), "A")
		y = e.explain(t, fresh, e.echo4(), "S")
		after := counts()
		entriesAfter = entries()
		moved = moved[:0]
		for k, v := range before {
			if after[k] != v {
				moved = append(moved, fmt.Sprintf("%s: %d -> %d", k, v, after[k]))
			}
		}
		if len(moved) == 0 {
			break
		}
	}
	if x.Backend != addrOf[served] || (x.Conntrack != "CONNTRACK_RESULT_HIT" && x.Conntrack != "CONNTRACK_RESULT_REMOTE_HIT") ||
		x.Verdict == "XDP_DROP" || x.Verdict == "XDP_PASS" {
		t.Fatalf("established flow served by %s (%s): explain says %+v", served, addrOf[served], x)
	}
	if y.Conntrack != "CONNTRACK_RESULT_MISS" || y.Backend == "" || y.Verdict == "XDP_DROP" || y.Verdict == "XDP_PASS" {
		t.Fatalf("new flow: explain says %+v", y)
	}
	for _, m := range moved {
		t.Errorf("explain moved %s (in each of 5 windows)", m)
	}
	if entriesBefore != 0 || entriesAfter != 0 {
		t.Errorf("conntrack entries of the explained new flow: %d before, %d after; want none", entriesBefore, entriesAfter)
	}
	// The new flow, made for real, reaches the backend explain named.
	if _, got := echoFrom(t, e, fresh); addrOf[got] != y.Backend {
		t.Fatalf("new flow: explain named %s, the flow reached %s (%s)", y.Backend, got, addrOf[got])
	}
	t.Logf("established (%s): %s, %s; new: %s, %s", served, x.Backend, x.Conntrack, y.Backend, y.Conntrack)
}
