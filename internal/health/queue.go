package health

import (
	"context"
	"sync"
)

// queue hands changes from probers, which must never block, to a consumer
// that may be slow. It holds at most one pending change per target: a newer
// change replaces an older one in place, so memory is bounded by the number
// of targets and the consumer always learns each target's latest health.
type queue struct {
	mu      sync.Mutex
	pending []Change
	at      map[Key]int // index in pending
	wake    chan struct{}
}

func (q *queue) init() {
	q.at = map[Key]int{}
	q.wake = make(chan struct{}, 1)
}

// push queues c, replacing a pending change of the same target.
func (q *queue) push(c Change) {
	q.mu.Lock()
	if i, ok := q.at[c.Key]; ok {
		q.pending[i] = c
	} else {
		q.at[c.Key] = len(q.pending)
		q.pending = append(q.pending, c)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pump delivers queued changes to out, in order, until ctx is done; then it
// closes out.
func (q *queue) pump(ctx context.Context, out chan<- Change) {
	defer close(out)
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		clear(q.at)
		q.mu.Unlock()
		for _, c := range batch {
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
		}
	}
}
