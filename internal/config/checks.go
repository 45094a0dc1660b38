package config

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
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

// checkFieldTypes lists the fields that apply to some check types only.
var checkFieldTypes = []struct {
	key   string
	types []CheckType
}{
	{"path", []CheckType{CheckHTTP, CheckHTTPS}},
	{"expect_status", []CheckType{CheckHTTP, CheckHTTPS}},
	{"expect_body", []CheckType{CheckHTTP, CheckHTTPS}},
	{"host", []CheckType{CheckHTTP, CheckHTTPS}},
	{"tls_skip_verify", []CheckType{CheckHTTPS}},
	{"payload", []CheckType{CheckUDP}},
	{"expect", []CheckType{CheckUDP}},
	{"command", []CheckType{CheckExec}},
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

func (d *decoder) healthChecks(n *ynode) []HealthCheck {
	return namedEntries(d, n, "health_checks", "check", checkPath, d.healthCheck)
}

func (d *decoder) healthCheck(name string, n *ynode, path string) HealthCheck {
	h := HealthCheck{Name: name, Interval: DefaultCheckInterval, Rise: DefaultRise, Fall: DefaultFall, Jitter: DefaultJitter}
	f := d.fields(n, path, "type", "port", "path", "expect_status", "expect_body", "host", "tls_skip_verify",
		"payload", "expect", "command", "interval", "timeout", "rise", "fall", "jitter")
	if f == nil {
		return h
	}
	if v := f.get("type"); v != nil {
		if t, ok := decodeEnum(d, v, join(path, "type"), checkTypeNames); ok {
			h.Type = t
			if t == CheckHTTP || t == CheckHTTPS {
				h.Path, h.ExpectStatus = DefaultHTTPPath, DefaultExpectStatus
			}
			for _, ft := range checkFieldTypes {
				if k := f.get(ft.key); k != nil && !slices.Contains(ft.types, t) {
					d.c.at(d.c.posOfOrZero(join(path, ft.key)), join(path, ft.key), ErrInvalid,
						"applies to %s, not to this %s check", typeList(ft.types), t)
					f.del(ft.key)
				}
			}
		}
	} else {
		d.c.at(pos(n), join(path, "type"), ErrRequired, "required: %s", enumList(checkTypeNames))
	}
	if v := f.get("port"); v != nil {
		if u, ok := d.uint(v, join(path, "port"), 65535); ok {
			h.Port = uint16(u)
		}
	}
	if v := f.get("path"); v != nil {
		h.Path, _ = d.str(v, join(path, "path"))
	}
	if v := f.get("expect_status"); v != nil {
		if u, ok := d.uint(v, join(path, "expect_status"), 65535); ok {
			h.ExpectStatus = uint16(u)
		}
	}
	if v := f.get("expect_body"); v != nil {
		h.ExpectBody, _ = d.str(v, join(path, "expect_body"))
	}
	if v := f.get("host"); v != nil {
		h.Host, _ = d.str(v, join(path, "host"))
	}
	if v := f.get("tls_skip_verify"); v != nil {
		h.TLSSkipVerify, _ = d.boolean(v, join(path, "tls_skip_verify"))
	}
	if v := f.get("payload"); v != nil {
		h.Payload, _ = d.bytes(v, join(path, "payload"))
	}
	if v := f.get("expect"); v != nil {
		h.Expect, _ = d.bytes(v, join(path, "expect"))
	}
	if v := f.get("command"); v != nil {
		h.Command = d.strList(v, join(path, "command"))
	}
	if v := f.get("interval"); v != nil {
		if dur, ok := d.duration(v, join(path, "interval")); ok {
			h.Interval = dur
		}
	}
	if v := f.get("timeout"); v != nil {
		h.Timeout, _ = d.duration(v, join(path, "timeout"))
	} else {
		h.Timeout = min(DefaultCheckTimeout, h.Interval/2)
	}
	for _, rf := range []struct {
		key string
		dst *int
	}{{"rise", &h.Rise}, {"fall", &h.Fall}} {
		if v := f.get(rf.key); v != nil {
			if u, ok := d.uint(v, join(path, rf.key), 1<<31-1); ok {
				*rf.dst = int(u)
			}
		}
	}
	if v := f.get("jitter"); v != nil {
		h.Jitter, _ = d.fraction(v, join(path, "jitter"))
	}
	return h
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
	switch {
	case h.Type == 0:
		c.errf(p("type"), ErrRequired, "required: %s", enumList(checkTypeNames))
	case !enumValid(checkTypeNames, h.Type):
		c.errf(p("type"), ErrInvalid, "%s is not one of %s", h.Type, enumList(checkTypeNames))
	default:
		// Fields set for a type they do not apply to (Parse reports them
		// at decoding; this catches a Config built by hand).
		for _, ft := range checkFieldTypes {
			if !slices.Contains(ft.types, h.Type) && !h.fieldZero(ft.key) {
				c.errf(p(ft.key), ErrInvalid, "applies to %s, not to this %s check", typeList(ft.types), h.Type)
			}
		}
	}
	if h.Port == 0 && h.Type != CheckExec && enumValid(checkTypeNames, h.Type) {
		c.errf(p("port"), ErrRequired, "required: the backend port to probe (1..65535)")
	}
	if h.Type == CheckHTTP || h.Type == CheckHTTPS {
		if msg := requestTargetProblem(h.Path); msg != "" {
			c.errf(p("path"), ErrInvalid, "%q %s", h.Path, msg)
		}
		if h.ExpectStatus < 100 || h.ExpectStatus > 599 {
			c.errf(p("expect_status"), ErrInvalid, "%d is out of range 100..599", h.ExpectStatus)
		}
		if h.Host != "" && !validHostHeader(h.Host) {
			c.errf(p("host"), ErrInvalid, "%q is not a host name (with an optional :port)", h.Host)
		}
	}
	if len(h.ExpectBody) > MaxExpectLen {
		c.errf(p("expect_body"), ErrInvalid, "is %d bytes long; at most %d are allowed", len(h.ExpectBody), MaxExpectLen)
	}
	if h.Type == CheckUDP {
		switch n := len(h.Payload); {
		case n == 0:
			c.errf(p("payload"), ErrRequired, "required: the datagram to send (a string, or !!binary base64 for bytes)")
		case n > MaxPayloadLen:
			c.errf(p("payload"), ErrInvalid, "is %d bytes long; a datagram holds at most %d", n, MaxPayloadLen)
		}
	}
	if len(h.Expect) > MaxExpectLen {
		c.errf(p("expect"), ErrInvalid, "is %d bytes long; at most %d are allowed", len(h.Expect), MaxExpectLen)
	}
	if h.Type == CheckExec {
		switch {
		case len(h.Command) == 0 || h.Command[0] == "":
			c.errf(p("command"), ErrRequired, "required: the program and its arguments, such as [/usr/local/bin/check, \"{{address}}\"]")
		default:
			for i, a := range h.Command {
				switch {
				case strings.ContainsRune(a, 0):
					c.errf(index(p("command"), i), ErrInvalid, "contains a NUL byte")
				case h.Port == 0 && strings.Contains(a, "{{port}}"):
					c.errf(index(p("command"), i), ErrInvalid, "uses {{port}} but the check has no port: set port")
				}
			}
		}
	}
	intervalOK := false
	if h.Interval < MinCheckInterval || h.Interval > MaxCheckInterval {
		c.errf(p("interval"), ErrInvalid, "%s is out of range %s..%s",
			formatDuration(h.Interval), formatDuration(MinCheckInterval), formatDuration(MaxCheckInterval))
	} else {
		intervalOK = true
	}
	switch {
	case h.Timeout < MinCheckTimeout:
		c.errf(p("timeout"), ErrInvalid, "%s is shorter than %s", formatDuration(h.Timeout), formatDuration(MinCheckTimeout))
	case intervalOK && h.Timeout >= h.Interval:
		c.errf(p("timeout"), ErrInvalid, "%s must be shorter than the interval %s (a probe ends before the next starts)",
			formatDuration(h.Timeout), formatDuration(h.Interval))
	}
	for _, rf := range []struct {
		key string
		val int
	}{{"rise", h.Rise}, {"fall", h.Fall}} {
		if rf.val < 1 || rf.val > MaxRiseFall {
			c.errf(p(rf.key), ErrInvalid, "%d is out of range 1..%d", rf.val, MaxRiseFall)
		}
	}
	if !(h.Jitter >= 0 && h.Jitter <= 1) { // also catches NaN
		c.errf(p("jitter"), ErrInvalid, "%v is out of range 0..1", h.Jitter)
	}
}

// fieldZero reports whether the field named key (one of checkFieldTypes)
// has its zero value.
func (h *HealthCheck) fieldZero(key string) bool {
	switch key {
	case "path":
		return h.Path == ""
	case "expect_status":
		return h.ExpectStatus == 0
	case "expect_body":
		return h.ExpectBody == ""
	case "host":
		return h.Host == ""
	case "tls_skip_verify":
		return !h.TLSSkipVerify
	case "payload":
		return len(h.Payload) == 0
	case "expect":
		return len(h.Expect) == 0
	case "command":
		return len(h.Command) == 0
	}
	return true
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

// checkNode builds the YAML of h for Marshal.
func checkNode(h *HealthCheck) *yaml.Node {
	n := mapping("type", str(h.Type.String()))
	add := func(k string, v *yaml.Node) { n.Content = append(n.Content, str(k), v) }
	if h.Port != 0 || h.Type != CheckExec {
		add("port", integer(uint64(h.Port)))
	}
	if h.Type == CheckHTTP || h.Type == CheckHTTPS {
		add("path", str(h.Path))
		add("expect_status", integer(uint64(h.ExpectStatus)))
	}
	if h.ExpectBody != "" {
		add("expect_body", str(h.ExpectBody))
	}
	if h.Host != "" {
		add("host", str(h.Host))
	}
	if h.TLSSkipVerify || h.Type == CheckHTTPS {
		add("tls_skip_verify", boolean(h.TLSSkipVerify))
	}
	if len(h.Payload) > 0 {
		add("payload", bytesNode(h.Payload))
	}
	if len(h.Expect) > 0 {
		add("expect", bytesNode(h.Expect))
	}
	if len(h.Command) > 0 {
		add("command", list(h.Command))
	}
	add("interval", str(formatDuration(h.Interval)))
	add("timeout", str(formatDuration(h.Timeout)))
	add("rise", integer(uint64(max(h.Rise, 0))))
	add("fall", integer(uint64(max(h.Fall, 0))))
	add("jitter", float(h.Jitter))
	return n
}
