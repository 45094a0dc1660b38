package config

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The machinery behind the key table (keys.go). Each mapping of the file is
// a section: an ordered list of keys, each with its name, its value codec
// (type, default, bounds), its documentation and its rules of presence. A
// section reads a mapping into a Go struct, writes the struct back (Marshal),
// checks it (Validate) and documents itself (docs/CONFIG.md): the four are
// derived from the one declaration. Rules that span keys are code
// (validate.go and its neighbours).

// key is one key of a section whose Go form is T.
type key[T any] struct {
	name string
	// older is an older name of the key, still read, never written; a
	// mapping may not give both.
	older string
	doc   string
	v     value[T]
	// need makes the key's absence an error, with need as the message,
	// where its zero value is meaningful (so that the validator cannot
	// tell).
	need string
	// req makes the zero value an error, with req as the message (found by
	// the validator, hence also in a Config built by hand).
	req string
	// keep writes the value even when it is zero (absent would mean its
	// default); nil writes non-zero values only.
	keep func(*T) bool
	// only limits the key to objects of some type or mode (read by an
	// earlier key). A key that does not apply is zero, refused when given
	// and never written.
	only *onlyWhen[T]
	// derive fills in the default of an absent key from the other keys,
	// once they are read; an error is reported at the mapping. defDoc says
	// what it is for the reference.
	derive func(*T) error
	defDoc string
}

// onlyWhen is a key's only: why returns "" when the key applies to the
// object, else why it does not; doc says when it applies.
type onlyWhen[T any] struct {
	why func(*T) string
	doc string
}

// always is a keep that writes the key in every case.
func always[T any](*T) bool { return true }

// value is how one key's value is read into, written from and checked on
// the Go struct T that holds it.
type value[T any] interface {
	decode(d *decoder, n *ynode, path string, obj *T)
	encode(obj *T) *yaml.Node
	isZero(obj *T) bool
	// reset sets the default; clear the zero value.
	reset(obj *T)
	clear(obj *T)
	// check reports a value outside the key's type or bounds (a Config
	// built by hand; Parse refuses them while reading).
	check(obj *T, at loc, c *collector)
	about() about
}

// about documents a value: its type, default and bounds as the reference
// shows them, and the section it opens, if any.
type about struct {
	typ, def, bounds string
	sub              describer
}

// section is the keys of one mapping, in the order Marshal writes them.
type section[T any] struct {
	keys []key[T]
	// known lists the names read, older names included, for messages.
	known []string
	// flow writes the mapping on one line ({a: 1, b: 2}).
	flow bool
	// after runs once the mapping is read (a default that depends on the
	// enclosing mapping, a file the value names).
	after func(d *decoder, path string, obj *T)
}

func newSection[T any](flow bool, keys ...key[T]) *section[T] {
	s := &section[T]{keys: keys, flow: flow}
	for _, k := range keys {
		if k.older != "" {
			s.known = append(s.known, k.older)
		}
		s.known = append(s.known, k.name)
	}
	return s
}

func (s *section[T]) reset(obj *T) {
	for i := range s.keys {
		s.keys[i].v.reset(obj)
	}
}

// decode reads mapping n at path into obj, which it first resets to the
// defaults. It reports whether n was a mapping.
func (s *section[T]) decode(d *decoder, n *ynode, path string, obj *T) bool {
	s.reset(obj)
	f := d.fields(n, path, s.known...)
	if f == nil {
		return false
	}
	var absent []*key[T]
	for i := range s.keys {
		k := &s.keys[i]
		v, vp := d.keyValue(f, k.name, k.older)
		if k.only != nil {
			if why := k.only.why(obj); why != "" {
				k.v.clear(obj)
				if v != nil {
					d.c.errf(vp, ErrInvalid, "%s", why)
				}
				continue
			}
		}
		switch {
		case v != nil:
			k.v.decode(d, v, vp, obj)
			if k.older != "" && d.c.failed[vp] {
				// Read under its older name: the checks, which use the
				// name, are not to report it again.
				d.c.failed[join(path, k.name)] = true
			}
		case k.need != "":
			d.c.at(pos(n), join(path, k.name), ErrRequired, "%s", k.need)
		case k.derive != nil:
			absent = append(absent, k)
		}
	}
	for _, k := range absent {
		if err := k.derive(obj); err != nil {
			d.c.at(pos(n), join(path, k.name), ErrRequired, "%v", err)
		}
	}
	if s.after != nil {
		s.after(d, path, obj)
	}
	return true
}

// keyValue returns the value of key name, or of its older name, and its
// path; both given is refused.
func (d *decoder) keyValue(f fieldSet, name, older string) (*ynode, string) {
	v, vp := f.at(name)
	if older == "" {
		return v, vp
	}
	ov, op := f.at(older)
	switch {
	case ov == nil:
	case v != nil:
		d.c.at(pos(ov), op, ErrDuplicate, "%s is the older name of %s: give %s only", older, name, name)
	default:
		return ov, op
	}
	return v, vp
}

func (s *section[T]) encode(obj *T) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if s.flow {
		n.Style = yaml.FlowStyle
	}
	for i := range s.keys {
		k := &s.keys[i]
		if k.only != nil && k.only.why(obj) != "" {
			continue
		}
		if k.v.isZero(obj) && (k.keep == nil || !k.keep(obj)) {
			continue
		}
		n.Content = append(n.Content, str(k.name), k.v.encode(obj))
	}
	return n
}

// check reports the keys of obj, at at, that are missing, out of their
// bounds or given where they do not apply.
func (s *section[T]) check(obj *T, at loc, c *collector) {
	for i := range s.keys {
		k := &s.keys[i]
		kat := at.key(k.name)
		if k.only != nil {
			if why := k.only.why(obj); why != "" {
				if !k.v.isZero(obj) {
					c.errf(kat.path(), ErrInvalid, "%s", why)
				}
				continue
			}
		}
		if k.req != "" && k.v.isZero(obj) {
			c.errf(kat.path(), ErrRequired, "%s", k.req)
			continue
		}
		k.v.check(obj, kat, c)
	}
}

// loc is a field path built only when a message needs it: a check runs
// over every backend of a large file. It is base, then an index (when
// hasIndex), then a key (when name is not empty).
type loc struct {
	base     string
	i        int
	hasIndex bool
	name     string
}

func (l loc) key(name string) loc {
	if l.name != "" {
		return loc{base: l.path(), name: name}
	}
	l.name = name
	return l
}

func (l loc) index(i int) loc { return loc{base: l.path(), i: i, hasIndex: true} }

func (l loc) keyed(name string) loc { return loc{base: keyed(l.path(), name)} }

func (l loc) path() string {
	p := l.base
	if l.hasIndex {
		p = index(p, l.i)
	}
	if l.name != "" {
		p = join(p, l.name)
	}
	return p
}

// keyDoc is one row of the key reference.
type keyDoc struct {
	path, typ, def, bounds, doc string
}

// describer lists the keys of a section for the reference, under path.
type describer interface {
	describe(path string, out *[]keyDoc)
}

func (s *section[T]) describe(path string, out *[]keyDoc) {
	for i := range s.keys {
		k := &s.keys[i]
		a := k.v.about()
		p := join(path, k.name)
		def := a.def
		if k.defDoc != "" {
			def = k.defDoc
		}
		doc := k.doc
		if (k.need != "" || k.req != "") && k.derive == nil {
			doc = "Required. " + doc
		}
		if k.only != nil {
			doc = k.only.doc + ". " + doc
		}
		if k.older != "" {
			doc += fmt.Sprintf(" (Older name: %s.)", k.older)
		}
		*out = append(*out, keyDoc{path: p, typ: a.typ, def: def, bounds: a.bounds, doc: doc})
		if a.sub != nil {
			a.sub.describe(p+subSuffix(a.typ), out)
		}
	}
}

// subSuffix is what a path gains entering a value of type typ: an entry of
// a list, a named entry of a mapping.
func subSuffix(typ string) string {
	switch {
	case strings.HasPrefix(typ, "list"):
		return "[]"
	case strings.HasPrefix(typ, "mapping from name"):
		return ".<name>"
	}
	return ""
}

// rangeText writes a bound lo..hi.
func rangeText(lo, hi int64) string {
	return strconv.FormatInt(lo, 10) + ".." + strconv.FormatInt(hi, 10)
}
