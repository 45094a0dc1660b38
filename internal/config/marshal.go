package config

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Marshal returns c as a configuration file from which Parse builds a Config
// equal to c. Every key with a default is written out, defaults included,
// and the others when set (keys.go), in file order for pools and services.
// Marshal does not validate c; the result of an invalid Config may be
// rejected by Parse.
func (c *Config) Marshal() ([]byte, error) {
	doc := configKeys.encode(c)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc}}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func boolean(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// float writes v with the fewest digits that read back as v.
func float(v float64) *yaml.Node {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: s}
}

// bytesNode writes b as a string when it is valid UTF-8 and as !!binary
// (base64) otherwise.
func bytesNode(b []byte) *yaml.Node {
	if utf8.Valid(b) {
		return str(string(b))
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!binary", Value: base64.StdEncoding.EncodeToString(b)}
}

func strList(items []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
	for _, s := range items {
		n.Content = append(n.Content, str(s))
	}
	return n
}
