package decap

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
)

// FollowDebounce is how long Follow waits after an address change before
// it syncs, so that a burst (an interface coming up with several
// addresses) costs one sync. The window starts at the first change and is
// not extended by later ones, so a change is applied within this delay
// plus one sync.
const FollowDebounce = 50 * time.Millisecond

// followRetry is the pause before subscribing again after the netlink
// subscription failed to open.
const followRetry = time.Second

// Follow keeps the local-address map of ifname's attachment equal to this
// host's addresses until ctx ends: it syncs once, then again after every
// address change the kernel announces (added or removed, on any
// interface), debounced by FollowDebounce. If the subscription fails (the
// socket's buffer overflowed and announcements were lost, say) it
// subscribes again and syncs from a fresh listing, so no change is missed
// for good. synced, if not nil, is called with the addresses after each
// sync that changed them, and after the first.
//
// It must run on the goroutine (and, in tests, the locked thread) whose
// network namespace holds ifname. It returns nil when ctx ends, and an
// error if the attachment is gone (ErrNotAttached) or a sync fails.
func Follow(ctx context.Context, ifname string, synced func([]netip.Addr)) error {
	f := follower{ifname: ifname, synced: synced}
	for {
		updates, failed, stop, err := subscribeAddrs()
		if err != nil {
			slog.Warn("subscribe to address changes", "error", err, "retry", followRetry)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(followRetry):
				continue
			}
		}
		// Sync after subscribing, so a change between the listing and
		// the subscription cannot slip through.
		err = f.sync()
		if err == nil {
			err = f.watch(ctx, updates, failed)
		}
		close(stop)
		for range updates { // let the receiver goroutine finish
		}
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// follower holds Follow's state between syncs.
type follower struct {
	ifname string
	synced func([]netip.Addr)
	last   []netip.Addr
	done   bool // synced at least once
}

// sync applies the host's addresses to the pinned map and reports them if
// they differ from the last sync's.
func (f *follower) sync() error {
	addrs, err := SyncLocalAddrs(f.ifname)
	if err != nil {
		return err
	}
	if f.done && slices.Equal(addrs, f.last) {
		return nil
	}
	slog.Info("xlb-decap local addresses", "interface", f.ifname, "addresses", addrs)
	f.last, f.done = addrs, true
	if f.synced != nil {
		f.synced(addrs)
	}
	return nil
}

// watch syncs after each burst of updates. It returns nil when ctx ends or
// the subscription failed (the caller subscribes again), and an error
// when a sync fails.
func (f *follower) watch(ctx context.Context, updates <-chan netlink.AddrUpdate, failed <-chan error) error {
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			slog.Warn("address subscription failed; subscribing again", "error", err)
			return nil
		case _, ok := <-updates:
			if !ok {
				slog.Warn("address subscription closed; subscribing again")
				return nil
			}
			if timer == nil {
				timer = time.After(FollowDebounce)
			}
		case <-timer:
			timer = nil
			if err := f.sync(); err != nil {
				return err
			}
		}
	}
}

// subscribeAddrs subscribes to the address changes of the current network
// namespace. updates is closed when the subscription ends; failed gets its
// first error; closing stop ends it.
func subscribeAddrs() (updates chan netlink.AddrUpdate, failed chan error, stop chan struct{}, err error) {
	updates = make(chan netlink.AddrUpdate, 64)
	failed = make(chan error, 1)
	stop = make(chan struct{})
	err = netlink.AddrSubscribeWithOptions(updates, stop, netlink.AddrSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case failed <- err:
			default:
			}
		},
		ReceiveBufferSize: 1 << 20,
	})
	if err != nil {
		close(stop)
		return nil, nil, nil, fmt.Errorf("subscribe to address changes: %w", err)
	}
	return updates, failed, stop, nil
}
