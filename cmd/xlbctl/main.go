// Command xlbctl is the operator's client of xlbd's control API (gRPC on
// /run/xlb/<node.name>.sock, or TCP with mutual TLS): status, services and
// backends in ipvsadm-like tables, counters with rates, config apply with a
// dry-run diff, backend drain and weight overrides, conntrack dump, packet
// explain, node drain. `-o json` prints the API's messages. The commands
// live in internal/ctl; `xlbctl help` lists them.
package main

import "github.com/xlbproject/xlb/internal/ctl"

func main() { ctl.Main() }
