package config

// This file measures the config's readers side by side on the cold-commit
// configuration (3,000 services × 30 backends): the fast reader Parse uses,
// yaml.v3's node API alone, github.com/goccy/go-yaml's parser and
// encoding/json on a JSON form of the same file. Each one builds the tree
// the decoder reads (ynode), so the decode and validate steps are the same
// for all. goccy/go-yaml is only imported here, by a test file: it is not
// part of any product binary. docs/PERFORMANCE.md ("Why the config has its
// own YAML reader") holds the figures and how to reproduce them.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	goccyast "github.com/goccy/go-yaml/ast"
	goccyparser "github.com/goccy/go-yaml/parser"
	goccytoken "github.com/goccy/go-yaml/token"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
	"gopkg.in/yaml.v3"
)

// goccyRead reads data with goccy/go-yaml's parser and converts its AST to
// the tree yaml.v3 gives (kinds, resolved tags, styles, values, positions)
// for the documents the benchmark and TestOtherReadersAgree use.
func goccyRead(data []byte) (*ynode, error) {
	f, err := goccyparser.ParseBytes(data, 0)
	if err != nil {
		return nil, err
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, fmt.Errorf("want one non-empty document, have %d", len(f.Docs))
	}
	return fromGoccy(f.Docs[0].Body)
}

func goccyPos(y *ynode, tk *goccytoken.Token) *ynode {
	y.Line, y.Column = tk.Position.Line, tk.Position.Column
	return y
}

func goccyScalar(tag string, tk *goccytoken.Token) *ynode {
	y := &ynode{Kind: yaml.ScalarNode, Tag: tag, Value: tk.Value}
	switch tk.Type {
	case goccytoken.DoubleQuoteType:
		y.Style = yaml.DoubleQuotedStyle
	case goccytoken.SingleQuoteType:
		y.Style = yaml.SingleQuotedStyle
	}
	return goccyPos(y, tk)
}

func fromGoccy(n goccyast.Node) (*ynode, error) {
	switch n := n.(type) {
	case *goccyast.MappingNode:
		y := &ynode{Kind: yaml.MappingNode, Tag: "!!map", Content: make([]*ynode, 0, 2*len(n.Values))}
		if n.IsFlowStyle {
			y.Style = yaml.FlowStyle
			goccyPos(y, n.Start)
		} else {
			goccyPos(y, n.Values[0].Key.GetToken())
		}
		for _, v := range n.Values {
			k, err := fromGoccy(v.Key)
			if err != nil {
				return nil, err
			}
			val, err := fromGoccy(v.Value)
			if err != nil {
				return nil, err
			}
			y.Content = append(y.Content, k, val)
		}
		return y, nil
	case *goccyast.MappingValueNode: // a block mapping of one entry
		k, err := fromGoccy(n.Key)
		if err != nil {
			return nil, err
		}
		val, err := fromGoccy(n.Value)
		if err != nil {
			return nil, err
		}
		return &ynode{Kind: yaml.MappingNode, Tag: "!!map", Line: k.Line, Column: k.Column, Content: []*ynode{k, val}}, nil
	case *goccyast.SequenceNode:
		y := goccyPos(&ynode{Kind: yaml.SequenceNode, Tag: "!!seq", Content: make([]*ynode, len(n.Values))}, n.Start)
		if n.IsFlowStyle {
			y.Style = yaml.FlowStyle
		}
		for i, v := range n.Values {
			c, err := fromGoccy(v)
			if err != nil {
				return nil, err
			}
			y.Content[i] = c
		}
		return y, nil
	case *goccyast.StringNode:
		return goccyScalar("!!str", n.Token), nil
	case *goccyast.IntegerNode:
		return goccyScalar("!!int", n.Token), nil
	case *goccyast.FloatNode:
		return goccyScalar("!!float", n.Token), nil
	case *goccyast.InfinityNode:
		return goccyScalar("!!float", n.Token), nil
	case *goccyast.NanNode:
		return goccyScalar("!!float", n.Token), nil
	case *goccyast.BoolNode:
		return goccyScalar("!!bool", n.Token), nil
	case *goccyast.NullNode:
		y := goccyScalar("!!null", n.Token)
		if n.Token.Type == goccytoken.ImplicitNullType {
			y.Value = ""
		}
		return y, nil
	}
	return nil, fmt.Errorf("goccy: %T not converted", n)
}

// jsonRead reads a JSON document with encoding/json's tokenizer into the
// same kind of tree (objects as flow mappings, strings double-quoted),
// every node at the line and column where its token starts.
func jsonRead(data []byte) (*ynode, error) {
	r := jsonReader{data: data, dec: json.NewDecoder(bytes.NewReader(data)), line: 1}
	r.dec.UseNumber()
	root, err := r.value()
	if err != nil {
		return nil, err
	}
	if _, err := r.dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("json: more than one value")
	}
	return root, nil
}

type jsonReader struct {
	data           []byte
	dec            *json.Decoder
	off, line, col int // off is at line line, 0-based column col
}

// next reads a token and returns it with a node at its position.
func (r *jsonReader) next() (json.Token, *ynode, error) {
	start := int(r.dec.InputOffset())
	tok, err := r.dec.Token()
	if err != nil {
		return nil, nil, err
	}
	for start < len(r.data) && strings.IndexByte(" \t\r\n,:", r.data[start]) >= 0 {
		start++
	}
	for ; r.off < start; r.off++ {
		r.col++
		if r.data[r.off] == '\n' {
			r.line, r.col = r.line+1, 0
		}
	}
	return tok, &ynode{Line: r.line, Column: r.col + 1}, nil
}

func (r *jsonReader) value() (*ynode, error) {
	tok, y, err := r.next()
	if err != nil {
		return nil, err
	}
	return r.fill(tok, y)
}

func (r *jsonReader) fill(tok json.Token, y *ynode) (*ynode, error) {
	y.Kind = yaml.ScalarNode
	switch t := tok.(type) {
	case json.Delim:
		y.Style = yaml.FlowStyle
		if t == '{' {
			y.Kind, y.Tag = yaml.MappingNode, "!!map"
		} else {
			y.Kind, y.Tag = yaml.SequenceNode, "!!seq"
		}
		for r.dec.More() {
			if y.Kind == yaml.MappingNode {
				k, err := r.value()
				if err != nil {
					return nil, err
				}
				y.Content = append(y.Content, k)
			}
			v, err := r.value()
			if err != nil {
				return nil, err
			}
			y.Content = append(y.Content, v)
		}
		if _, err := r.dec.Token(); err != nil {
			return nil, err
		}
	case string:
		y.Tag, y.Style, y.Value = "!!str", yaml.DoubleQuotedStyle, t
	case json.Number:
		y.Tag, y.Value = "!!int", string(t)
		if strings.ContainsAny(y.Value, ".eE") {
			y.Tag = "!!float"
		}
	case bool:
		y.Tag, y.Value = "!!bool", fmt.Sprint(t)
	case nil:
		y.Tag, y.Value = "!!null", "null"
	}
	return y, nil
}

// benchConfigJSON is genconfig.Control's configuration written as JSON, one pool backend or
// service a line.
func benchConfigJSON(services, backends int, m uint32) string {
	var s strings.Builder
	s.WriteString(`{"node": {"name": "bench", "interface": "lo", "address": "10.0.0.11", "address6": "fd00::11"},` + "\n")
	s.WriteString(`"health_checks": {"tcp": {"type": "tcp", "port": 80}},` + "\n" + `"pools": {` + "\n")
	for i := range services {
		fmt.Fprintf(&s, "  \"p%d\": {\"health_check\": \"tcp\", \"backends\": [\n", i)
		for j := range backends {
			sep := ","
			if j == backends-1 {
				sep = ""
			}
			fmt.Fprintf(&s, "    {\"address\": \"10.%d.%d.%d\", \"weight\": 100}%s\n", 64+i/256, i%256, j+1, sep)
		}
		sep := ","
		if i == services-1 {
			sep = ""
		}
		fmt.Fprintf(&s, "  ]}%s\n", sep)
	}
	s.WriteString("},\n\"services\": [\n")
	for i := range services {
		sep := ","
		if i == services-1 {
			sep = ""
		}
		fmt.Fprintf(&s, "  {\"name\": \"s%d\", \"vip\": \"172.16.%d.%d\", \"port\": 80, \"protocol\": \"tcp\", \"pools\": [\"p%d\"], \"table_size\": %d}%s\n",
			i, i/250, i%250+1, i, m, sep)
	}
	s.WriteString("]}\n")
	return s.String()
}

// benchReaders are the readers compared, each returning the root or
// reporting to c why there is none.
var benchReaders = []struct {
	name string
	json bool // reads benchConfigJSON instead of benchConfig
	read func(data []byte, c *collector) *ynode
}{
	{"fast", false, func(data []byte, c *collector) *ynode { return readDocument(data, c, true) }},
	{"yaml.v3", false, func(data []byte, c *collector) *ynode { return readDocument(data, c, false) }},
	{"goccy", false, func(data []byte, c *collector) *ynode {
		root, err := goccyRead(data)
		if err != nil {
			c.at(position{}, "", ErrSyntax, "%v", err)
		}
		return root
	}},
	{"json", true, func(data []byte, c *collector) *ynode {
		root, err := jsonRead(data)
		if err != nil {
			c.at(position{}, "", ErrSyntax, "%v", err)
		}
		return root
	}},
}

// TestOtherReadersAgree checks that what BenchmarkParse3000x30 times is the
// same work: goccy/go-yaml's converted tree is yaml.v3's, and the JSON form
// decodes to the same Config as the YAML.
func TestOtherReadersAgree(t *testing.T) {
	data := genconfig.Control(40, 30, 251, -1, 0)
	want := readDocument(data, newCollector("yaml"), false)
	got, err := goccyRead(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := treeDiff(got, want); d != "" {
		t.Fatalf("goccy: %s", d)
	}
	wantCfg, err := Parse(data, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range benchReaders {
		in := data
		if r.json {
			in = []byte(benchConfigJSON(40, 30, 251))
		}
		c := newCollector(r.name)
		cfg, err := decodeDocument(c, r.read(in, c))
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if !reflect.DeepEqual(cfg, wantCfg) {
			t.Fatalf("%s: Config differs from the YAML's", r.name)
		}
	}
}

// BenchmarkParse3000x30 times each reader on the cold-commit configuration:
// read/ builds the tree only, parse/ is what config.Parse does with that
// reader (read, decode, validate), the figure the 1 s cold commit spends on
// parsing. Reproduce with
//
//	go test -run '^$' -bench Parse3000x30 -count 7 ./internal/config
func BenchmarkParse3000x30(b *testing.B) {
	yamlData := genconfig.Control(3000, 30, 16381, -1, 0)
	jsonData := []byte(benchConfigJSON(3000, 30, 16381))
	for _, step := range []string{"read", "parse"} {
		for _, r := range benchReaders {
			data := yamlData
			if r.json {
				data = jsonData
			}
			b.Run(step+"/"+r.name, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					c := newCollector("bench")
					root := r.read(data, c)
					if root == nil {
						b.Fatal(c.result())
					}
					if step == "parse" {
						if _, err := decodeDocument(c, root); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
