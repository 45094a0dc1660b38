package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads the configuration file at path and parses it with Parse, naming
// the file by path in error messages. A file that cannot be read gives an
// error wrapping the *fs.PathError; a file that is rejected gives an
// ErrorList.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes and validates one configuration file. source names the file
// in error messages (typically its path). On success the Config has every
// default filled in (the node name defaults to the host name) and has passed
// Validate. Otherwise the error is an ErrorList holding every problem found,
// in file order, each an *Error with its field path and line.
//
// Parse accepts exactly one YAML document. Unknown fields, duplicate keys,
// YAML aliases and merge keys are rejected; integers must be written in
// decimal; durations use Go's syntax ("90s", "15m").
func Parse(data []byte, source string) (*Config, error) {
	return parse(data, source, true)
}

// parse is Parse; with fast false, yaml.v3 reads every document (the fast
// reader's tests compare the two).
func parse(data []byte, source string, fast bool) (*Config, error) {
	c := newCollector(source)
	if len(data) > MaxFileSize {
		c.at(position{}, "", ErrTooLarge, "file is larger than %d bytes", MaxFileSize)
		return nil, c.result()
	}
	return decodeDocument(c, readDocument(data, c, fast))
}

// decodeDocument decodes and validates a document's root node; root is nil
// when reading it failed (c holds why).
func decodeDocument(c *collector, root *ynode) (*Config, error) {
	if root == nil {
		return nil, c.result()
	}
	d := decoder{c: c}
	cfg := d.config(root)
	if cfg == nil {
		return nil, c.result()
	}
	validate(cfg, c)
	if err := c.result(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// yamlLine matches the position prefix of yaml.v3's error messages.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// readDocument parses data as a single YAML document and returns its root
// node, or nil after reporting why there is none. Documents in the subset
// of YAML the fast reader knows (fastyaml.go) are read by it, to the same
// tree; all others by yaml.v3 (all documents when fast is false).
func readDocument(data []byte, c *collector, fast bool) (root *ynode) {
	if fast {
		if root, nodes, ok := readFast(data); ok {
			// The decoder records a position for about two nodes in
			// three (a key and its value count once).
			c.posLog = make([]posEntry, 0, nodes*2/3)
			return root
		}
	}
	// yaml.v3 is third-party code fed untrusted input; a panic in it must
	// not take the daemon down with a config reload.
	defer func() {
		if r := recover(); r != nil {
			root = nil
			c.at(position{}, "", ErrSyntax, "yaml decoder failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			c.at(position{}, "", ErrEmpty, "file holds no YAML document")
		} else {
			reportSyntax(c, err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		reportSyntax(c, err)
		return nil
	default:
		c.at(position{extra.Line, extra.Column}, "", ErrSyntax,
			"a second YAML document starts here; the file must hold exactly one (remove the extra '---')")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		c.at(position{doc.Line, doc.Column}, "", ErrEmpty, "file holds no configuration")
		return nil
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		c.at(position{top.Line, top.Column}, "", ErrEmpty, "the document is empty")
		return nil
	}
	return fromYAML(top)
}

// yamlParserErrors are the messages of yaml.v3's parser (as opposed to its
// scanner). For these, yaml.v3 v3.0.1 (decode.go, parser.fail) reports the
// 0-based line of the error's context and leaves the line out when that is 0;
// its scanner errors carry the 1-based line.
var yamlParserErrors = []string{
	"did not find expected ",
	"found undefined tag handle",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// reportSyntax reports a yaml.v3 error with its 1-based line where known.
func reportSyntax(c *collector, err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	for _, p := range yamlParserErrors {
		if strings.HasPrefix(msg, p) {
			line++
			break
		}
	}
	c.at(position{line: line}, "", ErrSyntax, "%s", msg)
}

// decoder turns the YAML node tree into a Config. It checks what the Config
// cannot represent (shapes, types, unknown and duplicate keys, unparseable
// values, missing fields whose zero value is meaningful) and records the
// position of every field for the validator.
type decoder struct {
	c *collector
	// kvs is the slab the entries keys returns are cut from: a large file
	// has many small mappings.
	kvs []keyVal
}

func pos(n *ynode) position { return position{n.Line, n.Column} }

// record notes where field path is: the value for scalars, the key otherwise.
func (d *decoder) record(path string, key, val *ynode) {
	if val != nil && val.Kind == yaml.ScalarNode || key == nil {
		d.c.setPos(path, pos(val))
		return
	}
	d.c.setPos(path, pos(key))
}

// usable reports whether n can be decoded at all, reporting aliases.
func (d *decoder) usable(n *ynode, path string) bool {
	if n.Kind == yaml.AliasNode {
		d.c.at(pos(n), path, ErrSyntax, "YAML aliases (*%s) are not supported; write the value out", n.Value)
		return false
	}
	return true
}

func isNull(n *ynode) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// fields checks that n is a mapping whose keys are all in known, each at most
// once, and returns the values by key. It records every field's position.
func (d *decoder) fields(n *ynode, path string, known ...string) fieldSet {
	if !d.usable(n, path) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.c.at(pos(n), path, ErrInvalid, "must be a mapping (%s), not %s", strings.Join(known, ", "), describe(n))
		return nil
	}
	keys := d.keys(n, path, func(name string, k *ynode) bool {
		for _, f := range known {
			if f == name {
				return true
			}
		}
		d.c.at(pos(k), join(path, name), ErrUnknownField, "unknown field %q (known fields: %s)",
			name, strings.Join(known, ", "))
		return false
	})
	for i := range keys {
		keys[i].path = join(path, keys[i].name)
		d.record(keys[i].path, keys[i].key, keys[i].val)
	}
	if keys == nil {
		return fieldSet{}
	}
	return fieldSet(keys)
}

// fieldSet is a mapping's fields, each name at most once, in file order.
type fieldSet []keyVal

// at returns the value of field name and its path, nil and "" if absent.
func (f fieldSet) at(name string) (*ynode, string) {
	for _, kv := range f {
		if kv.name == name {
			return kv.val, kv.path
		}
	}
	return nil, ""
}

type keyVal struct {
	name     string
	path     string // the field's path; set by fields only
	key, val *ynode
}

// keys returns the entries of mapping n in file order, after reporting
// non-string keys, merge keys and duplicates (the first occurrence is kept),
// and dropping the keys accept refuses.
func (d *decoder) keys(n *ynode, path string, accept func(string, *ynode) bool) []keyVal {
	var out []keyVal
	if m := len(n.Content) / 2; m <= 16 {
		if len(d.kvs) < m {
			d.kvs = make([]keyVal, 1024)
		}
		out = d.kvs[:0:m]
		d.kvs = d.kvs[m:]
	} else {
		out = make([]keyVal, 0, m)
	}
	// seen holds the line of each key so far; small mappings (most of a
	// large file: backends) look back through their keys instead.
	var seen map[string]int
	if len(n.Content) > 32 {
		seen = make(map[string]int, len(n.Content)/2)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !keyUsable(k) {
			if k.Kind != yaml.ScalarNode || isNull(k) {
				d.c.at(pos(k), path, ErrInvalid, "keys must be plain strings, not %s", describe(k))
			} else {
				d.c.at(pos(k), path, ErrSyntax, "YAML merge keys (<<) are not supported; write the fields out")
			}
			continue
		}
		if line, dup := firstLine(seen, n.Content[:i], k.Value); dup {
			d.c.add(pos(k), join(path, k.Value), ErrDuplicate, "duplicate key %q (first at line %d)", k.Value, line)
			continue
		}
		if seen != nil {
			seen[k.Value] = k.Line
		}
		if accept != nil && !accept(k.Value, k) {
			continue
		}
		out = append(out, keyVal{name: k.Value, key: k, val: v})
	}
	return out
}

// keyUsable reports whether mapping key k names a field: a non-null scalar
// other than a merge key.
func keyUsable(k *ynode) bool {
	return k.Kind == yaml.ScalarNode && !isNull(k) && k.Tag != "!!merge"
}

// firstLine returns the line of the first usable key named name: from
// seen, or when seen is nil from the keys of content (a mapping's entries
// before the key looked for).
func firstLine(seen map[string]int, content []*ynode, name string) (int, bool) {
	if seen != nil {
		line, ok := seen[name]
		return line, ok
	}
	for i := 0; i+1 < len(content); i += 2 {
		if k := content[i]; k.Value == name && keyUsable(k) {
			return k.Line, true
		}
	}
	return 0, false
}

// seq checks that n is a sequence and returns its items, recording their
// positions as path[i].
func (d *decoder) seq(n *ynode, path string) []*ynode {
	items, _ := d.seqPaths(n, path)
	return items
}

// seqPaths is seq that also returns the items' paths.
func (d *decoder) seqPaths(n *ynode, path string) ([]*ynode, []string) {
	if !d.usable(n, path) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		d.c.at(pos(n), path, ErrInvalid, "must be a list, not %s", describe(n))
		return nil, nil
	}
	paths := make([]string, len(n.Content))
	for i, item := range n.Content {
		paths[i] = index(path, i)
		d.c.setPos(paths[i], pos(item))
	}
	return n.Content, paths
}

// scalar checks that n is a non-null scalar and returns its text.
func (d *decoder) scalar(n *ynode, path, what string) (string, bool) {
	if !d.usable(n, path) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.c.at(pos(n), path, ErrInvalid, "must be %s, not %s", what, describe(n))
		return "", false
	}
	return n.Value, true
}

// str decodes a string. The string is a copy: the fast reader's values
// share the whole file's text, which a Config must not keep alive.
func (d *decoder) str(n *ynode, path string) (string, bool) {
	s, ok := d.scalar(n, path, "a string")
	return strings.Clone(s), ok
}

// uint decodes a decimal integer between 0 and max.
func (d *decoder) uint(n *ynode, path string, max uint64) (uint64, bool) {
	s, ok := d.scalar(n, path, "an integer")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	switch {
	case n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 || !isDecimal(strings.TrimPrefix(s, "-")):
		d.c.at(pos(n), path, ErrInvalid, "must be a decimal integer, not %q", s)
		return 0, false
	case err != nil || v > max:
		d.c.at(pos(n), path, ErrInvalid, "%s is out of range 0..%d", s, max)
		return 0, false
	}
	return v, true
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func (d *decoder) duration(n *ynode, path string) (time.Duration, bool) {
	s, ok := d.scalar(n, path, "a duration")
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.c.at(pos(n), path, ErrInvalid, "%q is not a duration: write a number with a unit, such as 90s, 15m or 1h", s)
		return 0, false
	}
	return v, true
}

// int decodes a decimal integer between min and max (which may be negative).
func (d *decoder) int(n *ynode, path string, min, max int64) (int64, bool) {
	s, ok := d.scalar(n, path, "an integer")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 || !isDecimal(strings.TrimPrefix(s, "-")):
		d.c.at(pos(n), path, ErrInvalid, "must be a decimal integer, not %q", s)
		return 0, false
	case err != nil || v < min || v > max:
		d.c.at(pos(n), path, ErrInvalid, "%s is out of range %d..%d", s, min, max)
		return 0, false
	}
	return v, true
}

// fraction decodes a decimal number between 0 and 1, such as 0.5 or 1.
func (d *decoder) fraction(n *ynode, path string) (float64, bool) {
	s, ok := d.scalar(n, path, "a number between 0 and 1")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 || !isDecimalFloat(s) || err != nil:
		d.c.at(pos(n), path, ErrInvalid, "must be a decimal number between 0 and 1, such as 0.5, not %q", s)
		return 0, false
	case v < 0 || v > 1:
		d.c.at(pos(n), path, ErrInvalid, "%s is out of range 0..1", s)
		return 0, false
	}
	return v, true
}

// isDecimalFloat reports whether s is written with digits, one point and an
// optional exponent only (no hex floats, no .inf or .nan).
func isDecimalFloat(s string) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	mant = strings.TrimLeft(mant, "+-")
	whole, frac, _ := strings.Cut(mant, ".")
	if whole == "" && frac == "" || whole != "" && !isDecimal(whole) || frac != "" && !isDecimal(frac) {
		return false
	}
	return !hasExp || isDecimal(strings.TrimLeft(exp, "+-"))
}

// boolean decodes an unquoted true or false.
func (d *decoder) boolean(n *ynode, path string) (bool, bool) {
	s, ok := d.scalar(n, path, "true or false")
	if !ok {
		return false, false
	}
	v, err := strconv.ParseBool(s)
	if err != nil || n.Tag != "!!bool" {
		d.c.at(pos(n), path, ErrInvalid, "must be true or false, not %q", s)
		return false, false
	}
	return v, true
}

// bytes decodes a string as its UTF-8 bytes, or a !!binary scalar (base64)
// as the bytes it encodes, for payloads that are not text. An empty value
// gives nil.
func (d *decoder) bytes(n *ynode, path string) ([]byte, bool) {
	s, ok := d.scalar(n, path, "a string or a !!binary (base64) value")
	if !ok {
		return nil, false
	}
	if n.Tag != "!!binary" {
		if s == "" {
			return nil, true
		}
		return []byte(s), true
	}
	b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		d.c.at(pos(n), path, ErrInvalid, "!!binary value is not base64: %v", err)
		return nil, false
	}
	if len(b) == 0 {
		return nil, true
	}
	return b, true
}

func (d *decoder) addr(n *ynode, path string) (netip.Addr, bool) {
	s, ok := d.scalar(n, path, "an IP address")
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		d.c.at(pos(n), path, ErrInvalid, "%q is not an IP address", s)
		return netip.Addr{}, false
	}
	return a, true
}

func (d *decoder) mac(n *ynode, path string) (net.HardwareAddr, bool) {
	s, ok := d.scalar(n, path, "a MAC address")
	if !ok {
		return nil, false
	}
	m, err := net.ParseMAC(s)
	if err != nil {
		d.c.at(pos(n), path, ErrInvalid, "%q is not a MAC address (write it as 02:00:00:00:00:01)", s)
		return nil, false
	}
	return m, true
}

func decodeEnum[T enum](d *decoder, n *ynode, path string, names []enumName[T]) (T, bool) {
	s, ok := d.scalar(n, path, "one of "+enumList(names))
	if !ok {
		return 0, false
	}
	for _, e := range names {
		if e.name == s {
			return e.val, true
		}
	}
	d.c.at(pos(n), path, ErrInvalid, "%q is not one of %s", s, enumList(names))
	return 0, false
}

// describe names a node's kind for messages.
func describe(n *ynode) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if isNull(n) {
			return "an empty value"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

// config decodes the document's root, or returns nil when it is not a
// mapping (there is then nothing worth validating).
func (d *decoder) config(root *ynode) *Config {
	cfg := &Config{}
	if !configKeys.decode(d, root, "", cfg) {
		return nil
	}
	// bgp.router_id defaults to an IPv4 node.address.
	if b := cfg.BGP; b != nil && b.Mode == BGPSpeaker && !b.RouterID.IsValid() && cfg.Node.Address.Is4() {
		b.RouterID = cfg.Node.Address
	}
	return cfg
}

// namedEntries decodes n, a mapping at path from the names of entries (each
// a kind) to entries, with entry.
func namedEntries[T any](d *decoder, n *ynode, path, kind string, entry func(name string, n *ynode, path string) T) []T {
	if !d.usable(n, path) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.c.at(pos(n), path, ErrInvalid, "must be a mapping from %s name to %s, not %s", kind, kind, describe(n))
		return nil
	}
	var out []T
	for _, kv := range d.keys(n, path, nil) {
		name := strings.Clone(kv.name) // see str
		ep := keyed(path, name)
		d.record(ep, kv.key, kv.val)
		out = append(out, entry(name, kv.val, ep))
	}
	return out
}

// prefixLen decodes a prefix length 1..max.
func (d *decoder) prefixLen(n *ynode, path string, max uint64) (uint8, bool) {
	u, ok := d.uint(n, path, max)
	if ok && u == 0 {
		d.c.at(pos(n), path, ErrInvalid, "0 is out of range 1..%d (a prefix length; leave the key out for the whole address)", max)
		return 0, false
	}
	return uint8(u), ok
}

// addrPort decodes an ADDR:PORT ([v6]:PORT) with a non-zero port.
func (d *decoder) addrPort(n *ynode, path string) (netip.AddrPort, bool) {
	s, ok := d.scalar(n, path, "an ADDR:PORT")
	if !ok {
		return netip.AddrPort{}, false
	}
	a, err := netip.ParseAddrPort(s)
	if err != nil || a.Port() == 0 {
		d.c.at(pos(n), path, ErrInvalid, "%q is not ADDR:PORT with a port from 1 to 65535 ([ADDR]:PORT for IPv6)", s)
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()), true
}
