// Package ctl is xlbctl: a thin client of xlbd's gRPC API (internal/api)
// that prints ipvsadm-like tables, or the API's messages as JSON with
// `-o json` (the proto3 JSON mapping, snake_case names; 64-bit integers
// are strings there).
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/xlbproject/xlb/internal/api"
)

// Usage is the command summary.
const Usage = `usage: xlbctl [--node NAME | -s/--socket PATH | --addr HOST:PORT --tls-cert F --tls-key F --tls-ca F] [-o table|json] COMMAND

xlbd's socket: --node NAME is /run/xlb/NAME.sock (the default of the
instance with that node.name); with neither --node nor --socket, the one
socket in /run/xlb when exactly one xlbd runs.

commands:
  status                                 node, forwarder, self-check, BGP sessions, config
  services [--service NAME] [--rate]     VIPs with their backends (ipvsadm -L style)
  services --ipvsadm [--service NAME]    the same in ipvsadm -Ln's layout: scheduler, persistence, weights, connections
  backends [--service NAME] [--rate]     every (service, backend), flat, with health
  stats [--watch [--interval 1s]]        global, per-service and per-backend counters; --watch: rates
  apply -f FILE [--dry-run] [--reset-overrides]
                                         validate, show the diff, commit atomically
  drain ADDR [--service NAME]            no new flows to ADDR; tracked flows continue
  undrain ADDR [--service NAME]
  weight ADDR N [--service NAME]         set ADDR's weight (0..65535)
  reset ADDR [--service NAME]            drop ADDR's runtime overrides: back to the config
  conntrack [--service S] [--backend B] [--state syn|established|closing] [--limit N] [--expired] [--templates]
  explain SRC:PORT DST:PORT tcp|udp [--flags S] [--hex]
                                         run a crafted packet through the live program
  node drain | node undrain              BGP graceful shutdown then withdraw / announce again
  trace --vip ADDR:PORT [--proto tcp|udp] [--src ADDR[:PORT]] [--count N [--interval D]] [--listen ADDR[:PORT]]
                                         send marked packets to a VIP and print the record
                                         of every node that forwarded one (--timeout: wait after
                                         the last packet, default 3s)
  import ipvsadm [FILE|-]                pools and services of an xlb config from ipvsadm-save -n
                                         (or ipvsadm -Sn) text; unmatched features as comments

Drain, undrain and weight are runtime overrides on top of the config: they
survive reloads, 'apply' and xlbd restarts and upgrades (kept in the pin
directory), and end with 'reset', 'apply --reset-overrides' or the backend
leaving the config.
`

// CLI runs xlbctl commands. The zero value is not usable: see New.
type CLI struct {
	Out, Err io.Writer
	// Now is the clock for "ago" columns (time.Now).
	Now func() time.Time
	// Sleep waits between --watch samples (a timer honouring ctx).
	Sleep func(ctx context.Context, d time.Duration) error

	// Global flags.
	dial     api.DialOptions
	nodeName string
	output   string
	timeout  time.Duration

	client *api.Client
}

// New returns a CLI writing to out and errOut.
func New(out, errOut io.Writer) *CLI {
	return &CLI{Out: out, Err: errOut, Now: time.Now, Sleep: sleep}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errUsage marks errors that exit 2; errNoCommand prints the usage.
var (
	errUsage     = errors.New("usage")
	errNoCommand = fmt.Errorf("%w: no command", errUsage)
)

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// globalFlags registers the connection and output flags on fs, so they are
// accepted before and after the command.
func (c *CLI) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.dial.Socket, "socket", c.dial.Socket, "xlbd's unix socket")
	fs.StringVar(&c.dial.Socket, "s", c.dial.Socket, "xlbd's unix socket (short for --socket)")
	fs.StringVar(&c.nodeName, "node", c.nodeName, "the xlbd instance of this node.name (its socket "+api.SocketDir+"/NAME.sock)")
	fs.StringVar(&c.dial.TCP, "addr", c.dial.TCP, "xlbd's TCP address (host:port; needs --tls-*)")
	fs.StringVar(&c.dial.TLS.Cert, "tls-cert", c.dial.TLS.Cert, "client certificate (PEM) for --addr")
	fs.StringVar(&c.dial.TLS.Key, "tls-key", c.dial.TLS.Key, "client key (PEM) for --addr")
	fs.StringVar(&c.dial.TLS.CA, "tls-ca", c.dial.TLS.CA, "CA of xlbd's certificate (PEM) for --addr")
	fs.StringVar(&c.dial.ServerName, "tls-server-name", c.dial.ServerName, "name in xlbd's certificate (default: the host of --addr)")
	fs.StringVar(&c.output, "o", c.output, "output: table | json")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "deadline of each call (default 30s; trace: how long to wait for records, default 3s)")
}

// parse parses args with fs, flags and positional arguments in any order
// ("drain 10.0.0.1 --service web"), and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// Run executes one command line (without the program name) and returns
// the exit status: 0, 1 for a failure, 2 for a usage error.
func (c *CLI) Run(ctx context.Context, args []string) int {
	c.output = "table"
	top := flag.NewFlagSet("xlbctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	c.globalFlags(top)
	err := top.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.Out, Usage)
		return 0
	}
	if err == nil {
		err = c.command(ctx, top.Args())
	}
	if c.client != nil {
		c.client.Close()
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(c.Out, Usage)
		return 0
	case errors.Is(err, errReported):
		return 1
	case errors.Is(err, errNoCommand):
		fmt.Fprint(c.Err, Usage)
		return 2
	case errors.Is(err, errUsage):
		fmt.Fprintf(c.Err, "xlbctl: %s ('xlbctl help' lists the commands)\n", strings.TrimPrefix(err.Error(), "usage: "))
		return 2
	}
	fmt.Fprintf(c.Err, "xlbctl: %s\n", message(err))
	return 1
}

// message is the text of err: a gRPC status's message without the
// "rpc error: code = ..." wrapping.
func message(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// connect dials xlbd on first use.
func (c *CLI) connect() (*api.Client, error) {
	if err := c.checkOutput(); err != nil {
		return nil, err
	}
	if c.client != nil {
		return c.client, nil
	}
	if err := c.resolveSocket(); err != nil {
		return nil, err
	}
	cl, err := api.Dial(c.dial)
	if err != nil {
		return nil, err
	}
	c.client = cl
	return cl, nil
}

// resolveSocket sets the socket to dial from --node, or finds the only
// instance's, unless --socket or --addr says where xlbd is.
func (c *CLI) resolveSocket() error {
	n := 0
	for _, set := range []bool{c.dial.TCP != "", c.dial.Socket != "", c.nodeName != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return usagef("--node, --socket and --addr are exclusive")
	case c.nodeName != "":
		c.dial.Socket = api.SocketPath(c.nodeName)
	case n == 0:
		s, err := api.FindSocket(api.SocketDir)
		if err != nil {
			return err
		}
		c.dial.Socket = s
	}
	return nil
}

// DefaultCallTimeout bounds an RPC when --timeout is not given.
const DefaultCallTimeout = 30 * time.Second

// call bounds one RPC by --timeout.
func (c *CLI) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout == 0 {
		return context.WithTimeout(ctx, DefaultCallTimeout)
	}
	return context.WithTimeout(ctx, c.timeout)
}

func (c *CLI) json() bool { return c.output == "json" }

// commands maps names to their runners.
func (c *CLI) commands() map[string]func(context.Context, []string) error {
	return map[string]func(context.Context, []string) error{
		"status":    c.status,
		"services":  c.services,
		"backends":  c.backends,
		"stats":     c.stats,
		"apply":     c.apply,
		"drain":     c.setBackend("drain"),
		"undrain":   c.setBackend("undrain"),
		"weight":    c.setBackend("weight"),
		"reset":     c.setBackend("reset"),
		"conntrack": c.conntrack,
		"explain":   c.explain,
		"node":      c.node,
		"trace":     c.trace,
		"import":    c.importCmd,
		"help":      func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (c *CLI) command(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errNoCommand
	}
	run, ok := c.commands()[args[0]]
	if !ok {
		return usagef("unknown command %q", args[0])
	}
	return run(ctx, args[1:])
}

// flags returns a FlagSet for command name with the global flags.
func (c *CLI) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.globalFlags(fs)
	return fs
}

// checkOutput validates -o before any call is made.
func (c *CLI) checkOutput() error {
	if c.output != "table" && c.output != "json" {
		return usagef("-o %q: table or json", c.output)
	}
	return nil
}

// Main is xlbctl's main: it runs os.Args and exits.
func Main() {
	ctx, cancel := signalContext()
	code := New(os.Stdout, os.Stderr).Run(ctx, os.Args[1:])
	cancel()
	os.Exit(code)
}
