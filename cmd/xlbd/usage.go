package main

import (
	"flag"
	"fmt"
)

// usageText heads `xlbd -h` (and so the man page made from it).
const usageText = `usage: xlbd [--config FILE] [flags]
       xlbd --check-config FILE | --check-kernel | --version | --cleanup --config FILE

The xlb daemon: loads, pins and attaches the XDP forwarder to
node.interface, commits the config to it, health-checks the backends,
announces the VIPs over BGP, and serves the gRPC API (xlbctl) and the
Prometheus metrics. Before touching the data plane it checks that the
kernel has every feature xlb needs (Linux 5.18 or later).

signals:
  SIGHUP    reload the config file (a rejected config changes nothing)
  SIGUSR1   drain the node (BGP graceful shutdown, then withdraw)
  SIGUSR2   undrain the node
  SIGTERM   stop; the pinned forwarder keeps forwarding on the last
            committed state and the next xlbd adopts it

files:
  /etc/xlb/xlb.yaml           the config (a config applied through the API is saved here)
  /run/xlb/<node.name>.sock   the API socket (0600)
  /sys/fs/bpf/xlb/<node.name> the pinned program link and maps

flags:
`

func init() {
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usageText)
		flag.PrintDefaults()
	}
}
