// Command xlbctl inspects a running xlb instance. For now it reads the
// pinned maps directly (the gRPC API comes later): `xlbctl services` lists
// VIPs and their backends with counters, ipvsadm style; `xlbctl stats`
// prints the global counters. `-o json` prints JSON.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/xlbproject/xlb/internal/datapath"
)

func main() {
	fs := flag.NewFlagSet("xlbctl", flag.ExitOnError)
	node := fs.String("node", "", "instance (node.name in the config); needed when several run")
	pinDir := fs.String("pin-dir", "", "bpffs directory of the instance (overrides --node)")
	out := fs.String("o", "table", "output: table | json")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: xlbctl [--node NAME | --pin-dir DIR] [-o json] services | stats")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	dir, err := instanceDir(*pinDir, *node)
	if err == nil {
		err = runCmd(fs.Arg(0), dir, *out == "json")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "xlbctl: %v\n", err)
		os.Exit(1)
	}
}

func instanceDir(pinDir, node string) (string, error) {
	if pinDir != "" {
		return pinDir, nil
	}
	if node != "" {
		return filepath.Join(datapath.BPFFSRoot, node), nil
	}
	entries, err := os.ReadDir(datapath.BPFFSRoot)
	if err != nil || len(entries) == 0 {
		return "", fmt.Errorf("no xlb instance under %s (is xlbd running?)", datapath.BPFFSRoot)
	}
	if len(entries) > 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return "", fmt.Errorf("several instances (%v): choose one with --node", names)
	}
	return filepath.Join(datapath.BPFFSRoot, entries[0].Name()), nil
}

func runCmd(cmd, dir string, asJSON bool) error {
	p, err := datapath.OpenPinned(dir)
	if err != nil {
		return err
	}
	defer p.Close()
	switch cmd {
	case "services":
		svcs, err := p.Services()
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(svcs)
		}
		w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(w, "Prot\tVIP:Port\tM\tEncap\tPackets\tBytes\tNewFlows")
		fmt.Fprintln(w, "  ->\tBackend\tActive\t\tPackets\tBytes\tNewFlows")
		for _, s := range svcs {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d\t%d\n", proto(s.Key.Proto), addrPort(s), s.TableSize, encap(s.Encap),
				s.Counters.Packets, s.Counters.Bytes, s.Counters.NewFlows)
			for _, r := range s.Reals {
				fmt.Fprintf(w, "  ->\t%s\t%v\t\t%d\t%d\t%d\n", r.Real.Addr, r.Real.Active,
					r.Counters.Packets, r.Counters.Bytes, r.Counters.NewFlows)
			}
		}
		return w.Flush()
	case "stats":
		st, err := p.Stats()
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(st)
		}
		names := datapath.StatNames()
		w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
		for _, n := range slices.Clone(names) {
			fmt.Fprintf(w, "%s\t%d\n", n, st[n])
		}
		return w.Flush()
	}
	return fmt.Errorf("unknown command %q (services | stats)", cmd)
}

func proto(p uint8) string {
	switch p {
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	}
	return fmt.Sprint(p)
}

func encap(e datapath.Encap) string {
	switch e {
	case datapath.EncapGRE:
		return "gre"
	case datapath.EncapIPIP:
		return "ipip"
	}
	return "-"
}

func addrPort(s datapath.ServiceView) string {
	a := s.Key.Addr.String()
	if s.Key.Addr.Is6() {
		a = "[" + a + "]"
	}
	if s.Key.Port == 0 {
		return a + ":*"
	}
	return fmt.Sprintf("%s:%d", a, s.Key.Port)
}
