package config

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/testenv/genconfig"
	"gopkg.in/yaml.v3"
)

// checkFastPath holds the fast reader to yaml.v3 on data: either it
// declines, or yaml.v3 reads the same tree (kind, tag, style, value, line,
// column, children) and Parse gives the same Config or the same errors with
// either reader. It returns whether the fast reader accepted data.
func checkFastPath(t *testing.T, name string, data []byte) bool {
	t.Helper()
	root, _, ok := fastRead(string(data))
	if !ok {
		return false
	}
	c := newCollector(name)
	want := readDocument(data, c, false)
	if want == nil {
		t.Fatalf("%s: the fast reader accepts what yaml.v3 rejects (%v):\n%s", name, c.result(), data)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || hasAnchor(&doc) {
		t.Fatalf("%s: the fast reader accepts a document with anchors or aliases (or none: %v):\n%s", name, err, data)
	}
	if diff := treeDiff(root, want); diff != "" {
		t.Fatalf("%s: the fast reader's tree differs from yaml.v3's: %s\n%s", name, diff, data)
	}
	fastCfg, fastErr := parse(data, name, true)
	slowCfg, slowErr := parse(data, name, false)
	if !reflect.DeepEqual(fastCfg, slowCfg) {
		t.Fatalf("%s: Config differs:\nfast %+v\nyaml %+v", name, fastCfg, slowCfg)
	}
	if !reflect.DeepEqual(fastErr, slowErr) {
		t.Fatalf("%s: errors differ:\nfast %v\nyaml %v", name, fastErr, slowErr)
	}
	return true
}

// hasAnchor reports whether a yaml.v3 tree holds an anchor or an alias,
// which ynode does not keep.
func hasAnchor(n *yaml.Node) bool {
	if n.Anchor != "" || n.Alias != nil || n.Kind == yaml.AliasNode {
		return true
	}
	for _, c := range n.Content {
		if hasAnchor(c) {
			return true
		}
	}
	return false
}

// treeDiff describes the first difference between two node trees, ignoring
// comments; "" when there is none.
func treeDiff(got, want *ynode) string {
	g := fmt.Sprintf("kind %d tag %q style %d value %q at %d:%d, %d children",
		got.Kind, got.Tag, got.Style, got.Value, got.Line, got.Column, len(got.Content))
	w := fmt.Sprintf("kind %d tag %q style %d value %q at %d:%d, %d children",
		want.Kind, want.Tag, want.Style, want.Value, want.Line, want.Column, len(want.Content))
	if g != w {
		return "got " + g + ", want " + w
	}
	for i := range got.Content {
		if d := treeDiff(got.Content[i], want.Content[i]); d != "" {
			return d
		}
	}
	return ""
}

// TestFastPathMatchesYAML runs checkFastPath over every configuration the
// repository's tests and examples hold (string constants and literals of
// the Go tests, evaluated where they are concatenations; YAML files), a
// generated corpus, and one-line mutations of all of them. The fast reader
// must accept the examples and the generated files.
func TestFastPathMatchesYAML(t *testing.T) {
	corpus := repoConfigs(t)
	for _, path := range []string{"testdata/full.yaml", "testdata/minimal.yaml", "testdata/checks.yaml", "../../examples/xlb.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The example and checks.yaml show !!binary values (a tag) and
		// escapes, which only yaml.v3 reads.
		if !checkFastPath(t, path, data) && !strings.Contains(path, "xlb.yaml") && !strings.Contains(path, "checks.yaml") {
			t.Errorf("%s: the fast reader declines it", path)
		}
		corpus = append(corpus, string(data))
	}
	for i, g := range generatedConfigs() {
		name := fmt.Sprintf("generated[%d]", i)
		if !checkFastPath(t, name, []byte(g)) {
			t.Errorf("%s: the fast reader declines it:\n%s", name, g)
		}
		if len(g) < 4096 {
			corpus = append(corpus, g)
		}
	}
	accepted, total := 0, 0
	for i, doc := range corpus {
		for j, m := range mutations(doc) {
			total++
			if checkFastPath(t, fmt.Sprintf("corpus[%d] mutation %d", i, j), []byte(m)) {
				accepted++
			}
		}
	}
	t.Logf("%d documents in the corpus, %d mutations, %d accepted by the fast reader", len(corpus), total, accepted)
}

// mutations returns doc and variants of it that differ by one line:
// removed, doubled, indented by one space more or less, cut in half, or
// with a comment appended.
func mutations(doc string) []string {
	out := []string{doc}
	lines := strings.SplitAfter(doc, "\n")
	with := func(i int, repl ...string) string {
		var b strings.Builder
		for _, l := range lines[:i] {
			b.WriteString(l)
		}
		for _, l := range repl {
			b.WriteString(l)
		}
		for _, l := range lines[i+1:] {
			b.WriteString(l)
		}
		return b.String()
	}
	for i, l := range lines {
		body := strings.TrimSuffix(l, "\n")
		out = append(out, with(i), with(i, l, l), with(i, " "+l), with(i, body[:len(body)/2]+"\n"),
			with(i, body+" # c\n"), with(i, body+"#c\n"))
		if strings.HasPrefix(l, " ") {
			out = append(out, with(i, l[1:]))
		}
	}
	return out
}

// generatedConfigs returns configurations written in every style the fast
// reader accepts, among them a shrunken copy of xlb-bench's control file.
func generatedConfigs() []string {
	var out []string
	out = append(out, string(genconfig.Control(40, 30, 251, -1, 0)))
	var b strings.Builder
	b.WriteString("# block style throughout\nnode:\n  name: gen\n  interface: eth0\n  address: 10.0.0.11\n  address6: 'fd00::11'\n" +
		"  xdp_mode: generic\n  timeouts:\n    tcp: 10m  # ten minutes\n    udp: \"90s\"\n\n  trace_rate: 0\n" +
		"health_checks:\n  h:\n    type: http\n    port: 8080\n    path: /healthz\n" +
		"pools:\n")
	for i := range 5 {
		fmt.Fprintf(&b, "  pool-%d:\n    health_check: h\n    backends:\n", i)
		for j := range 4 {
			fmt.Fprintf(&b, "    - address: 10.1.%d.%d\n      weight: %d\n      state: %s\n", i, j+1, j*10, []string{"active", "drain"}[j%2])
		}
		fmt.Fprintf(&b, "    include:\n      - pool-%d\n", (i+1)%5)
	}
	b.WriteString("services:\n")
	for i := range 5 {
		fmt.Fprintf(&b, "- name: svc%d\n  vip: 2001:db8::%x\n  port: %d\n  protocol: udp\n  pools:\n  - pool-%d\n  min_healthy: 0.5\n  withdraw_when_down: true\n  fragments: false\n", i, i+1, 53+i, i)
	}
	b.WriteString("bgp:\n  asn: 65001\n  router_id: 10.0.0.11\n  peers:\n    - {address: 10.0.0.1, asn: 65000}\n")
	out = append(out, b.String())
	// Odd but accepted spellings: quoted keys, extra spaces, empty
	// collections and values, comments everywhere.
	out = append(out, "  # indented root\n  node: {  name: x ,interface: eth0,address: 10.0.0.1  }   # c\n  pools:\n"+
		"    \"p q\":\n        backends:   [ {address: 10.0.1.1, weight: 2}, { address: '10.0.1.2' } ]\n"+
		"    'r':\n        include: [ \"p q\" ]\n        health_check:\n  services: []\n  health_checks: {}\n")
	// Keys at the fast reader's length limit.
	k := strings.Repeat("k", fastMaxKey-2)
	out = append(out, "node: {interface: eth0, "+k+": 1}\npools:\n  '"+k+"': {}\n  "+k+"kk: {}\n")
	return out
}

// repoConfigs returns the YAML the repository's Go tests hold: every string
// constant, string literal and concatenation of them that looks like a
// configuration (a line with "key:"), from each package's test files.
func repoConfigs(t testing.TB) []string {
	var out []string
	seen := map[string]bool{}
	byDir := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, files := range byDir {
		consts := map[string]ast.Expr{}
		for _, f := range files {
			for _, decl := range f.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							consts[n.Name] = vs.Values[i]
						}
					}
				}
			}
		}
		var eval func(ast.Expr, int) (string, bool)
		eval = func(e ast.Expr, depth int) (string, bool) {
			if depth > 20 {
				return "", false
			}
			switch e := e.(type) {
			case *ast.BasicLit:
				if e.Kind != token.STRING {
					return "", false
				}
				s, err := strconv.Unquote(e.Value)
				return s, err == nil
			case *ast.Ident:
				if v, ok := consts[e.Name]; ok {
					return eval(v, depth+1)
				}
			case *ast.ParenExpr:
				return eval(e.X, depth+1)
			case *ast.BinaryExpr:
				if e.Op == token.ADD {
					x, ok1 := eval(e.X, depth+1)
					y, ok2 := eval(e.Y, depth+1)
					return x + y, ok1 && ok2
				}
			}
			return "", false
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				e, ok := n.(ast.Expr)
				if !ok {
					return true
				}
				s, ok := eval(e, 0)
				if !ok {
					return true
				}
				if strings.Contains(s, ":") && !seen[s] && len(s) < 1<<16 {
					seen[s] = true
					out = append(out, s)
				}
				return false
			})
		}
	}
	if len(out) < 100 {
		t.Fatalf("found only %d YAML texts in the repository's tests", len(out))
	}
	return out
}

// FuzzFastPathMatchesYAML holds the fast reader to yaml.v3 on arbitrary
// input (see checkFastPath). Without -fuzz it runs the seed corpus: the
// examples, testdata, generated files and the YAML texts of the
// repository's Go tests.
func FuzzFastPathMatchesYAML(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "../../examples/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, path := range m {
			data, err := os.ReadFile(path)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, g := range generatedConfigs() {
		if len(g) < 8192 {
			f.Add([]byte(g))
		}
	}
	f.Add(genconfig.Control(2, 3, 7, -1, 0))
	for _, s := range repoConfigs(f) {
		f.Add([]byte(s))
	}
	f.Add([]byte("a:\n- x\n- {y: 1, z: [0x1f, 1_000, -0b11, 0o7, .5, 1e3, +.inf, ~, <<, 'q', \"r\"]}\nb:\n  - k: v\n    l:\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastPath(t, "fuzz.yaml", data)
	})
}

// TestFastPathDeclines lists what the fast reader leaves to yaml.v3: each
// case must be declined, and Parse must still give yaml.v3's verdict.
func TestFastPathDeclines(t *testing.T) {
	const ok = "node: {interface: eth0, address: 10.0.0.11}\n"
	deep := ok + "services:\n" + strings.Repeat("[", fastMaxDepth+1) + strings.Repeat("]", fastMaxDepth+1) + "\n"
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"comments only", "# nothing\n"},
		{"document marker", "---\n" + ok},
		{"document end", ok + "...\n"},
		{"directive", "%YAML 1.2\n---\n" + ok},
		{"two documents", ok + "---\n" + ok},
		{"root sequence", "- a\n"},
		{"root scalar", "a\n"},
		{"anchor", ok + "pools: &p {}\n"},
		{"alias", ok + "pools: *p\n"},
		{"tag", ok + "health_checks:\n  u: {type: udp, port: 53, payload: !!binary AAE=}\n"},
		{"block scalar", ok + "pools: |\n  x\n"},
		{"folded scalar", ok + "pools: >\n  x\n"},
		{"multi-line plain", ok + "services:\n  - name: a\n    b\n"},
		{"multi-line quoted", ok + "services:\n  - name: \"a\n    b\"\n"},
		{"multi-line flow", ok + "services: [\n  a]\n"},
		{"escape", ok + "bgp: {router_id: \"1\\x2e2\"}\n"},
		{"quote in single quotes", ok + "pools: {'a''b': {}}\n"},
		{"tab", ok + "pools:\t{}\n"},
		{"CR", "node: {interface: eth0}\r\n"},
		{"non-ASCII", ok + "pools: {é: {}}\n"},
		{"complex key", ok + "? pools\n: {}\n"},
		{"empty flow value", ok + "pools: {a: }\n"},
		{"flow key without value", ok + "pools: {a}\n"},
		{"trailing comma", ok + "services: [a,]\n"},
		{"empty sequence entry", ok + "services:\n  -\n"},
		{"nested sequence on one line", ok + "services:\n  - - a\n"},
		{"space before colon", ok + "pools : {}\n"},
		{"timestamp", ok + "bgp: {router_id: 2001-12-14}\n"},
		{"long key", ok + strings.Repeat("k", fastMaxKey+1) + ": 1\n"},
		{"long quoted key", ok + "\"" + strings.Repeat("k", fastMaxKey) + "\": 1\n"},
		{"long flow key", "node: {" + strings.Repeat("k", fastMaxKey+1) + ": 1}\n"},
		{"too long key", ok + "'" + strings.Repeat("k", 1100) + "': 1\n"},
		{"too deep", deep},
		{"odd indentation", "node:\n    interface: eth0\n  address: 10.0.0.1\n"},
		{"less indented continuation", "  node: {interface: eth0}\npools: {}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, ok := fastRead(tc.in); ok {
				t.Fatalf("the fast reader accepts %q", tc.in)
			}
			fastCfg, fastErr := parse([]byte(tc.in), "c.yaml", true)
			slowCfg, slowErr := parse([]byte(tc.in), "c.yaml", false)
			if !reflect.DeepEqual(fastCfg, slowCfg) || !reflect.DeepEqual(fastErr, slowErr) {
				t.Fatalf("Parse differs from yaml.v3's:\nfast %v %v\nyaml %v %v", fastCfg, fastErr, slowCfg, slowErr)
			}
		})
	}
}
