// Package config reads, validates and resolves the xlb configuration file
// (SPEC F-CFG).
//
// The file is one YAML document with three top-level keys: node (settings of
// this machine), pools (named sets of backends that may include other pools)
// and services (a VIP, port and protocol served from an ordered list of
// pools). examples/xlb.yaml at the repository root is a commented example of
// every field.
//
// Reading happens in two steps. Parse decodes the YAML node tree field by field
// (so that every problem is reported with its field path and line), fills in
// defaults and then runs the same semantic checks as Config.Validate: pool
// references and cycles, duplicates, address families, table sizes. Every
// problem found is reported at once, as an ErrorList.
//
// A Config is the validated file in typed form. Desired turns it into the
// desired state of the data plane (services with their pools flattened) without
// any I/O; the controller then makes the kernel match it.
package config
