package clusterconfig

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	loc, err := ParseURL("etcd://10.0.0.1:2379,[fd00::1]:2379/xlb/config")
	if err != nil || len(loc.Endpoints) != 2 || loc.Endpoints[1] != "[fd00::1]:2379" || loc.Key != "/xlb/config" ||
		loc.StatusPrefix() != "/xlb/config/status/" || loc.String() != "etcd://10.0.0.1:2379,[fd00::1]:2379/xlb/config" {
		t.Fatalf("%+v %v", loc, err)
	}
	for _, bad := range []string{"etcd://", "etcd://h:1", "etcd:///k", "etcd://h/k", "etcd://h:1,/k", "file.yaml"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestComposeSections(t *testing.T) {
	node := []byte("node:\n  name: n1\n  interface: lo\n  address: 10.0.0.11\n")
	cfg, err := Compose(node, "n1.yaml", []byte(cluster4), "etcd:/k")
	if err != nil || cfg.Node.Name != "n1" || len(cfg.Services) != 1 {
		t.Fatalf("%v %+v", err, cfg)
	}
	for _, c := range []struct {
		node, cluster, want string
	}{
		{string(node) + "services: []\n", cluster4, "n1.yaml:5: services: a node file holds node and bgp only"},
		{string(node), "node:\n  name: x\n" + cluster4, "etcd:/k:1: node: the cluster config holds health_checks, pools, services only"},
		{string(node), badDoc, "etcd:/k:4: pools.web.backends[0].address"},
		{"node:\n  name: n1\n  interface: lo\n  address: 10.0.0.300\n", cluster4, "n1.yaml:4: node.address"},
	} {
		_, err := Compose([]byte(c.node), "n1.yaml", []byte(c.cluster), "etcd:/k")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

const (
	cluster4 = "pools:\n  web:\n    backends:\n      - {address: 10.0.1.1, weight: 1}\n      - {address: 10.0.1.2, weight: 1}\n" +
		"services:\n  - {name: web, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [web]}\n"
	badDoc = "pools:\n  web:\n    backends:\n      - {address: 10.0.1.300, weight: 1}\n" +
		"services:\n  - {name: web, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [web]}\n"
)

// For the external tests (source_test.go).
var Cluster4, BadDoc = cluster4, badDoc
