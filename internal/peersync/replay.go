package peersync

import "time"

// MaxSkew is how far a message's send time may be from the receiver's
// clock (the nodes' clocks are kept by NTP): an older message is refused as
// a replay even by a receiver that has just restarted and remembers no
// sequence numbers.
const MaxSkew = 30 * time.Second

// replayWindow remembers the sequence numbers one peer used lately. A
// sender numbers its messages from its start time in nanoseconds, so a
// restarted sender continues above its old numbers. UDP may reorder: a
// number up to 64 below the highest seen is accepted once.
type replayWindow struct {
	top  uint64 // highest accepted
	seen uint64 // bit i: top-i was accepted
}

// accept reports whether seq is new, and records it.
func (w *replayWindow) accept(seq uint64) bool {
	switch {
	case seq > w.top:
		if d := seq - w.top; d >= 64 {
			w.seen = 1
		} else {
			w.seen = w.seen<<d | 1
		}
		w.top = seq
		return true
	case w.top-seq >= 64:
		return false
	default:
		bit := uint64(1) << (w.top - seq)
		if w.seen&bit != 0 {
			return false
		}
		w.seen |= bit
		return true
	}
}

// fresh reports whether a message sent at sent (Unix ns) is within
// MaxSkew of now.
func fresh(sent int64, now time.Time) bool {
	d := now.Sub(time.Unix(0, sent))
	return d < MaxSkew && d > -MaxSkew
}
