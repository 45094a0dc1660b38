package config

import (
	"crypto/sha256"
	"encoding/hex"
)

// ClusterVersion names the part of c that every node of a cluster runs
// alike: its health checks, pools and services (node and bgp are each
// node's own). It is "sha256:" and 12 hex digits of the canonical form
// (Marshal), so two nodes running the same services report the same
// version however their files are written.
func (c *Config) ClusterVersion() string {
	shared := Config{HealthChecks: c.HealthChecks, Pools: c.Pools, Services: c.Services}
	b, err := shared.Marshal()
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:6])
}
