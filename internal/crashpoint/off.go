//go:build !xlb_crashpoints

// Package crashpoint lets the crash tests stop xlbd dead at a named point
// of a commit. Only a binary built with `go build -tags xlb_crashpoints`
// (bin/xlbd-crash, which make build makes for e2e) has the hook; in every
// other build, the one shipped included, At is an empty function the
// compiler removes and nothing reads the environment.
package crashpoint

// Enabled reports whether this build stops at crash points.
const Enabled = false

// At does nothing in this build.
func At(point string) {}
