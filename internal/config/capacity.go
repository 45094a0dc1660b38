package config

// checkCapacity reports a node.max_services or node.max_backends smaller
// than the config's services need. Both are read at start and size the
// data plane's maps: raising one needs a restart (xlbd refuses the reload).
func checkCapacity(n *Node, services, pairs int, c *collector) {
	if m := n.MaxServices; m != 0 && services > int(m) {
		c.errf(join(kNode, kMaxServices), ErrInvalid,
			"%d is less than the %d services of the config: raise it (at most %d; read at start)", m, services, MaxMaxServices)
	}
	if m := n.MaxBackends; m != 0 && pairs > int(m) {
		c.errf(join(kNode, kMaxBackends), ErrInvalid,
			"%d is less than the %d (service, backend) pairs of the config (each service counts each backend of its pools once): raise it (at most %d; read at start)",
			m, pairs, MaxMaxBackends)
	}
}
