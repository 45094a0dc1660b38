// Package health probes backends (docs/DESIGN.md, Health checks) and keeps
// their health state
// for the controller.
//
// A Checker probes one kind of service: TCP connect (tcp.go), HTTP and HTTPS
// GET (http.go), UDP request/response (udp.go) and a command (exec.go).
// NewChecker builds the one a config.HealthCheck describes.
//
// A Monitor probes a set of targets, each a (backend address, check) pair as
// config.Desired.HealthTargets lists them: once per interval however many
// pools and services include the target, within a global bound on
// probes in flight. Update replaces the set; targets that stay keep their
// state.
//
// # States
//
// A target is up or down, and unknown until its first probe completes. The
// first probe decides (one success: up, one failure: down); from then on
// rise consecutive successes bring a down target up and fall consecutive
// failures take an up target down. While a target is unknown it counts as
// healthy or not according to Options.Initial. The default,
// InitialUpAtStart, counts the targets of the first Update as healthy (a
// restarted xlbd plans the same tables as before instead of emptying them
// for rise intervals) and targets added later as unhealthy (a backend added
// at run time gets new flows only once it answered a probe).
//
// # Timing
//
// A new target's first probe starts after a random delay in [0, jitter ×
// interval); each later probe starts interval − U × jitter × interval after
// the previous one started (U uniform in [0, 1)), so probes of many targets
// spread out and no target waits longer than one interval between probes.
// Time spent waiting for a concurrency slot counts towards the interval; the
// timeout counts from the probe's start. A change of health is reported on
// Changes as soon as the probe that causes it completes, so the data plane
// can follow within one interval.
package health
