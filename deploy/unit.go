// Package deploy holds the systemd units the package installs. Its Go code
// reads them for the tests that check what they let the daemons do (here
// and in e2e/); the package test (make deb) verifies them with
// systemd-analyze.
package deploy

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Dir is this directory (the units' source), found from this file.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// ReadUnit reads a unit file into key -> its values, split at blanks,
// across sections (repeated keys append; comments skipped).
func ReadUnit(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			kv[k] = append(kv[k], strings.Fields(v)...)
		}
	}
	return kv, sc.Err()
}
