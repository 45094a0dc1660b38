package config

import (
	"net"
	"net/netip"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// The value codecs of the key table: one per kind of value, each reading,
// writing, checking and documenting a field of T that at points to.

// plain holds what the simple codecs share: the field and its default.
type plain[T, V any] struct {
	at  func(*T) *V
	def V
}

func (p plain[T, V]) reset(obj *T) { *p.at(obj) = p.def }

func (p plain[T, V]) clear(obj *T) {
	var zero V
	*p.at(obj) = zero
}

// check accepts every value the type holds; codecs with bounds override it.
func (p plain[T, V]) check(obj *T, at loc, c *collector) {}

// text is a string.
type text[T any] struct{ plain[T, string] }

func textOf[T any](at func(*T) *string) value[T] { return text[T]{plain[T, string]{at: at}} }

func (v text[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.str(n, path)
}
func (v text[T]) encode(obj *T) *yaml.Node { return str(*v.at(obj)) }
func (v text[T]) isZero(obj *T) bool       { return *v.at(obj) == "" }
func (v text[T]) about() about             { return about{typ: "string", def: quoteDef(v.def)} }

func quoteDef(s string) string {
	if s == "" {
		return ""
	}
	return s
}

// integer is the Go types of integer fields.
type integer interface {
	~uint8 | ~uint16 | ~uint32 | ~int | ~int32
}

// number is a decimal integer within lo..hi. The reader refuses what the
// type cannot hold and, for a field bounded from 0, what is over hi; the
// check refuses what is outside lo..hi, so that its message names both.
type number[T any, V integer] struct {
	plain[T, V]
	lo, hi int64
	max    uint64 // the largest value of V
}

// numberOf is an integer field with bounds lo..hi.
func numberOf[T any, V integer](at func(*T) *V, def V, lo, hi int64) value[T] {
	var z V
	max := uint64(^z)
	if int64(^z) < 0 { // signed
		max = 1<<31 - 1
	}
	return number[T, V]{plain[T, V]{at, def}, lo, hi, max}
}

// fullRange is numberOf bounded by the type alone.
func fullRange[T any, V integer](at func(*T) *V, def V) value[T] {
	v := numberOf(at, def, 0, 0).(number[T, V])
	v.hi = int64(v.max)
	return v
}

func (v number[T, V]) decode(d *decoder, n *ynode, path string, obj *T) {
	max := v.max
	if v.lo == 0 {
		max = min(max, uint64(v.hi))
	}
	if u, ok := d.uint(n, path, max); ok {
		*v.at(obj) = V(u)
	}
}
func (v number[T, V]) encode(obj *T) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(*v.at(obj)), 10)}
}
func (v number[T, V]) isZero(obj *T) bool { return *v.at(obj) == 0 }
func (v number[T, V]) check(obj *T, at loc, c *collector) {
	if x := int64(*v.at(obj)); x < v.lo || x > v.hi {
		c.errf(at.path(), ErrInvalid, "%d is out of range %d..%d", x, v.lo, v.hi)
	}
}
func (v number[T, V]) about() about {
	a := about{typ: "integer", bounds: rangeText(v.lo, v.hi)}
	if v.def != 0 {
		a.def = strconv.FormatInt(int64(v.def), 10)
	}
	return a
}

// duration is a Go duration ("90s", "15m") within lo..hi, in whole seconds
// when whole; with unset, 0 is left to the rules (it means "not given").
// format writes it (formatDuration unless set).
type duration[T any] struct {
	plain[T, time.Duration]
	lo, hi       time.Duration
	whole, unset bool
	// byRules: the bounds are checked by the rules (with other keys).
	byRules bool
	// zero says what 0 means, for the message of a value out of bounds.
	zero   string
	format func(time.Duration) string
}

// checkedByRules leaves the bounds to the rules that check v with other
// keys.
func (v duration[T]) checkedByRules() duration[T] {
	v.byRules = true
	return v
}

func durationOf[T any](at func(*T) *time.Duration, def, lo, hi time.Duration) duration[T] {
	return duration[T]{plain: plain[T, time.Duration]{at, def}, lo: lo, hi: hi, format: formatDuration}
}

func (v duration[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	if dur, ok := d.duration(n, path); ok {
		*v.at(obj) = dur
	}
}
func (v duration[T]) encode(obj *T) *yaml.Node { return str(v.format(*v.at(obj))) }
func (v duration[T]) isZero(obj *T) bool       { return *v.at(obj) == 0 }
func (v duration[T]) check(obj *T, at loc, c *collector) {
	x := *v.at(obj)
	switch {
	case v.byRules, x == 0 && v.unset:
	case v.whole && (x%time.Second != 0 || x < v.lo || x > v.hi):
		c.errf(at.path(), ErrInvalid, "%s is not a whole number of seconds in %s..%s%s", v.format(x), v.format(v.lo), v.format(v.hi), v.zero)
	case x < v.lo || x > v.hi:
		c.errf(at.path(), ErrInvalid, "%s is out of range %s..%s", v.format(x), v.format(v.lo), v.format(v.hi))
	}
}
func (v duration[T]) about() about {
	a := about{typ: "duration", bounds: v.format(v.lo) + ".." + v.format(v.hi)}
	if v.whole {
		a.bounds += ", whole seconds"
	}
	if v.def != 0 {
		a.def = v.format(v.def)
	}
	return a
}

// fraction is a decimal number within 0..1.
type fraction[T any] struct{ plain[T, float64] }

func fractionOf[T any](at func(*T) *float64, def float64) value[T] {
	return fraction[T]{plain[T, float64]{at, def}}
}

func (v fraction[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.fraction(n, path)
}
func (v fraction[T]) encode(obj *T) *yaml.Node { return float(*v.at(obj)) }
func (v fraction[T]) isZero(obj *T) bool       { return *v.at(obj) == 0 }
func (v fraction[T]) check(obj *T, at loc, c *collector) {
	if x := *v.at(obj); !(x >= 0 && x <= 1) { // also catches NaN
		c.errf(at.path(), ErrInvalid, "%v is out of range 0..1", x)
	}
}
func (v fraction[T]) about() about {
	a := about{typ: "number", bounds: "0..1"}
	if v.def != 0 {
		a.def = strconv.FormatFloat(v.def, 'g', -1, 64)
	}
	return a
}

// flag is true or false; false by default.
type flag[T any] struct{ plain[T, bool] }

func flagOf[T any](at func(*T) *bool) value[T] { return flag[T]{plain[T, bool]{at: at}} }

func (v flag[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.boolean(n, path)
}
func (v flag[T]) encode(obj *T) *yaml.Node { return boolean(*v.at(obj)) }
func (v flag[T]) isZero(obj *T) bool       { return !*v.at(obj) }
func (v flag[T]) about() about             { return about{typ: "boolean", def: "false"} }

// address is an IP address.
type address[T any] struct{ plain[T, netip.Addr] }

func addressOf[T any](at func(*T) *netip.Addr) value[T] {
	return address[T]{plain[T, netip.Addr]{at: at}}
}

func (v address[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.addr(n, path)
}
func (v address[T]) encode(obj *T) *yaml.Node { return str(v.at(obj).String()) }
func (v address[T]) isZero(obj *T) bool       { return !v.at(obj).IsValid() }
func (v address[T]) about() about             { return about{typ: "IP address"} }

// hwAddr is a MAC address.
type hwAddr[T any] struct{ plain[T, net.HardwareAddr] }

func hwAddrOf[T any](at func(*T) *net.HardwareAddr) value[T] {
	return hwAddr[T]{plain[T, net.HardwareAddr]{at: at}}
}

func (v hwAddr[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.mac(n, path)
}
func (v hwAddr[T]) encode(obj *T) *yaml.Node { return str(v.at(obj).String()) }
func (v hwAddr[T]) isZero(obj *T) bool       { return *v.at(obj) == nil }
func (v hwAddr[T]) about() about             { return about{typ: "MAC address"} }

// choice is one of an enumeration's names; with unset, the zero value is
// allowed (and never written).
type choice[T any, V enum] struct {
	plain[T, V]
	names []enumName[V]
	unset bool
}

func choiceOf[T any, V enum](at func(*T) *V, def V, names []enumName[V]) choice[T, V] {
	return choice[T, V]{plain: plain[T, V]{at, def}, names: names}
}

// decode sets the zero value when n is not one of the names, so that the
// rules do not report the default as if the file had chosen it.
func (v choice[T, V]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = decodeEnum(d, n, path, v.names)
}
func (v choice[T, V]) encode(obj *T) *yaml.Node { return str(enumString(v.names, *v.at(obj))) }
func (v choice[T, V]) isZero(obj *T) bool       { return *v.at(obj) == 0 }
func (v choice[T, V]) check(obj *T, at loc, c *collector) {
	x := *v.at(obj)
	if x == 0 && v.unset || enumValid(v.names, x) {
		return
	}
	name := enumString(v.names, x)
	if s, ok := any(x).(interface{ String() string }); ok {
		name = s.String()
	}
	c.errf(at.path(), ErrInvalid, "%s is not one of %s", name, enumList(v.names))
}
func (v choice[T, V]) about() about {
	a := about{typ: "one of " + enumList(v.names)}
	if enumValid(v.names, v.def) {
		a.def = enumString(v.names, v.def)
	}
	return a
}

// list is a list of values each read by one, written by show.
type list[T, E any] struct {
	plain[T, []E]
	typ  string
	read func(d *decoder, n *ynode, path string) (E, bool)
	show func(E) string
}

func (v list[T, E]) decode(d *decoder, n *ynode, path string, obj *T) {
	items, paths := d.seqPaths(n, path)
	for i, item := range items {
		if e, ok := v.read(d, item, paths[i]); ok {
			*v.at(obj) = append(*v.at(obj), e)
		}
	}
}
func (v list[T, E]) encode(obj *T) *yaml.Node {
	items := *v.at(obj)
	s := make([]string, len(items))
	for i, e := range items {
		s[i] = v.show(e)
	}
	return strList(s)
}
func (v list[T, E]) isZero(obj *T) bool { return len(*v.at(obj)) == 0 }
func (v list[T, E]) about() about       { return about{typ: "list of " + v.typ} }

// strings is a list of strings. Unlike the other lists, an item that is
// not a string keeps its place (as "").
func stringsOf[T any](at func(*T) *[]string) value[T] {
	return list[T, string]{plain: plain[T, []string]{at: at}, typ: "strings",
		read: func(d *decoder, n *ynode, path string) (string, bool) {
			s, _ := d.str(n, path)
			return s, true
		},
		show: func(s string) string { return s }}
}

func addressesOf[T any](at func(*T) *[]netip.Addr) value[T] {
	return list[T, netip.Addr]{plain: plain[T, []netip.Addr]{at: at}, typ: "IP addresses",
		read: (*decoder).addr, show: netip.Addr.String}
}

func addrPortsOf[T any](at func(*T) *[]netip.AddrPort) value[T] {
	return list[T, netip.AddrPort]{plain: plain[T, []netip.AddrPort]{at: at}, typ: "ADDR:PORT",
		read: (*decoder).addrPort, show: netip.AddrPort.String}
}

// addrPort is an ADDR:PORT ([ADDR]:PORT for IPv6) with a port.
type addrPort[T any] struct{ plain[T, netip.AddrPort] }

func addrPortOf[T any](at func(*T) *netip.AddrPort) value[T] {
	return addrPort[T]{plain[T, netip.AddrPort]{at: at}}
}

func (v addrPort[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.addrPort(n, path)
}
func (v addrPort[T]) encode(obj *T) *yaml.Node { return str(v.at(obj).String()) }
func (v addrPort[T]) isZero(obj *T) bool       { return !v.at(obj).IsValid() }
func (v addrPort[T]) about() about             { return about{typ: "ADDR:PORT"} }

// payload is bytes: a string, or !!binary (base64) for what is not text.
type payload[T any] struct{ plain[T, []byte] }

func payloadOf[T any](at func(*T) *[]byte) value[T] { return payload[T]{plain[T, []byte]{at: at}} }

func (v payload[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.bytes(n, path)
}
func (v payload[T]) encode(obj *T) *yaml.Node { return bytesNode(*v.at(obj)) }
func (v payload[T]) isZero(obj *T) bool       { return len(*v.at(obj)) == 0 }
func (v payload[T]) about() about             { return about{typ: "string or !!binary"} }

// prefixLen is a prefix length 1..max; 0 (absent) is the whole address.
type prefixLen[T any] struct {
	plain[T, uint8]
	max uint8
}

func prefixLenOf[T any](at func(*T) *uint8, max uint8) value[T] {
	return prefixLen[T]{plain[T, uint8]{at: at}, max}
}

func (v prefixLen[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj), _ = d.prefixLen(n, path, uint64(v.max))
}
func (v prefixLen[T]) encode(obj *T) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(*v.at(obj)))}
}
func (v prefixLen[T]) isZero(obj *T) bool { return *v.at(obj) == 0 }
func (v prefixLen[T]) check(obj *T, at loc, c *collector) {
	if x := *v.at(obj); x > v.max {
		c.errf(at.path(), ErrInvalid, "%d is out of range 1..%d (a prefix length)", x, v.max)
	}
}
func (v prefixLen[T]) about() about {
	return about{typ: "prefix length", def: "the whole address", bounds: rangeText(1, int64(v.max))}
}

// inner is a mapping of section sec held in the field at.
type inner[T, S any] struct {
	at  func(*T) *S
	sec *section[S]
}

func nestedOf[T, S any](at func(*T) *S, sec *section[S]) value[T] { return inner[T, S]{at, sec} }

func (v inner[T, S]) decode(d *decoder, n *ynode, path string, obj *T) {
	v.sec.decode(d, n, path, v.at(obj))
}
func (v inner[T, S]) encode(obj *T) *yaml.Node { return v.sec.encode(v.at(obj)) }
func (v inner[T, S]) isZero(obj *T) bool       { return false }
func (v inner[T, S]) reset(obj *T)             { v.sec.reset(v.at(obj)) }
func (v inner[T, S]) clear(obj *T) {
	var zero S
	*v.at(obj) = zero
}
func (v inner[T, S]) check(obj *T, at loc, c *collector) { v.sec.check(v.at(obj), at, c) }
func (v inner[T, S]) about() about                       { return about{typ: "mapping", sub: v.sec} }

// optional is a mapping of section sec held by pointer: nil when absent.
type optional[T, S any] struct {
	at  func(*T) **S
	sec *section[S]
}

func optionalOf[T, S any](at func(*T) **S, sec *section[S]) value[T] {
	return optional[T, S]{at, sec}
}

func (v optional[T, S]) decode(d *decoder, n *ynode, path string, obj *T) {
	s := new(S)
	v.sec.decode(d, n, path, s)
	*v.at(obj) = s
}
func (v optional[T, S]) encode(obj *T) *yaml.Node { return v.sec.encode(*v.at(obj)) }
func (v optional[T, S]) isZero(obj *T) bool       { return *v.at(obj) == nil }
func (v optional[T, S]) reset(obj *T)             { *v.at(obj) = nil }
func (v optional[T, S]) clear(obj *T)             { *v.at(obj) = nil }
func (v optional[T, S]) check(obj *T, at loc, c *collector) {
	if s := *v.at(obj); s != nil {
		v.sec.check(s, at, c)
	}
}
func (v optional[T, S]) about() about { return about{typ: "mapping", def: "absent", sub: v.sec} }

// entries is a list of mappings of section sec.
type entries[T, S any] struct {
	at  func(*T) *[]S
	sec *section[S]
	typ string
}

func entriesOf[T, S any](at func(*T) *[]S, sec *section[S], typ string) value[T] {
	return entries[T, S]{at, sec, typ}
}

func (v entries[T, S]) decode(d *decoder, n *ynode, path string, obj *T) {
	items, paths := d.seqPaths(n, path)
	if len(items) == 0 {
		return
	}
	out := make([]S, len(items))
	for i, item := range items {
		v.sec.decode(d, item, paths[i], &out[i])
	}
	*v.at(obj) = out
}
func (v entries[T, S]) encode(obj *T) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for i := range *v.at(obj) {
		n.Content = append(n.Content, v.sec.encode(&(*v.at(obj))[i]))
	}
	return n
}
func (v entries[T, S]) isZero(obj *T) bool { return len(*v.at(obj)) == 0 }
func (v entries[T, S]) reset(obj *T)       { *v.at(obj) = nil }
func (v entries[T, S]) clear(obj *T)       { *v.at(obj) = nil }
func (v entries[T, S]) check(obj *T, at loc, c *collector) {
	items := *v.at(obj)
	if len(items) == 0 {
		return
	}
	base := at.path()
	for i := range items {
		v.sec.check(&items[i], loc{base: base, i: i, hasIndex: true}, c)
	}
}
func (v entries[T, S]) about() about { return about{typ: "list of " + v.typ, sub: v.sec} }

// named is a mapping from the names of entries (each a kind) to mappings
// of section sec; name points to an entry's name.
type named[T, S any] struct {
	at   func(*T) *[]S
	sec  *section[S]
	kind string
	name func(*S) *string
}

func namedOf[T, S any](at func(*T) *[]S, sec *section[S], kind string, name func(*S) *string) value[T] {
	return named[T, S]{at, sec, kind, name}
}

func (v named[T, S]) decode(d *decoder, n *ynode, path string, obj *T) {
	*v.at(obj) = namedEntries(d, n, path, v.kind, func(name string, n *ynode, path string) S {
		var s S
		*v.name(&s) = name
		v.sec.decode(d, n, path, &s)
		return s
	})
}
func (v named[T, S]) encode(obj *T) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := range *v.at(obj) {
		s := &(*v.at(obj))[i]
		n.Content = append(n.Content, str(*v.name(s)), v.sec.encode(s))
	}
	return n
}
func (v named[T, S]) isZero(obj *T) bool { return len(*v.at(obj)) == 0 }
func (v named[T, S]) reset(obj *T)       { *v.at(obj) = nil }
func (v named[T, S]) clear(obj *T)       { *v.at(obj) = nil }
func (v named[T, S]) check(obj *T, at loc, c *collector) {
	base := at.path()
	for i := range *v.at(obj) {
		s := &(*v.at(obj))[i]
		v.sec.check(s, loc{base: keyed(base, *v.name(s))}, c)
	}
}
func (v named[T, S]) about() about {
	return about{typ: "mapping from name to " + v.kind, sub: v.sec}
}

// drainState is Backend.Drain as the file spells it: state active or
// drain.
type drainState struct{}

type backendState uint8

const (
	stateActive backendState = iota + 1
	stateDrain
)

var stateNames = []enumName[backendState]{{"active", stateActive}, {"drain", stateDrain}}

func (drainState) decode(d *decoder, n *ynode, path string, b *Backend) {
	st, _ := decodeEnum(d, n, path, stateNames)
	b.Drain = st == stateDrain
}
func (drainState) encode(b *Backend) *yaml.Node           { return str("drain") }
func (drainState) isZero(b *Backend) bool                 { return !b.Drain }
func (drainState) reset(b *Backend)                       { b.Drain = false }
func (drainState) clear(b *Backend)                       { b.Drain = false }
func (drainState) check(b *Backend, at loc, c *collector) {}
func (drainState) about() about {
	return about{typ: "one of " + enumList(stateNames), def: "active"}
}
