package config

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// The fast reader: a scanner for the subset of YAML that configuration files
// are written in, building the same node tree (ynode: kind, tag, style,
// value, line and column) that yaml.v3 builds for them, several times
// faster and with a fraction of the allocations. A large generated file
// (3,000 services, 90,000 backends in flow mappings) is its reason to
// exist.
//
// The subset: block mappings whose keys are plain or quoted scalars on one
// line, block sequences (indented or not under their key), flow mappings and
// flow sequences opened and closed on one line, plain scalars on one line,
// single- and double-quoted scalars on one line without escapes, comments,
// blank lines, printable ASCII, spaces only. Anything else — tabs, CR, non-
// ASCII, document markers and directives, anchors, aliases, tags, block
// scalars, multi-line scalars, empty flow values, complex keys, plain
// timestamps, a document that is not a block mapping, nesting deeper than
// fastMaxDepth, a layout yaml.v3 would reject — makes the reader decline the
// whole document and readDocument hand it to yaml.v3, so the fast path never
// changes what a file means or which error it gets: FuzzFastPathMatchesYAML
// holds it to yaml.v3's tree for every input it accepts.
//
// Every step moves forward through the input, each line scanned at most a
// few times: the work is linear in its size.

// fastMaxDepth bounds the nesting the fast reader follows (xlb's schema
// needs 5 levels); deeper documents go to yaml.v3.
const fastMaxDepth = 32

// fastMaxKey bounds the length of a key, quotes included. yaml.v3 (like
// libyaml) refuses implicit keys longer than 1024 characters; well below
// that the fast reader declines instead of having to match the limit
// exactly.
const fastMaxKey = 512

// errDecline is the panic value that abandons the fast path.
type declineError struct{}

var errDecline = declineError{}

// readFast parses src with the fast reader and returns the document's root
// mapping and how many nodes the tree has, or ok false when src is outside
// the subset. It never panics: a bug in the reader is a decline, and
// yaml.v3 reads the file instead.
//
// The tree's strings share one copy of src.
func readFast(src []byte) (root *ynode, nodes int, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			root, nodes, ok = nil, 0, false
		}
	}()
	return fastRead(string(src))
}

// fastRead is readFast for tests: it panics on anything but a decline.
func fastRead(src string) (root *ynode, nodes int, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, dec := r.(declineError); !dec {
				panic(r)
			}
			root, nodes, ok = nil, 0, false
		}
	}()
	for i := 0; i < len(src); i++ {
		if c := src[i]; (c < ' ' || c > '~') && c != '\n' {
			return nil, 0, false
		}
	}
	p := &fastParser{src: src, le: -1}
	p.nextContent()
	if p.eof || p.isEntry(p.ls+p.indent) {
		return nil, 0, false
	}
	root = p.blockMap(p.ls+p.indent, 1)
	if !p.eof {
		return nil, 0, false
	}
	return root, p.count, true
}

// ynode is a node of a YAML document as the decoder reads it: the fields of
// yaml.Node it uses, in about half the memory and with fewer pointers for
// the garbage collector to follow. Both readers produce it: the fast one
// directly, yaml.v3's tree through fromYAML. Aliases keep their kind and
// name (the decoder rejects them); anchors and comments are left out.
type ynode struct {
	Kind         yaml.Kind
	Style        yaml.Style
	Tag, Value   string
	Line, Column int
	Content      []*ynode
}

// fromYAML converts a yaml.v3 tree.
func fromYAML(n *yaml.Node) *ynode {
	y := &ynode{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value, Line: n.Line, Column: n.Column}
	if len(n.Content) > 0 {
		y.Content = make([]*ynode, len(n.Content))
		for i, c := range n.Content {
			y.Content[i] = fromYAML(c)
		}
	}
	return y
}

// fastParser is the fast reader's state. The current line is src[ls:le],
// line number line (1-based); indent is its count of leading spaces.
type fastParser struct {
	src          string
	ls, le       int
	line, indent int
	eof          bool
	nodes        []ynode  // slab the nodes are cut from
	ptrs         []*ynode // slab the Content slices are cut from
	stack        []*ynode // the children of the open collections
	count        int      // nodes made
}

func decline() { panic(errDecline) }

// nextContent moves to the next line holding something other than spaces
// and a comment, or sets eof.
func (p *fastParser) nextContent() {
	for {
		start := p.le + 1
		if p.le < 0 {
			start = 0
		}
		if start > len(p.src) || start == len(p.src) && p.le >= 0 {
			p.eof = true
			p.ls, p.le = len(p.src), len(p.src)
			return
		}
		p.line++
		end := strings.IndexByte(p.src[start:], '\n')
		if end < 0 {
			end = len(p.src)
		} else {
			end += start
		}
		p.ls, p.le = start, end
		i := start
		for i < end && p.src[i] == ' ' {
			i++
		}
		if i == end || p.src[i] == '#' {
			if i == start && end-start >= 3 && isMarker(p.src[start:end]) {
				decline()
			}
			continue
		}
		if i == start && (p.src[i] == '%' || isMarker(p.src[start:end])) {
			decline() // a directive or a document marker
		}
		p.indent = i - start
		return
	}
}

// isMarker reports whether line starts like a document marker (--- or ...).
func isMarker(line string) bool {
	return strings.HasPrefix(line, "---") || strings.HasPrefix(line, "...")
}

// node returns a new node at byte offset i of the current line.
func (p *fastParser) node(kind yaml.Kind, tag string, i int) *ynode {
	if len(p.nodes) == 0 {
		p.nodes = make([]ynode, 512)
	}
	n := &p.nodes[0]
	p.nodes = p.nodes[1:]
	p.count++
	n.Kind, n.Tag, n.Line, n.Column = kind, tag, p.line, i-p.ls+1
	return n
}

// close sets n's Content to the children pushed since mark.
func (p *fastParser) close(n *ynode, mark int) {
	kids := p.stack[mark:]
	k := len(kids)
	if k == 0 {
		return
	}
	var c []*ynode
	if k > 256 {
		c = make([]*ynode, k)
	} else {
		if len(p.ptrs) < k {
			p.ptrs = make([]*ynode, 4096)
		}
		c = p.ptrs[:k:k]
		p.ptrs = p.ptrs[k:]
	}
	copy(c, kids)
	clear(kids)
	n.Content = c
	p.stack = p.stack[:mark]
}

// isEntry reports whether offset i of the current line starts a block
// sequence entry ("-" then a space or the end of the line).
func (p *fastParser) isEntry(i int) bool {
	return i < p.le && p.src[i] == '-' && (i+1 == p.le || p.src[i+1] == ' ')
}

func (p *fastParser) skipSpaces(i int) int {
	for i < p.le && p.src[i] == ' ' {
		i++
	}
	return i
}

// endOfLine checks that only spaces and a comment follow offset i.
func (p *fastParser) endOfLine(i int) {
	j := p.skipSpaces(i)
	if j < p.le && (j == i || p.src[j] != '#') {
		decline()
	}
}

// block parses the block collection starting on the current line at its
// indentation.
func (p *fastParser) block(depth int) *ynode {
	if depth > fastMaxDepth {
		decline()
	}
	if p.isEntry(p.ls + p.indent) {
		return p.blockSeq(p.indent, depth)
	}
	return p.blockMap(p.ls+p.indent, depth)
}

// blockMap parses a block mapping whose first key is at offset start of the
// current line. It returns at the first content line indented less than
// the keys, or at the end of the input.
func (p *fastParser) blockMap(start int, depth int) *ynode {
	if depth > fastMaxDepth {
		decline()
	}
	n := start - p.ls
	m := p.node(yaml.MappingNode, "!!map", start)
	mark := len(p.stack)
	i := start
	for {
		key, after, ok := p.blockKey(i)
		if !ok {
			decline()
		}
		p.stack = append(p.stack, key)
		j := p.skipSpaces(after)
		var v *ynode
		if j == p.le || p.src[j] == '#' {
			// The value, if any, is on the following lines.
			null := p.node(yaml.ScalarNode, "!!null", after)
			p.nextContent()
			switch {
			case !p.eof && p.indent > n:
				v = p.block(depth + 1)
			case !p.eof && p.indent == n && p.isEntry(p.ls+n):
				v = p.blockSeq(n, depth+1)
			default:
				v = null
			}
		} else {
			v = p.inlineLine(j, depth)
		}
		if !p.entryEnd(v, n) {
			break
		}
		if p.isEntry(p.ls + n) {
			decline()
		}
		i = p.ls + n
	}
	p.close(m, mark)
	return m
}

// blockSeq parses a block sequence whose entries are at indentation n,
// starting with the current line.
func (p *fastParser) blockSeq(n int, depth int) *ynode {
	if depth > fastMaxDepth {
		decline()
	}
	s := p.node(yaml.SequenceNode, "!!seq", p.ls+n)
	mark := len(p.stack)
	for {
		j := p.skipSpaces(p.ls + n + 1)
		var v *ynode
		switch {
		case j == p.le || p.src[j] == '#':
			p.nextContent()
			if p.eof || p.indent <= n {
				decline() // an empty entry
			}
			v = p.block(depth + 1)
		case p.isEntry(j):
			decline() // a sequence in a sequence on one line
		default:
			if p.keyAhead(j) {
				v = p.blockMap(j, depth+1)
			} else {
				v = p.inlineLine(j, depth)
			}
		}
		if !p.entryEnd(v, n) || !p.isEntry(p.ls+n) {
			break
		}
	}
	p.close(s, mark)
	return s
}

// inlineLine reads the value that ends the current line at offset j, then
// moves to the next content line.
func (p *fastParser) inlineLine(j int, depth int) *ynode {
	v := p.inlineValue(j, depth)
	p.nextContent()
	return v
}

// entryEnd pushes v, the value of an entry of a block collection at
// indentation n, and reports whether the next content line is at n too (the
// collection may go on). A line indented deeper is declined.
func (p *fastParser) entryEnd(v *ynode, n int) bool {
	p.stack = append(p.stack, v)
	if p.eof || p.indent < n {
		return false
	}
	if p.indent > n {
		decline()
	}
	return true
}

// keyAhead reports whether a mapping key starts at offset i of the current
// line (see blockKey).
func (p *fastParser) keyAhead(i int) bool {
	switch p.src[i] {
	case '{', '[':
		return false
	case '"', '\'':
		end := p.quotedEnd(i)
		return end < p.le && p.src[end] == ':'
	}
	for j := i; j < p.le; j++ {
		switch p.src[j] {
		case ':':
			if j+1 == p.le || p.src[j+1] == ' ' {
				return true
			}
		case '#':
			if j > i && p.src[j-1] == ' ' {
				return false
			}
		}
	}
	return false
}

// blockKey reads a mapping key at offset i of the current line: a plain or
// quoted scalar directly followed by ':' and a space or the end of the line.
// It returns the key and the offset after the ':', or ok false when there
// is no such key at i.
func (p *fastParser) blockKey(i int) (key *ynode, after int, ok bool) {
	src := p.src
	switch c := src[i]; c {
	case '"', '\'':
		end := p.quotedEnd(i)
		if end < p.le && src[end] == ':' && (end+1 == p.le || src[end+1] == ' ') {
			if end-i > fastMaxKey {
				decline()
			}
			return p.quoted(i, end), end + 1, true
		}
		return nil, 0, false
	}
	if !p.plainStart(i) {
		return nil, 0, false
	}
	for j := i; j < p.le; j++ {
		switch src[j] {
		case ':':
			if j+1 == p.le || src[j+1] == ' ' {
				if src[j-1] == ' ' || j-i > fastMaxKey {
					decline()
				}
				return p.plain(i, j), j + 1, true
			}
		case '#':
			if src[j-1] == ' ' {
				return nil, 0, false
			}
		}
	}
	return nil, 0, false
}

// plainStart reports whether a plain scalar may start at offset i; it
// declines where YAML would read an indicator.
func (p *fastParser) plainStart(i int) bool {
	switch p.src[i] {
	case '-':
		if i+1 < p.le && isWordByte(p.src[i+1]) {
			return true
		}
		decline()
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', ' ':
		decline()
	}
	return true
}

func isWordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '_'
}

// quotedEnd returns the offset after the closing quote of the quoted scalar
// at i; it declines on escapes and on a scalar not closed on its line.
func (p *fastParser) quotedEnd(i int) int {
	q := p.src[i]
	for j := i + 1; j < p.le; j++ {
		switch p.src[j] {
		case q:
			if q == '\'' && j+1 < p.le && p.src[j+1] == '\'' {
				decline() // '' in a single-quoted scalar
			}
			return j + 1
		case '\\':
			if q == '"' {
				decline()
			}
		}
	}
	decline()
	return 0
}

// quoted returns the quoted scalar src[i:end].
func (p *fastParser) quoted(i, end int) *ynode {
	n := p.node(yaml.ScalarNode, "!!str", i)
	n.Value = p.src[i+1 : end-1]
	if p.src[i] == '"' {
		n.Style = yaml.DoubleQuotedStyle
	} else {
		n.Style = yaml.SingleQuotedStyle
	}
	return n
}

// plain returns the plain scalar src[i:end], trailing spaces removed.
func (p *fastParser) plain(i, end int) *ynode {
	for end > i && p.src[end-1] == ' ' {
		end--
	}
	if end == i {
		decline()
	}
	v := p.src[i:end]
	n := p.node(yaml.ScalarNode, plainTag(v), i)
	n.Value = v
	return n
}

// inlineValue parses the value at offset i of the current line in block
// context (after "key: " or "- "), which must end the line.
func (p *fastParser) inlineValue(i int, depth int) *ynode {
	src := p.src
	switch src[i] {
	case '{', '[':
		v, end := p.flow(i, depth+1)
		p.endOfLine(end)
		return v
	case '"', '\'':
		end := p.quotedEnd(i)
		p.endOfLine(end)
		return p.quoted(i, end)
	}
	p.plainStart(i)
	end := p.le
	for j := i; j < p.le; j++ {
		switch src[j] {
		case ':':
			if j+1 == p.le || src[j+1] == ' ' {
				decline() // a key where a value belongs
			}
		case '#':
			if src[j-1] == ' ' {
				end = j
				j = p.le
			}
		}
	}
	return p.plain(i, end)
}

// flow parses the flow node at offset i and returns it with the offset
// after it.
func (p *fastParser) flow(i int, depth int) (*ynode, int) {
	if depth > fastMaxDepth {
		decline()
	}
	src := p.src
	switch src[i] {
	case '{', '[':
		return p.flowCollection(i, depth)
	case '"', '\'':
		end := p.quotedEnd(i)
		return p.quoted(i, end), end
	}
	p.plainStart(i)
	j := i
loop:
	for ; j < p.le; j++ {
		switch src[j] {
		case ',', '[', ']', '{', '}':
			break loop
		case '?':
			decline()
		case ':':
			if j+1 == p.le || src[j+1] == ' ' {
				break loop
			}
		case '#':
			if src[j-1] == ' ' {
				decline() // a comment inside a flow collection
			}
		}
	}
	if src[j-1] == ':' {
		decline()
	}
	return p.plain(i, j), j
}

// flowCollection parses the flow mapping ('{') or sequence ('[') opening
// at offset i.
func (p *fastParser) flowCollection(i int, depth int) (*ynode, int) {
	var n *ynode
	closer := byte(']')
	mapping := p.src[i] == '{'
	if mapping {
		n, closer = p.node(yaml.MappingNode, "!!map", i), '}'
	} else {
		n = p.node(yaml.SequenceNode, "!!seq", i)
	}
	n.Style = yaml.FlowStyle
	mark := len(p.stack)
	j := p.skipSpaces(i + 1)
	if j < p.le && p.src[j] == closer {
		return n, j + 1
	}
	for {
		if j >= p.le {
			decline()
		}
		if mapping {
			j = p.flowKey(j, depth)
		}
		v, end := p.flow(j, depth+1)
		p.stack = append(p.stack, v)
		var done bool
		if j, done = p.flowNext(end, closer); done {
			p.close(n, mark)
			return n, j
		}
	}
}

// flowKey reads the key of a flow mapping's entry at offset j and the ': '
// after it, and returns the offset of the value. A collection as a key, a
// key without ': ' or an empty value is declined.
func (p *fastParser) flowKey(j int, depth int) int {
	if c := p.src[j]; c == '{' || c == '[' {
		decline() // a collection as a key
	}
	k, end := p.flow(j, depth+1)
	if end-j > fastMaxKey || end+1 >= p.le || p.src[end] != ':' || p.src[end+1] != ' ' {
		decline()
	}
	p.stack = append(p.stack, k)
	j = p.skipSpaces(end + 1)
	if j >= p.le || p.src[j] == ',' || p.src[j] == '}' {
		decline() // an empty value
	}
	return j
}

// flowNext reads what follows an item of a flow collection closed by
// closer, from offset end: the closer (done, j past it) or a comma and the
// next item's start. Anything else, or an empty item, is declined.
func (p *fastParser) flowNext(end int, closer byte) (j int, done bool) {
	j = p.skipSpaces(end)
	if j >= p.le {
		decline()
	}
	switch p.src[j] {
	case closer:
		return j + 1, true
	case ',':
		j = p.skipSpaces(j + 1)
		if j >= p.le || p.src[j] == closer || p.src[j] == ',' {
			decline()
		}
		return j, false
	}
	decline()
	return 0, false
}
