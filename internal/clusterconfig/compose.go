// Package clusterconfig takes xlbd's config from etcd
// (--config etcd://HOST:PORT[,HOST:PORT]/KEY): one document for the whole
// cluster at KEY (health_checks, pools, services), each node's own
// settings (node, bgp) from its node file. Every node watches the key,
// validates each new value, commits it, and writes its status under
// KEY/status/<node name>, where every node and xlbctl read it.
package clusterconfig

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/xlbproject/xlb/internal/config"
	"gopkg.in/yaml.v3"
)

// Scheme prefixes an etcd config location.
const Scheme = "etcd://"

// Location is where the cluster's config lives.
type Location struct {
	Endpoints []string // HOST:PORT
	Key       string   // begins with "/"
}

// IsURL reports whether s names an etcd location rather than a file.
func IsURL(s string) bool { return strings.HasPrefix(s, Scheme) }

// ParseURL reads etcd://HOST:PORT[,HOST:PORT]/KEY.
func ParseURL(s string) (Location, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	hosts, key, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || hosts == "" || key == "" {
		return Location{}, fmt.Errorf("%q: want etcd://HOST:PORT[,HOST:PORT]/KEY", s)
	}
	var loc Location
	for _, h := range strings.Split(hosts, ",") {
		u, err := url.Parse("http://" + h)
		if err != nil || u.Port() == "" || u.Hostname() == "" || u.Host != h {
			return Location{}, fmt.Errorf("%q: endpoint %q is not HOST:PORT", s, h)
		}
		loc.Endpoints = append(loc.Endpoints, h)
	}
	loc.Key = "/" + key
	return loc, nil
}

// String is the location as an etcd:// URL.
func (l Location) String() string {
	return Scheme + strings.Join(l.Endpoints, ",") + l.Key
}

// StatusPrefix is where the nodes write their status: KEY/status/.
func (l Location) StatusPrefix() string { return l.Key + "/status/" }

// sharedSections are the top-level sections the cluster document may
// hold; node and bgp are each node's own (its node file).
var sharedSections = []string{"health_checks", "pools", "services"}

// topLevel returns the document's top-level keys with their lines.
func topLevel(doc []byte) (map[string]int, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	keys := map[string]int{}
	if len(root.Content) == 0 {
		return keys, nil
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, errors.New("the document is not a mapping")
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		keys[m.Content[i].Value] = m.Content[i].Line
	}
	return keys, nil
}

// Compose builds a node's config from its node file (nodeDoc, read from
// nodePath: node and bgp only) and the cluster document (clusterDoc, named
// source: health_checks, pools and services only). Errors name the file or
// the etcd key and the line there.
func Compose(nodeDoc []byte, nodePath string, clusterDoc []byte, source string) (*config.Config, error) {
	nk, err := topLevel(nodeDoc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nodePath, err)
	}
	for k, line := range nk {
		if k != "node" && k != "bgp" {
			return nil, fmt.Errorf("%s:%d: %s: a node file holds node and bgp only; %s belongs in the cluster config (%s)", nodePath, line, k, k, source)
		}
	}
	ck, err := topLevel(clusterDoc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	for k, line := range ck {
		shared := false
		for _, s := range sharedSections {
			shared = shared || k == s
		}
		if !shared {
			return nil, fmt.Errorf("%s:%d: %s: the cluster config holds %s only; %s belongs in each node's file (%s)",
				source, line, k, strings.Join(sharedSections, ", "), k, nodePath)
		}
	}
	// One document: the cluster's, then the node file (so lines of the
	// cluster document, also those quoted inside messages, are its own).
	// Errors in the node file's part are mapped back to that file.
	clusterDoc = bytes.TrimRight(clusterDoc, "\n")
	offset := 0
	if len(clusterDoc) > 0 {
		offset = bytes.Count(clusterDoc, []byte("\n")) + 1
	}
	doc := append(append(bytes.Clone(clusterDoc), '\n'), nodeDoc...)
	cfg, err := config.Parse(doc, source)
	var list config.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			if e.Line > offset {
				e.Line -= offset
				e.Source = nodePath
			}
		}
		return nil, list
	}
	return cfg, err
}

// Placeholder is a node section for checking a cluster document without a
// node (xlbctl apply --cluster): documentation addresses of both families.
const Placeholder = "node:\n  name: check\n  interface: lo\n  address: 192.0.2.1\n  address6: \"2001:db8::1\"\n"
