package api

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindSocket: the one live socket of a directory is found; none, or
// several, is an error naming the instances; a stale socket file (nobody
// listening) and other files do not count.
func TestFindSocket(t *testing.T) {
	dir := t.TempDir()
	listen := func(name string) {
		l, err := net.Listen("unix", filepath.Join(dir, name+".sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	if _, err := FindSocket(dir); !errors.Is(err, ErrNoSocket) || !strings.Contains(err.Error(), "no xlbd socket in "+dir) {
		t.Fatalf("empty dir: %v", err)
	}
	if _, err := FindSocket(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoSocket) {
		t.Fatalf("missing dir: %v", err)
	}
	listen("a")
	// A stale socket: bound, then closed without removing the file.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "stale.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	os.WriteFile(filepath.Join(dir, "notes.sock"), nil, 0o600)
	if got, err := FindSocket(dir); err != nil || got != filepath.Join(dir, "a.sock") {
		t.Fatalf("one instance: %q, %v", got, err)
	}
	listen("b")
	_, err = FindSocket(dir)
	if !errors.Is(err, ErrNoSocket) || !strings.Contains(err.Error(), "2 xlbd instances have a socket in "+dir+" (a, b): choose one with --node NAME") {
		t.Fatalf("two instances: %v", err)
	}
	if SocketPath("lb1") != "/run/xlb/lb1.sock" {
		t.Fatalf("SocketPath: %s", SocketPath("lb1"))
	}
}
