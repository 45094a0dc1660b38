package statuspage

import (
	"context"
	"time"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
)

// DefaultConnInterval is how often the connection table is counted: a
// full scan, so less often than the rest.
const DefaultConnInterval = 10 * time.Second

// Connections is the connection table as the page shows it, counted from
// a dump of the table (the status carries no count).
type Connections struct {
	At       time.Time `json:"at"`
	InUse    uint64    `json:"in_use"` // entries in use, expired ones included
	Capacity uint64    `json:"capacity"`
	// Backends counts the live (not expired) entries of each
	// "service backend".
	Backends map[string]uint64 `json:"backends"`
	// Truncated: more live entries than one dump returns; the counts are
	// lower bounds.
	Truncated bool `json:"truncated"`
}

// countConnections counts the table every ConnInterval until ctx ends;
// until the first count succeeds (xlbd starting), every Interval.
func (p *Page) countConnections(ctx context.Context) {
	counted := false
	for {
		resp, err := p.src.ConntrackDump(ctx, &pb.ConntrackDumpRequest{Limit: api.MaxConntrackLimit})
		counted = counted || err == nil
		if err == nil {
			c := Connections{At: time.Now().UTC(), InUse: resp.GetInUse(), Capacity: resp.GetCapacity(),
				Backends: map[string]uint64{}, Truncated: resp.GetTruncated()}
			for _, e := range resp.GetEntries() {
				if e.GetBackend() != "" {
					c.Backends[e.GetService()+" "+e.GetBackend()]++
				}
			}
			p.mu.Lock()
			p.conns = &c
			p.mu.Unlock()
		} else if ctx.Err() == nil {
			p.o.Log.Debug("status page: connection table not counted", "error", err)
		}
		wait := p.o.ConnInterval
		if !counted {
			wait = p.o.Interval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
