package config

import (
	"net/url"
	"slices"
	"strings"
	"time"
)

// Health checks (docs/DESIGN.md, Health checks): the health_checks section
// names checks, a pool
// (or one backend) refers to one by name, and internal/health probes each
// (backend address, check) pair once however many pools hold it.

// Defaults and limits of health checks.
const (
	// DefaultCheckInterval is the time between two probes of one target.
	DefaultCheckInterval = 2 * time.Second
	// MinCheckInterval and MaxCheckInterval bound interval.
	MinCheckInterval = 100 * time.Millisecond
	MaxCheckInterval = time.Hour
	// DefaultCheckTimeout is a probe's timeout when the file gives none,
	// or half the interval when that is shorter. A timeout is always
	// shorter than its interval.
	DefaultCheckTimeout = time.Second
	// MinCheckTimeout is the shortest timeout allowed.
	MinCheckTimeout = time.Millisecond
	// DefaultRise is how many consecutive successes make a down target up.
	DefaultRise = 2
	// DefaultFall is how many consecutive failures make an up target down.
	DefaultFall = 3
	// MaxRiseFall bounds rise and fall (both are at least 1).
	MaxRiseFall = 100
	// DefaultJitter is the share of the interval by which the time between
	// probes varies, so that probes of many targets spread out.
	DefaultJitter = 0.1
	// DefaultHTTPPath is the path of an HTTP(S) check.
	DefaultHTTPPath = "/"
	// DefaultExpectStatus is the HTTP status an HTTP(S) check expects.
	DefaultExpectStatus = 200
	// MaxExpectLen bounds expect_body and expect: the prober looks for
	// them in the first 64 KiB of the answer.
	MaxExpectLen = 4096
	// MaxPayloadLen bounds a UDP check's payload (one datagram).
	MaxPayloadLen = 65507
)

// CheckType is how a health check probes a backend. The numbering is stable.
type CheckType uint8

const (
	// CheckTCP succeeds when a TCP connection to the port is accepted.
	CheckTCP CheckType = iota + 1
	// CheckHTTP succeeds when a GET answers with the expected status (and
	// body substring, if any).
	CheckHTTP
	// CheckHTTPS is CheckHTTP over TLS.
	CheckHTTPS
	// CheckUDP sends a payload and succeeds when a reply containing the
	// expected bytes arrives.
	CheckUDP
	// CheckExec runs a command and succeeds when it exits with status 0.
	CheckExec
)

// String returns the type's name as written in the file ("tcp", "http",
// "https", "udp", "exec").
func (t CheckType) String() string { return enumString(checkTypeNames, t) }

var checkTypeNames = []enumName[CheckType]{
	{"tcp", CheckTCP}, {"http", CheckHTTP}, {"https", CheckHTTPS}, {"udp", CheckUDP}, {"exec", CheckExec},
}

// HealthCheck is one named health check. Fields that do not apply to Type are
// zero.
type HealthCheck struct {
	Name string
	Type CheckType
	// Port is the backend port probed, 1..65535; required except for exec
	// checks, where it is optional (0: none) and passed to the command.
	Port uint16

	// Path is the HTTP(S) request target: an absolute path, optionally
	// with a query ("/healthz?full=1").
	Path string
	// ExpectStatus is the HTTP status that counts as healthy, 100..599.
	ExpectStatus uint16
	// ExpectBody, when not empty, must occur in the first 64 KiB of the
	// HTTP(S) response body.
	ExpectBody string
	// Host, when not empty, is sent as the HTTP Host header and used as the
	// TLS server name.
	Host string
	// TLSSkipVerify turns off the verification of an HTTPS backend's
	// certificate.
	TLSSkipVerify bool

	// Payload is the datagram a UDP check sends (required for UDP).
	Payload []byte
	// Expect, when not empty, must occur in the UDP reply; nil accepts
	// any reply.
	Expect []byte

	// Command is an exec check's argv. "{{address}}" and "{{port}}" in it
	// are replaced by the backend's address and the check's port; the
	// command also gets them as XLB_BACKEND and XLB_PORT in its
	// environment.
	Command []string

	// Interval is the time between two probes of a target, MinCheckInterval
	// .. MaxCheckInterval.
	Interval time.Duration
	// Timeout bounds one probe; at least MinCheckTimeout and shorter than
	// Interval.
	Timeout time.Duration
	// Rise is how many consecutive successes make a down target up; Fall
	// how many consecutive failures make an up target down; 1..MaxRiseFall.
	Rise, Fall int
	// Jitter, 0..1, is the share of Interval by which the time between two
	// probes is shortened at random.
	Jitter float64
}

// Equal reports whether h and o are the same check with the same settings.
func (h *HealthCheck) Equal(o *HealthCheck) bool {
	return h.Name == o.Name && h.Type == o.Type && h.Port == o.Port &&
		h.Path == o.Path && h.ExpectStatus == o.ExpectStatus && h.ExpectBody == o.ExpectBody &&
		h.Host == o.Host && h.TLSSkipVerify == o.TLSSkipVerify &&
		string(h.Payload) == string(o.Payload) && string(h.Expect) == string(o.Expect) &&
		slices.Equal(h.Command, o.Command) &&
		h.Interval == o.Interval && h.Timeout == o.Timeout && h.Rise == o.Rise && h.Fall == o.Fall &&
		h.Jitter == o.Jitter
}

func (h *HealthCheck) clone() HealthCheck {
	c := *h
	c.Payload = slices.Clone(h.Payload)
	c.Expect = slices.Clone(h.Expect)
	c.Command = slices.Clone(h.Command)
	return c
}

func typeList(ts []CheckType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	if len(s) == 1 {
		return s[0] + " checks only"
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1] + " checks only"
}

// checkIndex maps check names to checks; the first of several checks with one
// name wins (the decoder reports duplicate keys).
func checkIndex(checks []HealthCheck) map[string]*HealthCheck {
	return firstByName(checks, func(h *HealthCheck) string { return h.Name })
}

func validateHealthChecks(checks []HealthCheck, idx map[string]*HealthCheck, c *collector) {
	for i := range checks {
		h := &checks[i]
		path := checkPath(h.Name)
		if !validateEntryName("health check", h.Name, path, idx[h.Name] == h, c) {
			continue
		}
		validateHealthCheck(h, path, c)
	}
}

func validateHealthCheck(h *HealthCheck, path string, c *collector) {
	p := func(key string) string { return join(path, key) }
	if h.Port == 0 && h.Type != CheckExec && enumValid(checkTypeNames, h.Type) {
		c.errf(p(kPort), ErrRequired, "required: the backend port to probe (1..65535)")
	}
	if h.Type == CheckHTTP || h.Type == CheckHTTPS {
		if msg := requestTargetProblem(h.Path); msg != "" {
			c.errf(p(kPath), ErrInvalid, "%q %s", h.Path, msg)
		}
		if h.Host != "" && !validHostHeader(h.Host) {
			c.errf(p(kHost), ErrInvalid, "%q is not a host name (with an optional :port)", h.Host)
		}
	}
	if len(h.ExpectBody) > MaxExpectLen {
		c.errf(p(kExpectBody), ErrInvalid, "is %d bytes long; at most %d are allowed", len(h.ExpectBody), MaxExpectLen)
	}
	if h.Type == CheckUDP {
		switch n := len(h.Payload); {
		case n == 0:
			c.errf(p(kPayload), ErrRequired, "required: the datagram to send (a string, or !!binary base64 for bytes)")
		case n > MaxPayloadLen:
			c.errf(p(kPayload), ErrInvalid, "is %d bytes long; a datagram holds at most %d", n, MaxPayloadLen)
		}
	}
	if len(h.Expect) > MaxExpectLen {
		c.errf(p(kExpect), ErrInvalid, "is %d bytes long; at most %d are allowed", len(h.Expect), MaxExpectLen)
	}
	if h.Type == CheckExec {
		switch {
		case len(h.Command) == 0 || h.Command[0] == "":
			c.errf(p(kCommand), ErrRequired, "required: the program and its arguments, such as [/usr/local/bin/check, \"{{address}}\"]")
		default:
			for i, a := range h.Command {
				switch {
				case strings.ContainsRune(a, 0):
					c.errf(index(p(kCommand), i), ErrInvalid, "contains a NUL byte")
				case h.Port == 0 && strings.Contains(a, "{{port}}"):
					c.errf(index(p(kCommand), i), ErrInvalid, "uses {{port}} but the check has no port: set port")
				}
			}
		}
	}
	intervalOK := h.Interval >= MinCheckInterval && h.Interval <= MaxCheckInterval
	switch {
	case h.Timeout < MinCheckTimeout:
		c.errf(p(kTimeout), ErrInvalid, "%s is shorter than %s", formatDuration(h.Timeout), formatDuration(MinCheckTimeout))
	case intervalOK && h.Timeout >= h.Interval:
		c.errf(p(kTimeout), ErrInvalid, "%s must be shorter than the interval %s (a probe ends before the next starts)",
			formatDuration(h.Timeout), formatDuration(h.Interval))
	}
}

// requestTargetProblem returns why p cannot be an HTTP request target in
// origin form, or "".
func requestTargetProblem(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "must start with /"
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f || r == '#' {
			return "must not contain spaces, control characters or '#' (percent-encode them)"
		}
	}
	if _, err := url.ParseRequestURI(p); err != nil {
		return "is not a valid request path"
	}
	return ""
}

// validHostHeader reports whether s can be sent as a Host header: a host name
// or address, optionally with a port.
func validHostHeader(s string) bool {
	if len(s) > 255 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune("/\\@?#%\"'<>", r) {
			return false
		}
	}
	return true
}
