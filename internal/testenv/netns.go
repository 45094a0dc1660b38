package testenv

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// InNewNetns runs the rest of t on the calling goroutine's thread, locked
// to it and switched into a new network namespace (root needed). At
// cleanup, after the cleanups registered later, the thread returns to its
// namespace and is unlocked; the new namespace goes with its last
// reference. Code that starts goroutines does not follow: they run in
// whatever namespace their thread has. Like RequireNetns, -short skips it.
func InNewNetns(t testing.TB) {
	t.Helper()
	RequireNetns(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("restore netns: %v", err) // the thread stays locked and dies
			return
		}
		ns.Close()
		orig.Close()
		runtime.UnlockOSThread()
	})
}
