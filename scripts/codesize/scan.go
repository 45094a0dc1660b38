package codesize

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Unit is a file or a function of product code with its length in lines.
// Name is the file's path from the repository root, slash-separated, and
// for a function that path, a colon and the function's name (Go methods:
// Type.Method).
type Unit struct {
	Name  string
	Lines int
	Func  bool
}

// generated is the header of a generated Go file (go help generate).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// Scan measures the product code under root: every file, and every
// function longer than minFunc lines.
func Scan(root string, minFunc int) ([]Unit, error) {
	var out []Unit
	for _, dir := range []string{"cmd", "internal", "lab", "bpf"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && path == filepath.Join(root, dir) {
				return fs.SkipDir // a tree without this directory
			}
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			units, err := scanFile(path, rel, minFunc)
			out = append(out, units...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scanFile measures one file, if it is product code.
func scanFile(path, rel string, minFunc int) ([]Unit, error) {
	isGo := strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")
	isC := strings.HasPrefix(rel, "bpf/") && (strings.HasSuffix(rel, ".c") || strings.HasSuffix(rel, ".h"))
	if !isGo && !isC {
		return nil, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if isGo && isGenerated(src) {
		return nil, nil
	}
	out := []Unit{{Name: rel, Lines: lineCount(src)}}
	var funcs []Unit
	if isGo {
		funcs, err = goFuncs(rel, src)
	} else {
		funcs, err = cFuncs(rel, src)
	}
	for _, f := range funcs {
		if f.Lines > minFunc {
			out = append(out, f)
		}
	}
	return out, err
}

// isGenerated reports whether the Go source carries the generated-code
// header before its package clause.
func isGenerated(src []byte) bool {
	head := append([]byte("\n"), src...)
	if i := bytes.Index(head, []byte("\npackage ")); i >= 0 {
		head = head[:i]
	}
	return generated.Match(head)
}

func lineCount(src []byte) int {
	n := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// goFuncs measures the Go source's function declarations.
func goFuncs(rel string, src []byte) ([]Unit, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []Unit
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) > 0 {
			name = recvName(fd.Recv.List[0].Type) + "." + name
		}
		lines := fset.Position(fd.Body.Rbrace).Line - fset.Position(fd.Type.Func).Line + 1
		out = append(out, Unit{Name: rel + ":" + name, Lines: lines, Func: true})
	}
	return out, nil
}

// recvName is the receiver's type name, without pointer or type
// parameters.
func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return fmt.Sprintf("%T", e)
}
