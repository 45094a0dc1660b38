package controller

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"
)

// The operator's runtime state, the backend overrides and the node drain,
// is saved with the pins (datapath.SaveOperatorState) on every change and
// restored by New, before the first commit: a backend under maintenance
// stays drained, and a drained node stays withdrawn, across restarts and
// upgrades. The document is JSON with a version; a document of another
// version is ignored with a warning (the operator sets the state again).
const operatorVersion = 1

type operatorDoc struct {
	Version     int           `json:"version"`
	NodeDrained bool          `json:"node_drained"`
	Overrides   []overrideDoc `json:"overrides,omitempty"`
}

type overrideDoc struct {
	Service string     `json:"service,omitempty"` // "": every service with the address
	Address netip.Addr `json:"address"`
	Weight  *uint32    `json:"weight,omitempty"`
	Drain   *bool      `json:"drain,omitempty"`
	Since   time.Time  `json:"since"`
}

// saveOperator writes the overrides and the node drain with the pins.
func (c *Controller) saveOperator() error {
	doc := operatorDoc{Version: operatorVersion, NodeDrained: c.drained}
	for k, o := range c.overrides {
		doc.Overrides = append(doc.Overrides, overrideDoc{Service: k.service, Address: k.addr, Weight: o.weight, Drain: o.drain, Since: o.since})
	}
	b, err := json.Marshal(doc)
	if err == nil {
		err = c.dp.SaveOperatorState(b)
	}
	if err != nil {
		c.log.Error("runtime overrides and node drain not saved: a restart would lose the latest change", "error", err)
		return fmt.Errorf("the change is in effect but not saved, so a restart would lose it: %w", err)
	}
	return nil
}

// restoreOperator reads the state saved by the previous xlbd of this pin
// directory. Overrides of backends no longer in the config are dropped,
// logged, by the first commit (pruneOverrides).
func (c *Controller) restoreOperator() {
	b, err := c.dp.OperatorState()
	if err != nil || b == nil {
		if err != nil {
			c.log.Error("runtime overrides and node drain of the previous xlbd not restored", "error", err)
		}
		return
	}
	var doc operatorDoc
	if err := json.Unmarshal(b, &doc); err != nil || doc.Version != operatorVersion {
		c.log.Warn("saved runtime overrides and node drain not restored: unreadable or of another version", "version", doc.Version, "error", err)
		return
	}
	for _, o := range doc.Overrides {
		c.overrides[overrideKey{o.Service, o.Address}] = &override{weight: o.Weight, drain: o.Drain, since: o.Since}
		c.log.Info("runtime override restored", "service", o.Service, "address", o.Address, "weight", fmtPtr(o.Weight), "drain", fmtPtr(o.Drain))
	}
	if doc.NodeDrained && c.bgp != nil {
		if err := c.bgp.RestoreDrain(); err != nil {
			c.log.Error("node drain not restored", "error", err)
			return
		}
		c.drained = true
	}
}

// fmtPtr formats an optional value for a log line ("-" when unset).
func fmtPtr[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
