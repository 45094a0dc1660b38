package api

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// SocketDir holds the API sockets of the host's xlbd instances, one per
// node name: several instances (shards) run side by side without flags.
const SocketDir = "/run/xlb"

// SocketPath is the default API socket of the instance named node.
func SocketPath(node string) string { return filepath.Join(SocketDir, node+".sock") }

// ErrNoSocket: FindSocket found no instance, or several.
var ErrNoSocket = errors.New("no single xlbd socket")

// FindSocket returns the API socket of the only xlbd instance whose socket
// is in dir (SocketDir). With none, or with several, it fails wrapping
// ErrNoSocket and names the instances found, so the caller can choose one
// (xlbctl --node NAME or --socket PATH).
func FindSocket(dir string) (string, error) {
	socks, err := listSockets(dir)
	if err != nil {
		return "", err
	}
	switch len(socks) {
	case 1:
		return socks[0], nil
	case 0:
		return "", fmt.Errorf("%w: no xlbd socket in %s (is xlbd running? give --node NAME or --socket PATH)", ErrNoSocket, dir)
	}
	names := make([]string, len(socks))
	for i, s := range socks {
		names[i] = strings.TrimSuffix(filepath.Base(s), ".sock")
	}
	return "", fmt.Errorf("%w: %d xlbd instances have a socket in %s (%s): choose one with --node NAME or --socket PATH",
		ErrNoSocket, len(socks), dir, strings.Join(names, ", "))
}

// listSockets lists the unix sockets named *.sock in dir, sorted, leaving
// out stale ones (a crashed xlbd's file that nobody listens on).
func listSockets(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look for xlbd sockets: %w", err)
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if strings.HasSuffix(e.Name(), ".sock") && e.Type()&os.ModeSocket != 0 && !stale(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

// stale reports whether nothing listens on the socket at path.
func stale(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
