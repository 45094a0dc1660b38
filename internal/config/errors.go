package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Kinds of configuration error. Every *Error wraps exactly one of them, so
// errors.Is(err, ErrPoolCycle) tells whether Parse, Load or Validate found a
// pool cycle anywhere in the file.
var (
	// ErrSyntax is a YAML syntax error, a trailing document or an
	// unsupported YAML feature (aliases, merge keys).
	ErrSyntax = errors.New("yaml syntax error")
	// ErrEmpty is a file with no document or an empty document.
	ErrEmpty = errors.New("empty configuration")
	// ErrTooLarge is a file larger than MaxFileSize.
	ErrTooLarge = errors.New("configuration too large")
	// ErrUnknownField is a key the schema does not define.
	ErrUnknownField = errors.New("unknown field")
	// ErrDuplicate is a key, pool name, service name, VIP, pool reference
	// or backend that appears twice.
	ErrDuplicate = errors.New("duplicate")
	// ErrRequired is a required field that is missing.
	ErrRequired = errors.New("required field missing")
	// ErrInvalid is a value of the wrong type, out of range, not one of its
	// enumeration's values, or not acceptable where it is used (a
	// non-prime table size, a multicast address, ...).
	ErrInvalid = errors.New("invalid value")
	// ErrUnknownPool is a reference to a pool that is not defined.
	ErrUnknownPool = errors.New("unknown pool")
	// ErrUnknownCheck is a reference to a health check that is not defined.
	ErrUnknownCheck = errors.New("unknown health check")
	// ErrPoolCycle is a pool that includes itself, directly or not.
	ErrPoolCycle = errors.New("pool cycle")
	// ErrEmptyPool is a pool with neither backends nor include.
	ErrEmptyPool = errors.New("empty pool")
	// ErrEmptyService is a service whose pools resolve to no backend.
	ErrEmptyService = errors.New("empty service")
	// ErrConflict is one backend address reached twice through included
	// pools with different weight, encap, state or health check.
	ErrConflict = errors.New("conflicting backend")
)

// MaxErrors is how many errors an ErrorList shows. When more were found, the
// list holds the first MaxErrors in file order and one more *Error that says
// how many were left out.
const MaxErrors = 25

// Error is one problem in a configuration file.
type Error struct {
	// Source names the file (the path given to Load, the source given to
	// Parse); empty for Validate.
	Source string
	// Line and Column locate the problem, 1-based; 0 when unknown (Validate
	// of a Config built by hand, some YAML syntax errors).
	Line, Column int
	// Field is the path of the field at fault, such as
	// "services[0].table_size" or "pools.web.backends[1].address"; empty for
	// problems of the file as a whole.
	Field string
	// Msg says what is wrong and, where it helps, what to do.
	Msg string
	// Err is the kind of error, one of the Err* sentinels of this package.
	Err error
}

// Error formats e as "source:line: field: msg", leaving out the parts that are
// unknown.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Source != "" && e.Line > 0:
		b.WriteString(e.Source + ":" + strconv.Itoa(e.Line) + ": ")
	case e.Source != "":
		b.WriteString(e.Source + ": ")
	case e.Line > 0:
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the kind of error (an Err* sentinel), or nil.
func (e *Error) Unwrap() error { return e.Err }

// ErrorList is every problem found in one configuration, in file order. Parse,
// Load and Validate return a non-empty ErrorList (never a nil one) when the
// configuration is rejected.
type ErrorList []*Error

// Error returns the errors one per line.
func (l ErrorList) Error() string {
	if len(l) == 1 {
		return l[0].Error()
	}
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap returns the list's errors, so that errors.Is and errors.As look
// through them.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// position is a line and column in the source, 1-based.
type position struct{ line, col int }

// collector accumulates the errors of one Parse or Validate.
type collector struct {
	source string
	// posLog lists field paths and where they are in the file, in the
	// order the decoder met them (empty for a Config built by hand); pos
	// indexes its first posIndexed entries, built only when an error needs
	// a position (a later entry for a path wins).
	posLog     []posEntry
	pos        map[string]position
	posIndexed int
	// failed holds the paths already reported. A path is reported once, and
	// not at all when an ancestor was: one mistake, one message.
	failed map[string]bool
	list   ErrorList
}

func newCollector(source string) *collector {
	return &collector{source: source, failed: map[string]bool{}}
}

type posEntry struct {
	path string
	p    position
}

// posOfOrZero is posOf without the flag (the zero position if unknown).
func (c *collector) posOfOrZero(path string) position {
	p, _ := c.posOf(path)
	return p
}

// setPos records where field path is.
func (c *collector) setPos(path string, p position) {
	c.posLog = append(c.posLog, posEntry{path, p})
}

// posOf returns where field path is, if recorded.
func (c *collector) posOf(path string) (position, bool) {
	if c.posIndexed < len(c.posLog) {
		if c.pos == nil {
			c.pos = make(map[string]position, len(c.posLog))
		}
		for _, e := range c.posLog[c.posIndexed:] {
			c.pos[e.path] = e.p
		}
		c.posIndexed = len(c.posLog)
	}
	p, ok := c.pos[path]
	return p, ok
}

// at reports a problem with field path at an explicit position.
func (c *collector) at(p position, path string, kind error, format string, args ...any) {
	if c.suppressed(path) {
		return
	}
	if path != "" {
		c.failed[path] = true
	}
	c.add(p, path, kind, format, args...)
}

// add reports a problem without suppressing later reports about path (for
// a duplicate key, whose path names the first occurrence too).
func (c *collector) add(p position, path string, kind error, format string, args ...any) {
	c.list = append(c.list, &Error{
		Source: c.source, Line: p.line, Column: p.col,
		Field: path, Msg: fmt.Sprintf(format, args...), Err: kind,
	})
}

// errf reports a problem with field path at the position recorded for the path
// or, failing that, for its nearest recorded ancestor.
func (c *collector) errf(path string, kind error, format string, args ...any) {
	c.at(c.lookup(path), path, kind, format, args...)
}

// lookup returns the position of path or of its nearest recorded ancestor.
func (c *collector) lookup(path string) position {
	for p := path; p != ""; p = parentPath(p) {
		if pos, ok := c.posOf(p); ok {
			return pos
		}
	}
	return position{}
}

// where describes path for a message that refers to another place:
// "services[0], line 9", or just the path when its line is unknown.
func (c *collector) where(path string) string {
	return path + c.onLine(path, ", line %d")
}

// onLine formats the line of path with format, or returns "" when the line is
// unknown.
func (c *collector) onLine(path, format string) string {
	if p := c.lookup(path); p.line > 0 {
		return fmt.Sprintf(format, p.line)
	}
	return ""
}

func (c *collector) suppressed(path string) bool {
	for p := path; p != ""; p = parentPath(p) {
		if c.failed[p] {
			return true
		}
	}
	return false
}

// result returns the sorted, capped list, or nil when nothing was reported.
func (c *collector) result() error {
	if len(c.list) == 0 {
		return nil
	}
	l := c.list
	sort.SliceStable(l, func(i, j int) bool {
		if l[i].Line != l[j].Line {
			return l[i].Line < l[j].Line
		}
		return l[i].Column < l[j].Column
	})
	if len(l) > MaxErrors {
		more := len(l) - MaxErrors
		l = append(l[:MaxErrors:MaxErrors], &Error{
			Source: c.source,
			Msg:    fmt.Sprintf("too many errors: %d more not shown", more),
		})
	}
	return l
}

// parentPath strips the last element of a field path: "a.b[2]" -> "a.b",
// "a.b" -> "a", "a" -> "".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// Field path builders, shared by the decoder and the validator so that both
// name a field the same way.

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func index(parent string, i int) string { return parent + "[" + strconv.Itoa(i) + "]" }

// keyed names a map entry: "pools.web" for plain names, `pools["we b"]`
// otherwise, so that the path can be cut at '.' and '[' unambiguously.
func keyed(parent, name string) string {
	plain := name != ""
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			plain = false
			break
		}
	}
	if plain {
		return parent + "." + name
	}
	return parent + "[" + strconv.Quote(name) + "]"
}
