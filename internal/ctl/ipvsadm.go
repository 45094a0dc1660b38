package ctl

// xlbctl import ipvsadm: IPVS rules as `ipvsadm-save -n` (or
// `ipvsadm -Sn`) prints them, turned into the pools and services of an
// xlb config. Whatever has no xlb equivalent becomes a YAML comment that
// says so; nothing is dropped silently.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/xlbproject/xlb/internal/config"
)

// ipvsService is one -A rule and the -a rules of its reals.
type ipvsService struct {
	line    int
	proto   string // tcp, udp; "fwmark" for -f
	addr    netip.AddrPort
	mark    uint32
	sched   string
	persist string // -p timeout in seconds; "" without -p
	netmask string // -M as written
	notes   []string
	reals   []ipvsReal
}

type ipvsReal struct {
	addr   netip.AddrPort
	method string // dr, ipip, gre, gue, nat: the backend's method
	weight string
	notes  []string
}

// ipvsOptions maps ipvsadm's long options to their short forms.
var ipvsOptions = map[string]string{
	"--add-service": "-A", "--add-server": "-a", "--tcp-service": "-t", "--udp-service": "-u",
	"--fwmark-service": "-f", "--scheduler": "-s", "--persistent": "-p", "--netmask": "-M",
	"--real-server": "-r", "--gatewaying": "-g", "--ipip": "-i", "--masquerading": "-m",
	"--weight": "-w", "--u-threshold": "-x", "--l-threshold": "-y", "--sched-flags": "-b",
	"--ops": "-o", "-O": "-o", "--clear": "-C", "--ipv6": "-6",
}

// ImportIPVSadm reads ipvsadm-save text from r (name names it in errors)
// and returns the YAML of its pools and services.
func ImportIPVSadm(r io.Reader, name string) (string, error) {
	var svcs []*ipvsService
	byKey := map[string]*ipvsService{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "ipvsadm" {
			f = f[1:] // ipvsadm -R takes lines that start with the command's name
		}
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		for i, w := range f {
			if s, ok := ipvsOptions[w]; ok {
				f[i] = s
			}
		}
		var err error
		switch f[0] {
		case "-C":
		case "-A":
			var s *ipvsService
			if s, err = parseIPVSService(f[1:], n); err == nil {
				if o := byKey[s.key()]; o != nil {
					err = fmt.Errorf("%s defined again (first on line %d)", s.key(), o.line)
				} else {
					byKey[s.key()] = s
					svcs = append(svcs, s)
				}
			}
		case "-a":
			err = addIPVSReal(f[1:], byKey)
		default:
			err = fmt.Errorf("%q is not an ipvsadm-save rule (-A, -a or -C)", f[0])
		}
		if err != nil {
			return "", fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return renderIPVS(svcs), nil
}

func (s *ipvsService) key() string {
	if s.proto == "fwmark" {
		return "-f " + strconv.FormatUint(uint64(s.mark), 10)
	}
	return s.proto + " " + s.addr.String()
}

// ipvsTarget parses -t|-u ADDR:PORT or -f MARK at f[0:2].
func ipvsTarget(f []string) (proto string, ap netip.AddrPort, mark uint32, err error) {
	if len(f) < 2 {
		return "", ap, 0, fmt.Errorf("a service needs -t ADDR:PORT, -u ADDR:PORT or -f MARK")
	}
	switch f[0] {
	case "-t", "-u":
		proto = map[string]string{"-t": "tcp", "-u": "udp"}[f[0]]
		ap, err = netip.ParseAddrPort(f[1])
		if err != nil {
			return "", ap, 0, fmt.Errorf("%s %s: not ADDR:PORT (numeric, as ipvsadm-save -n prints it)", f[0], f[1])
		}
		return proto, ap, 0, nil
	case "-f":
		m, err := strconv.ParseUint(f[1], 0, 32)
		if err != nil {
			return "", ap, 0, fmt.Errorf("-f %s: not a firewall mark", f[1])
		}
		return "fwmark", ap, uint32(m), nil
	case "--sctp-service":
		return "", ap, 0, fmt.Errorf("SCTP services have no xlb equivalent (TCP and UDP only)")
	}
	return "", ap, 0, fmt.Errorf("%s: a service needs -t, -u or -f first", f[0])
}

func parseIPVSService(f []string, line int) (*ipvsService, error) {
	proto, ap, mark, err := ipvsTarget(f)
	if err != nil {
		return nil, err
	}
	s := &ipvsService{line: line, proto: proto, addr: ap, mark: mark, sched: "wlc"}
	for i := 2; i < len(f); i++ {
		opt, val := f[i], ""
		if i+1 < len(f) && !strings.HasPrefix(f[i+1], "-") {
			val = f[i+1]
		}
		switch opt {
		case "-s", "-M", "-b", "--pe":
			if val == "" {
				return nil, fmt.Errorf("%s needs a value", opt)
			}
			i++
		case "-p":
			if _, err := strconv.ParseUint(val, 10, 32); val != "" && err != nil {
				val = "" // not a timeout: the next option (ipvsadm-save's "ops")
			}
			if val != "" {
				i++
			}
		}
		if err := s.option(opt, val); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// option reads one virtual-service option opt (with its value val, ""
// when it takes none) into s.
func (s *ipvsService) option(opt, val string) error {
	switch opt {
	case "-s":
		s.sched = val
	case "-p":
		s.persist = val
		if val == "" {
			s.persist = "300" // IPVS's default timeout
		}
	case "-M":
		s.netmask = val
	case "-6":
		// IPv6 firewall-mark service: the family shows in the reals'
		// addresses and in the VIPs the operator writes.
		if s.proto != "fwmark" {
			return fmt.Errorf("-6 belongs to firewall-mark services (-f), not %s", s.key())
		}
	case "-b":
		for _, fl := range strings.Split(val, ",") {
			s.notes = append(s.notes, "ipvsadm -b "+fl+": "+schedFlagNote(fl))
		}
	case "--pe":
		s.notes = append(s.notes, "ipvsadm --pe "+val+": persistence engines (SIP Call-ID) have no xlb equivalent; persistence is by client address")
	case "-o", "ops":
		s.notes = append(s.notes, "ipvsadm -o (one-packet scheduling): xlb schedules each UDP flow once and tracks it; no per-datagram scheduling")
	default:
		return fmt.Errorf("service option %s is not known", opt)
	}
	return nil
}

// schedFlagNote says why a scheduler flag (-b) is not imported.
func schedFlagNote(fl string) string {
	switch fl {
	case "sh-port", "mh-port":
		return "xlb's sh and maglev-source hash the client address only; maglev hashes the whole 5-tuple, ports included"
	case "sh-fallback", "mh-fallback":
		return "xlb's hash tables hold only backends that take new flows, so a flow never hashes to an unavailable one; nothing to import"
	}
	return "not a scheduler flag xlb knows; no xlb equivalent"
}

func addIPVSReal(f []string, byKey map[string]*ipvsService) error {
	proto, ap, mark, err := ipvsTarget(f)
	if err != nil {
		return err
	}
	key := (&ipvsService{proto: proto, addr: ap, mark: mark}).key()
	s := byKey[key]
	if s == nil {
		return fmt.Errorf("real server of %s before its service (-A)", key)
	}
	r := ipvsReal{method: "dr", weight: "1"}
	var tun string // --tun-type
	for i := 2; i < len(f); i++ {
		opt, val := f[i], ""
		if i+1 < len(f) {
			val = f[i+1]
		}
		takes, err := r.option(opt, val, &tun)
		if err != nil {
			return err
		}
		if takes {
			i++
		}
	}
	if !r.addr.IsValid() {
		return fmt.Errorf("real server of %s without -r ADDR[:PORT]", key)
	}
	switch {
	case tun != "" && r.method == "ipip":
		r.method = tun // IPVS's tunnel (-i) is ipip unless --tun-type says otherwise
	case tun != "":
		r.notes = append(r.notes, "ipvsadm --tun-type "+tun+" without -i: IPVS does not tunnel to this real, nor does xlb")
	}
	s.reals = append(s.reals, r)
	return nil
}

// option reads one real-server option opt (and its value val, when it
// takes one: takes reports that) into r; --tun-type goes to *tun, to be
// applied once the method (-i) is known.
func (r *ipvsReal) option(opt, val string, tun *string) (takes bool, err error) {
	switch opt {
	case "-r":
		r.addr, err = parseRealAddr(val)
		return true, err
	case "-g", "-i", "-m":
		r.method = map[string]string{"-g": "dr", "-i": "ipip", "-m": "nat"}[opt]
	case "-w":
		w, err := strconv.ParseUint(val, 10, 31)
		if err != nil {
			return true, fmt.Errorf("-w %s: not a weight 0..65535", val)
		}
		if w > config.MaxWeight {
			return true, fmt.Errorf("-w %s: not a weight 0..65535 (xlb's range; IPVS's goes to 2147483647): divide the service's weights by a common factor first", val)
		}
		r.weight = val
		return true, nil
	case "-x", "-y":
		t, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return true, fmt.Errorf("%s %s: not a connection threshold", opt, val)
		}
		if t != 0 { // 0 is IPVS's "no threshold", which is xlb's way too
			r.notes = append(r.notes, fmt.Sprintf("ipvsadm %s %s: connection thresholds have no xlb equivalent (a backend takes new flows until drained or down)", opt, val))
		}
		return true, nil
	case "--tun-type":
		if val != "ipip" && val != "gre" && val != "gue" {
			return true, fmt.Errorf("--tun-type %s: not ipip, gre or gue", val)
		}
		*tun = val
		return true, nil
	case "--tun-port":
		p, err := strconv.ParseUint(val, 10, 16)
		if err != nil || p == 0 {
			return true, fmt.Errorf("--tun-port %s: not a UDP port", val)
		}
		r.notes = append(r.notes, fmt.Sprintf("ipvsadm --tun-port %s: xlb sends GUE to node.gue_port, one port for all backends (default %d): set node.gue_port: %s", val, config.DefaultGUEPort, val))
		return true, nil
	case "-6": // an IPv6 firewall-mark service's name, as on its -A line
	case "--tun-nocsum": // xlb's tunnels carry no checksum either
	case "--tun-csum", "--tun-remcsum":
		r.notes = append(r.notes, "ipvsadm "+opt+": xlb's tunnels carry no checksum (IPVS's --tun-nocsum); the backend takes them as they are")
	default:
		return false, fmt.Errorf("real server option %s is not known", opt)
	}
	return false, nil
}

// parseRealAddr reads -r's ADDR, ADDR:PORT or [V6]:PORT.
func parseRealAddr(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("-r %s: not an address", s)
	}
	return netip.AddrPortFrom(a, 0), nil
}

// name is the service's and its pool's name in the config.
func (s *ipvsService) name() string {
	if s.proto == "fwmark" {
		return "fwm" + strconv.FormatUint(uint64(s.mark), 10)
	}
	a := strings.ReplaceAll(s.addr.Addr().String(), ":", "-")
	return fmt.Sprintf("%s_%s_%d", s.proto, a, s.addr.Port())
}

// schedLine is the scheduler key, or a comment when xlb has none.
func (s *ipvsService) schedLine() (key string, notes []string) {
	name := s.sched
	if name == "mh" {
		name = "maglev-source" // IPVS mh: Maglev on the source address
	}
	if _, ok := config.ParseScheduler(name); !ok {
		return "maglev", []string{"ipvsadm -s " + s.sched + ": no xlb equivalent; maglev instead"}
	}
	return name, nil
}

// persistenceLine is the persistence mapping, or "" without -p.
func (s *ipvsService) persistenceLine(v6 bool) (string, []string) {
	if s.persist == "" {
		if s.netmask != "" {
			return "", []string{"ipvsadm -M " + s.netmask + " without -p: no effect in IPVS either"}
		}
		return "", nil
	}
	parts := []string{"timeout: " + s.persist + "s"}
	var notes []string
	if s.netmask != "" {
		plen, err := prefixOf(s.netmask, v6)
		if err != nil {
			notes = append(notes, "ipvsadm -M "+s.netmask+": "+err.Error()+"; not imported")
		} else if key := map[bool]string{false: "netmask", true: "netmask6"}[v6]; (v6 && plen != 128) || (!v6 && plen != 32) {
			parts = append(parts, fmt.Sprintf("%s: %d", key, plen))
		}
	}
	if s.proto == "fwmark" {
		parts = append(parts, "group: "+s.name())
	}
	return "persistence: {" + strings.Join(parts, ", ") + "}", notes
}

// prefixOf turns -M (a dotted IPv4 mask or a prefix length) into a
// prefix length.
func prefixOf(m string, v6 bool) (int, error) {
	if n, err := strconv.Atoi(m); err == nil {
		if n < 1 || (!v6 && n > 32) || n > 128 {
			return 0, fmt.Errorf("prefix length out of range")
		}
		return n, nil
	}
	a, err := netip.ParseAddr(m)
	if err != nil || !a.Is4() {
		return 0, fmt.Errorf("not a netmask")
	}
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	ones := 0
	for v&(1<<31) != 0 {
		ones++
		v <<= 1
	}
	if v != 0 || ones == 0 {
		return 0, fmt.Errorf("not a contiguous netmask")
	}
	if v6 {
		return 0, fmt.Errorf("a dotted mask on an IPv6 service")
	}
	return ones, nil
}

func comments(b *strings.Builder, indent string, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(b, "%s# %s\n", indent, n)
	}
}

func renderIPVS(svcs []*ipvsService) string {
	var b strings.Builder
	b.WriteString("# Imported from ipvsadm rules by xlbctl import ipvsadm. Add a node: section.\n")
	if len(svcs) == 0 {
		return b.String() + "# (no services)\n"
	}
	b.WriteString("pools:\n")
	for _, s := range svcs {
		fmt.Fprintf(&b, "  %s:\n", s.name())
		if len(s.reals) == 0 {
			b.WriteString("    # no real servers in the rules: add backends\n    backends: []\n")
			continue
		}
		b.WriteString("    backends:\n")
		for _, r := range s.reals {
			line, notes := s.backendLine(r)
			comments(&b, "      ", append(r.notes, notes...))
			b.WriteString("      " + line + "\n")
		}
	}
	header := false
	for _, s := range svcs {
		if s.proto != "fwmark" && !header {
			b.WriteString("services:\n")
			header = true
		}
		renderIPVSService(&b, s)
	}
	return b.String()
}

// backendLine is real r of s as a backend of its pool, with the notes
// on its port. IPVS rewrites the destination port to the real's only
// under masquerading (-m), and only where the packet's port is the
// service's: always on a service with a port, never on a persistent
// all-ports or persistent firewall-mark service (the packet's port is
// kept), on each packet of a non-persistent firewall-mark service.
// method nat's port: is that rewrite.
func (s *ipvsService) backendLine(r ipvsReal) (string, []string) {
	line := fmt.Sprintf("- {address: %s, weight: %s, method: %s", r.addr.Addr(), r.weight, r.method)
	port := r.addr.Port()
	if port == 0 || port == s.addr.Port() {
		return line + "}", nil
	}
	switch {
	case r.method != "nat":
		return line + "}", []string{fmt.Sprintf("ipvsadm -r %s without -m: IPVS keeps the service's port (only -m rewrites it), as xlb does", r.addr)}
	case s.persist != "" && (s.proto == "fwmark" || s.addr.Port() == 0):
		return line + "}", []string{fmt.Sprintf("ipvsadm -r %s -m: a persistent %s keeps each packet's port, as xlb does without port:",
			r.addr, map[bool]string{true: "firewall-mark service", false: "all-ports service"}[s.proto == "fwmark"])}
	case s.proto != "fwmark" && s.addr.Port() == 0:
		// IPVS needs -p for port 0; without it this rule was not loadable.
		return line + "}", []string{fmt.Sprintf("ipvsadm -r %s -m on an all-ports service without -p: IPVS refuses port 0 without persistence; port not imported", r.addr)}
	}
	return fmt.Sprintf("%s, port: %d}", line, port), nil
}

func renderIPVSService(b *strings.Builder, s *ipvsService) {
	sched, notes := s.schedLine()
	pers, pnotes := s.persistenceLine(s.addr.Addr().Is6())
	notes = append(append(notes, s.notes...), pnotes...)
	indent := "  "
	if s.proto == "fwmark" {
		// The marks come from iptables/nftables rules ipvsadm does not
		// show: the services are the operator's to write.
		indent = "  # "
		fmt.Fprintf(b, "  # ipvsadm -A -f %d (line %d): a firewall-mark service. Its packets are chosen by\n"+
			"  # firewall rules that ipvsadm does not show. Write one service per VIP, port and\n"+
			"  # protocol those rules mark %d, each as below: the persistence group makes them\n"+
			"  # share templates as the mark did.\n", s.mark, s.line, s.mark)
	}
	comments(b, "  ", notes)
	vip, port, proto := s.addr.Addr().String(), strconv.Itoa(int(s.addr.Port())), s.proto
	if s.proto == "fwmark" {
		vip, port, proto = "VIP", "PORT", "tcp"
	}
	fmt.Fprintf(b, "%s- name: %s\n", indent, s.name())
	fmt.Fprintf(b, "%s  vip: %s\n%s  port: %s\n%s  protocol: %s\n", indent, vip, indent, port, indent, proto)
	fmt.Fprintf(b, "%s  pools: [%s]\n%s  scheduler: %s\n", indent, s.name(), indent, sched)
	if pers != "" {
		fmt.Fprintf(b, "%s  %s\n", indent, pers)
	}
}

// importCmd is `xlbctl import ipvsadm [FILE|-]`.
func (c *CLI) importCmd(_ context.Context, args []string) error {
	fs := c.flags("import")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) < 1 || rest[0] != "ipvsadm" || len(rest) > 2 {
		return usagef("usage: xlbctl import ipvsadm [FILE|-]  (the output of ipvsadm-save -n or ipvsadm -Sn)")
	}
	in, name := io.Reader(os.Stdin), "stdin"
	if len(rest) == 2 && rest[1] != "-" {
		f, err := os.Open(rest[1])
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, rest[1]
	}
	out, err := ImportIPVSadm(in, name)
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.Out, out)
	return err
}
