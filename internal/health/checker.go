package health

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/xlbproject/xlb/internal/config"
)

// Checker probes one backend service.
type Checker interface {
	// Check probes target once and returns nil when it is healthy, or an
	// error saying why not. It returns when ctx is done at the latest; the
	// caller bounds it with the check's timeout.
	Check(ctx context.Context, target netip.Addr) error
}

// NewChecker returns the checker that hc describes. hc should have passed
// config validation; the error reports what makes a check unusable
// (an unknown type, an exec check without a command, an unparsable path).
func NewChecker(hc config.HealthCheck) (Checker, error) {
	switch hc.Type {
	case config.CheckTCP:
		return newTCP(hc.Port), nil
	case config.CheckHTTP, config.CheckHTTPS:
		return newHTTP(hc)
	case config.CheckUDP:
		return newUDP(hc)
	case config.CheckExec:
		return newExec(hc)
	}
	return nil, fmt.Errorf("health check %q: unknown type %s", hc.Name, hc.Type)
}

// maxRead bounds what a checker reads of an answer (HTTP body, UDP reply).
const maxRead = 64 << 10
