package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// commentedKeys are the keys examples/xlb.yaml can show only in a comment:
// node.sync reads its key file with the configuration, a backend port
// needs method nat, which needs a backend on a segment of the node (xlbd
// --check-config asks the kernel's routes), and the keys of bgp mode
// external exclude those of the speaker; the kubernetes section would
// make every xlbd started with the example look for a cluster.
var commentedKeys = []string{
	"kubernetes", "kubernetes.kubeconfig", "kubernetes.load_balancer_class", "kubernetes.address_pools",
	"node.sync", "node.sync.listen", "node.sync.peers", "node.sync.key_file",
	"pools.<name>.backends[].port",
	"bgp.route_table", "bgp.dummy_interface",
}

// TestExampleShowsEveryKey checks that examples/xlb.yaml, which the README
// calls an example of every key, has each key of the table: as a key of
// the document or, for commentedKeys, in a comment line that reads as
// YAML.
func TestExampleShowsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../../examples/xlb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rows []keyDoc
	configKeys.describe("", &rows)
	table, named := map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		table[r.path] = true
		if parent, _, ok := strings.Cut(r.path, ".<name>"); ok {
			named[parent] = true
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if named[path] {
					walk(n.Content[i+1], path+".<name>")
					continue
				}
				p := join(path, n.Content[i].Value)
				shown[p] = true
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for _, item := range n.Content {
				walk(item, path+"[]")
			}
		}
	}
	walk(doc.Content[0], "")
	// The keys of the comment lines that read as YAML on their own, such
	// as "#   bgp: {mode: external, route_table: 100}".
	inComments := map[string]bool{}
	var keys func(n *yaml.Node, text string)
	keys = func(n *yaml.Node, text string) {
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 && strings.Contains(text, c.Value+":") {
				inComments[c.Value] = true
			}
			keys(c, text)
		}
	}
	for _, line := range strings.Split(string(data), "\n") {
		if _, text, ok := strings.Cut(line, "#"); ok && strings.TrimSpace(line)[0] == '#' {
			var n yaml.Node
			if yaml.Unmarshal([]byte(text), &n) == nil {
				keys(&n, text)
			}
		}
	}
	for _, r := range rows {
		switch {
		case shown[r.path] && slices.Contains(commentedKeys, r.path):
			t.Errorf("%s is in the document: take it off commentedKeys", r.path)
		case shown[r.path]:
		case slices.Contains(commentedKeys, r.path):
			if leaf := r.path[strings.LastIndexAny(r.path, ".]")+1:]; !inComments[leaf] {
				t.Errorf("examples/xlb.yaml does not show %s, even in a comment", r.path)
			}
		default:
			t.Errorf("examples/xlb.yaml does not show %s", r.path)
		}
	}
	for p := range shown {
		if !table[p] {
			t.Errorf("examples/xlb.yaml has %s, which is not in the table", p)
		}
	}
}

// TestHintsNameKeys checks that the keys the product code's messages name
// in their prose ("an IPv6 source goes in node.address6") are keys of the
// table, so that renaming a key cannot leave a hint naming the old one.
func TestHintsNameKeys(t *testing.T) {
	var rows []keyDoc
	configKeys.describe("", &rows)
	table := map[string]bool{}
	for _, r := range rows {
		table[r.path] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	path := regexp.MustCompile(`\b(node|bgp)(\.[a-z_0-9]+)+`)
	fset := token.NewFileSet()
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			for _, p := range path.FindAllString(lit.Value, -1) {
				found++
				if !table[p] {
					t.Errorf("%s: %s names %s, which is not a key", fset.Position(lit.Pos()), lit.Value, p)
				}
			}
			return true
		})
	}
	if found < 10 {
		t.Fatalf("found only %d key paths in messages", found)
	}
}
