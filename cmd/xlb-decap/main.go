// Command xlb-decap strips xlb's GRE, IPIP and GUE encapsulation on a backend
// whose kernel has no tunnel modules, with an XDP program that stays
// attached after the command exits (see docs/DECAP.md):
//
//	xlb-decap attach IFACE [--mode auto|native|generic] [--gue-port PORT]
//	xlb-decap detach IFACE
//	xlb-decap status IFACE [-o text|json]
//	xlb-decap sync IFACE
//	xlb-decap follow IFACE
//	xlb-decap prune
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cilium/ebpf/rlimit"

	"github.com/xlbproject/xlb/internal/decap"
	"github.com/xlbproject/xlb/internal/version"
)

const usage = `usage:
  xlb-decap attach IFACE [--mode auto|native|generic] [--gue-port PORT]
        load the decapsulator, attach it to IFACE and pin it (it stays
        attached after this command exits); auto tries native XDP first;
        GUE is stripped from UDP to PORT (default 6080, xlbd's
        node.gue_port; 0: none)
  xlb-decap detach IFACE
        detach it and remove its pins
  xlb-decap status IFACE [-o text|json]
        attachment, mode, local addresses and counters
  xlb-decap sync IFACE
        reload this host's addresses into the program (after they change)
  xlb-decap follow IFACE
        sync, then keep syncing whenever an address is added or removed
        (netlink), until SIGTERM or SIGINT; the unit runs this
  xlb-decap prune
        remove the pins of attachments whose interface or namespace is gone
  xlb-decap --version
        the version (git describe) and the kernel's tag of the embedded
        program (read back after loading it; needs root)
`

// usageError is a command-line mistake: exit status 2 and the usage text.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, nil)))
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// make this a no-op.
	if err := rlimit.RemoveMemlock(); err != nil {
		slog.Debug("raise memlock limit", "error", err)
	}
	err := dispatch(args, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "xlb-decap: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "xlb-decap: %v\n", err)
		return 1
	}
}

// dispatch runs the command that args (the arguments after the program's
// name) give, writing what it reports to stdout.
func dispatch(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("missing command")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mode := fs.String("mode", "auto", "")
	output := fs.String("o", "text", "")
	guePort := fs.Uint("gue-port", decap.DefaultGUEPort, "")

	switch cmd {
	case "attach", "detach", "status", "sync", "follow":
	case "prune":
		if len(args) != 0 {
			return usagef("prune takes no arguments")
		}
		removed, err := decap.Prune()
		for _, d := range removed {
			fmt.Fprintf(stdout, "removed %s\n", d)
		}
		return err
	case "help", "-h", "--help":
		return flag.ErrHelp
	case "version", "--version":
		version.Print(stdout, "xlb-decap", decap.ProgramTags()...)
		return nil
	default:
		return usagef("unknown command %q", cmd)
	}
	iface, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if (cmd != "attach" && (isSet(fs, "mode") || isSet(fs, "gue-port"))) || (cmd != "status" && isSet(fs, "o")) {
		return usagef("%s takes no such option", cmd)
	}

	switch cmd {
	case "attach":
		return attach(stdout, iface, *mode, *guePort)
	case "detach":
		if err := decap.Detach(iface); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "detached from %s\n", iface)
		return nil
	case "sync":
		addrs, err := decap.SyncLocalAddrs(iface)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d local addresses: %v\n", len(addrs), addrs)
		return nil
	case "follow":
		return follow(stdout, iface)
	default:
		return status(stdout, iface, *output)
	}
}

// attach answers `attach IFACE`: the program on iface in mode, stripping
// GUE on guePort.
func attach(stdout io.Writer, iface, mode string, guePort uint) error {
	m, err := decap.ParseMode(mode)
	if err != nil {
		return usagef("%v", err)
	}
	if guePort > 65535 {
		return usagef("--gue-port %d is not a UDP port (0: strip no GUE)", guePort)
	}
	if err := checkKernel(); err != nil {
		return err
	}
	if err := decap.AttachGUE(iface, m, uint16(guePort)); err != nil {
		return err
	}
	st, err := decap.Status(iface)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "attached to %s (%s), %d local addresses\n", iface, st.Mode, len(st.LocalAddrs))
	return nil
}

// follow answers `follow IFACE`: it keeps the attachment's addresses in
// step with the host's until SIGTERM or SIGINT.
func follow(stdout io.Writer, iface string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return decap.Follow(ctx, iface, func(addrs []netip.Addr) {
		fmt.Fprintf(stdout, "%d local addresses: %v\n", len(addrs), addrs)
	})
}

// status answers `status IFACE` in output format text or json.
func status(stdout io.Writer, iface, output string) error {
	if output != "text" && output != "json" {
		return usagef("-o %s (want text or json)", output)
	}
	st, err := decap.Status(iface)
	if err != nil {
		return err
	}
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, st)
	return nil
}

// parseArgs accepts the interface before or after the options.
func parseArgs(fs *flag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", usagef("%v", err)
	}
	if fs.NArg() == 0 {
		return "", usagef("%s needs an interface", fs.Name())
	}
	iface := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", usagef("%v", err)
	}
	if fs.NArg() != 0 {
		return "", usagef("unexpected %q", strings.Join(fs.Args(), " "))
	}
	return iface, nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func printStatus(w io.Writer, st decap.State) {
	if !st.Pinned {
		fmt.Fprintf(w, "%s: not attached\n", st.Interface)
		return
	}
	state := fmt.Sprintf("attached (%s), program %d", st.Mode, st.ProgramID)
	if !st.Attached {
		state = "pinned but no longer attached (interface gone?): run 'xlb-decap prune'"
	}
	fmt.Fprintf(w, "%s: %s\n", st.Interface, state)
	fmt.Fprintf(w, "pins: %s\n", st.PinDir)
	fmt.Fprintf(w, "local addresses: %v\n", st.LocalAddrs)
	fmt.Fprintf(w, "%-22s %14s %16s\n", "counter", "packets", "bytes")
	for _, c := range st.Counters {
		fmt.Fprintf(w, "%-22s %14d %16d\n", c.Name, c.Packets, c.Bytes)
	}
}
