// Command xlbctl is the operator's client of xlbd's control API (gRPC on
// /run/xlb/<node.name>.sock, or TCP with mutual TLS): status, services and
// backends in ipvsadm-like tables, counters with rates, config apply with a
// dry-run diff, backend drain and weight overrides, conntrack dump, packet
// explain, node drain. `-o json` prints the API's messages. The commands
// live in internal/ctl; `xlbctl help` lists them. `xlbctl --version`
// prints its own version (the running xlbd's is in `xlbctl status`).
package main

import (
	"fmt"
	"os"

	"github.com/xlbproject/xlb/internal/ctl"
	"github.com/xlbproject/xlb/internal/version"
)

const versionHelp = `
xlbctl --version prints this build's version (git describe); xlbctl embeds
no BPF program ('xlbctl status' shows the running xlbd's version).
`

func main() {
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case "--version", "version":
			version.Print(os.Stdout, "xlbctl")
			return
		case "help", "-h", "--help":
			fmt.Print(ctl.Usage + versionHelp)
			return
		}
	}
	ctl.Main()
}
