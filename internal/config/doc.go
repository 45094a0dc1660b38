// Package config reads, validates and resolves the xlb configuration file
// (docs/DESIGN.md, Configuration).
//
// The file is one YAML document with these top-level keys: node (settings of
// this machine), health_checks (named probes), pools (named sets of backends
// that may include other pools, each with an optional health check), services
// (a VIP, port and protocol served from an ordered list of pools) and bgp
// (the embedded speaker and its peers; optional). examples/xlb.yaml at the
// repository root is a commented example of every key, docs/CONFIG.md the
// reference generated from the key table.
//
// Every key is declared once, in the key table (keys.go): its name, type,
// default, bounds, when it must be given and a line of documentation.
// Reading, Marshal, the type and bound checks and docs/CONFIG.md are
// derived from it (schema.go, values.go); the rules that span keys are
// code.
//
// Reading happens in two steps. Parse decodes the YAML node tree key by key
// (so that every problem is reported with its field path and line), fills in
// defaults and then runs the same checks as Config.Validate: each key's type
// and bounds, then the rules: pool references and cycles, duplicates,
// address families, table sizes. Every problem found is reported at once,
// as an ErrorList.
//
// A Config is the validated file in typed form. Desired turns it into the
// desired state of the data plane (services with their pools flattened, each
// backend with the health check in effect for it) without any I/O; the
// controller then makes the kernel match it. Health is state outside the
// file: Desired.HealthTargets lists what to probe, once per (address, check),
// and DesiredService.ActivePoolWith and UsableBackends take the prober's
// verdict as a predicate.
package config
