package decap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xlbproject/xlb/internal/testenv"
)

// newAnonNS creates an unnamed network namespace; closing the handle (and
// nothing else holding it) destroys it.
func newAnonNS(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if serr := netns.Set(orig); serr != nil {
		panic(fmt.Sprintf("cannot restore netns: %v", serr))
	}
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// attachIn creates the veth ifname in ns, attaches xlb-decap to it and
// returns its pin directory.
func attachIn(t *testing.T, ns netns.NsHandle, ifname string) string {
	t.Helper()
	var dir string
	err := inNS(ns, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifname}, PeerName: ifname + "p"}); err != nil {
			return err
		}
		var err error
		if dir, err = pinDir(ifname); err != nil {
			return err
		}
		return Attach(ifname, ModeGeneric)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir); os.Remove(filepath.Dir(dir)) })
	return dir
}

// waitDetached waits until the link pinned in dir is detached (a destroyed
// namespace's devices go away asynchronously).
func waitDetached(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Info()
		l.Close()
		if err == nil && info.XDP() != nil && info.XDP().Ifindex == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the link pinned in %s is still attached", dir)
		}
	}
}

// TestAttachPrunes: an attach removes the pins of links whose interface
// was deleted and of namespaces that were destroyed (their directory
// included); live attachments elsewhere keep theirs.
func TestAttachPrunes(t *testing.T) {
	testenv.RequireNetns(t)
	sfx := randomSuffix(t)
	gone := newAnonNS(t)
	goneDir := attachIn(t, gone, "xdpa"+sfx)
	live := newNamedNS(t, "xlbdc-live-"+sfx)
	deletedDir := attachIn(t, live, "xdpb"+sfx)
	liveDir := attachIn(t, live, "xdpc"+sfx)
	t.Cleanup(func() { inNS(live, func() error { return Detach("xdpc" + sfx) }) })

	gone.Close() // the namespace is destroyed, its veth with it
	if err := inNS(live, func() error {
		l, err := netlink.LinkByName("xdpb" + sfx)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, goneDir)
	waitDetached(t, deletedDir)

	attachIn(t, live, "xdpd"+sfx)
	t.Cleanup(func() { inNS(live, func() error { return Detach("xdpd" + sfx) }) })
	for _, d := range []string{goneDir, filepath.Dir(goneDir), deletedDir} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not pruned by the attach: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(liveDir, pinLink)); err != nil {
		t.Errorf("a live attachment's pin was removed: %v", err)
	}
}
