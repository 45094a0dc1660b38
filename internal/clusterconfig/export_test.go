package clusterconfig

import "context"

// PublishChange gives the status a new time and writes it with ctx (the
// tests pass a cancelled one: a write that fails).
func PublishChange(s *Source, ctx context.Context) {
	s.set(func(*Status) {})
	s.publish(ctx)
}
