package config

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Marshal returns c as a configuration file from which Parse builds a Config
// equal to c. Every field is written out, defaults included, in file order
// for pools and services. Marshal does not validate c; the result of an
// invalid Config may be rejected by Parse.
func (c *Config) Marshal() ([]byte, error) {
	n := c.Node
	timeouts := mapping(
		"tcp", str(formatDuration(n.Timeouts.TCP)),
		"tcp_syn", str(formatDuration(n.Timeouts.TCPSyn)),
		"tcp_fin", str(formatDuration(n.Timeouts.TCPFin)),
		"udp", str(formatDuration(n.Timeouts.UDP)),
	)
	node := mapping("name", str(n.Name), "interface", str(n.Interface))
	if n.APISocket != "" {
		node.Content = append(node.Content, str("api_socket"), str(n.APISocket))
	}
	if n.MetricsAddr != "" {
		node.Content = append(node.Content, str("metrics_addr"), str(n.MetricsAddr))
	}
	if n.StatusPage {
		node.Content = append(node.Content, str("status_page"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
	if n.Address.IsValid() {
		node.Content = append(node.Content, str("address"), str(n.Address.String()))
	}
	if n.Address6.IsValid() {
		node.Content = append(node.Content, str("address6"), str(n.Address6.String()))
	}
	if n.GatewayMAC != nil {
		node.Content = append(node.Content, str("gateway_mac"), str(n.GatewayMAC.String()))
	}
	node.Content = append(node.Content,
		str("xdp_mode"), str(n.XDPMode.String()),
		str("conntrack_entries"), integer(uint64(n.ConntrackEntries)),
		str("timeouts"), timeouts,
	)
	if n.FloodSynRate != 0 {
		node.Content = append(node.Content, str("flood_syn_rate"), integer(uint64(n.FloodSynRate)))
	}
	if n.FloodNewFlowRate != 0 {
		node.Content = append(node.Content, str("flood_new_flow_rate"), integer(uint64(n.FloodNewFlowRate)))
	}
	// Always written: absent means the default, not 0.
	node.Content = append(node.Content, str("icmp_echo_rate"), integer(uint64(n.ICMPEchoRate)),
		str("icmp_too_big_rate"), integer(uint64(n.ICMPTooBigRate)))
	if len(n.FragmentPool) > 0 {
		addrs := make([]string, len(n.FragmentPool))
		for i, a := range n.FragmentPool {
			addrs[i] = a.String()
		}
		node.Content = append(node.Content, str("fragment_pool"), list(addrs))
	}
	node.Content = append(node.Content, str("fragment_table_entries"), integer(uint64(n.FragmentTableEntries)))
	node.Content = append(node.Content, str("trace_rate"), integer(uint64(n.TraceRate)))
	if n.Sync != nil {
		node.Content = append(node.Content, str("sync"), n.Sync.marshal()) // sync.go
	}
	node.Content = append(node.Content, str("gue_port"), integer(uint64(n.GUEPort)))

	pools := mapping()
	for _, p := range c.Pools {
		pool := mapping()
		if len(p.Backends) > 0 || len(p.Include) == 0 {
			backends := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for _, b := range p.Backends {
				bn := mapping("address", str(b.Addr.String()), "weight", integer(uint64(b.Weight)))
				if b.Encap != EncapUnset {
					bn.Content = append(bn.Content, str("method"), str(b.Encap.String()))
				}
				if b.Port != 0 {
					bn.Content = append(bn.Content, str("port"), integer(uint64(b.Port)))
				}
				if b.Drain {
					bn.Content = append(bn.Content, str("state"), str("drain"))
				}
				if b.HealthCheck != "" {
					bn.Content = append(bn.Content, str("health_check"), str(b.HealthCheck))
				}
				bn.Style = yaml.FlowStyle
				backends.Content = append(backends.Content, bn)
			}
			pool.Content = append(pool.Content, str("backends"), backends)
		}
		if len(p.Include) > 0 {
			pool.Content = append(pool.Content, str("include"), list(p.Include))
		}
		if p.HealthCheck != "" {
			pool.Content = append(pool.Content, str("health_check"), str(p.HealthCheck))
		}
		pools.Content = append(pools.Content, str(p.Name), pool)
	}

	services := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, s := range c.Services {
		services.Content = append(services.Content, mapping(
			"name", str(s.Name),
			"vip", str(s.VIP.String()),
			"port", integer(uint64(s.Port)),
			"protocol", str(s.Proto.String()),
			"pools", list(s.Pools),
			"scheduler", str(s.Scheduler.String()),
			"table_size", integer(uint64(s.TableSize)),
			"method", str(s.Encap.String()),
			"min_healthy", float(s.MinHealthy),
			"withdraw_when_down", boolean(s.WithdrawWhenDown),
			"fragments", boolean(s.Fragments),
		))
	}

	doc := mapping("node", node)
	if len(c.HealthChecks) > 0 {
		checks := mapping()
		for i := range c.HealthChecks {
			checks.Content = append(checks.Content, str(c.HealthChecks[i].Name), checkNode(&c.HealthChecks[i]))
		}
		doc.Content = append(doc.Content, str("health_checks"), checks)
	}
	if len(c.Pools) > 0 {
		doc.Content = append(doc.Content, str("pools"), pools)
	}
	if len(c.Services) > 0 {
		doc.Content = append(doc.Content, str("services"), services)
	}
	if c.BGP != nil {
		doc.Content = append(doc.Content, str("bgp"), bgpNode(c.BGP))
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc}}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func integer(v uint64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(v, 10)}
}

func boolean(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// float writes v with the fewest digits that read back as v.
func float(v float64) *yaml.Node {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: s}
}

// bytesNode writes b as a string when it is valid UTF-8 and as !!binary
// (base64) otherwise.
func bytesNode(b []byte) *yaml.Node {
	if utf8.Valid(b) {
		return str(string(b))
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!binary", Value: base64.StdEncoding.EncodeToString(b)}
}

func list(items []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
	for _, s := range items {
		n.Content = append(n.Content, str(s))
	}
	return n
}

// mapping builds a mapping node from alternating keys and value nodes.
func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Content = append(n.Content, str(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}
