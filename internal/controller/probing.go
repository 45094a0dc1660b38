package controller

// The blackbox prober's part in the controller: which VIPs it probes, and
// its verdict in the self-check.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/state"
)

// errNoAnswer is the self-check's failure when the prober's probes all go
// unanswered.
var errNoAnswer = errors.New("prober: no VIP answered its probes (the node does not deliver)")

// setProbeTargets gives the prober the VIPs of the committed state whose
// table has a backend (a VIP without one has nothing to answer).
func (c *Controller) setProbeTargets() {
	if c.prober == nil {
		return
	}
	var keys []state.VIPKey
	for k, svc := range c.state.Services {
		if slices.ContainsFunc(svc.Table, func(id uint32) bool { return id != 0 }) {
			keys = append(keys, k)
		}
	}
	c.prober.SetTargets(keys)
}

// proberError is the prober's part of the self-check: an error once no
// VIP answered for several rounds.
func (c *Controller) proberError() error {
	if c.prober == nil {
		return nil
	}
	st := c.prober.Status()
	if st.OK {
		return nil
	}
	if len(st.Results) > 0 {
		return fmt.Errorf("%w: %s: %s", errNoAnswer, st.Results[0].VIP, st.Results[0].Err)
	}
	return errNoAnswer
}

// proberStatus is the prober's last round for the API.
func (c *Controller) proberStatus() api.ProberStatus {
	if c.prober == nil {
		return api.ProberStatus{OK: true}
	}
	st := c.prober.Status()
	out := api.ProberStatus{Enabled: true, OK: st.OK}
	for _, r := range st.Results {
		out.Probes = append(out.Probes, api.Probe{VIP: r.VIP.String(), Up: r.Up, Latency: r.Latency, Error: r.Err, CheckedAt: r.CheckedAt})
	}
	return out
}

// probesByVIP is the prober's last probe of each VIP it probes, by
// VIPKey.String() (nil when the prober is off).
func (c *Controller) probesByVIP() map[string]*api.Probe {
	st := c.proberStatus()
	out := make(map[string]*api.Probe, len(st.Probes))
	for i := range st.Probes {
		out[st.Probes[i].VIP] = &st.Probes[i]
	}
	return out
}
