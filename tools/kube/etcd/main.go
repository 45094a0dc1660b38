// Command etcd is etcd's server, built from its Go module for the tests
// that run against a real API server (scripts/kube-bin.sh builds it): the
// API server needs an etcd newer than the distributions ship.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
