package codesize

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// cIdent is the name in a function head: the identifier before its
// parameter list.
var cIdent = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*\($`)

// cFuncs measures the function definitions of C source by counting
// braces: a brace at the top level whose head (the text since the last
// top-level ';', '}' or preprocessor line) ends with a parameter list and
// holds no '=' opens a function; structs, enums and initializers do not.
// Comments, strings and preprocessor lines are blanked first, keeping the
// line breaks.
func cFuncs(rel string, src []byte) ([]Unit, error) {
	s := blankC(src)
	var out []Unit
	depth, line := 0, 1
	headStart, headLine := 0, 0 // headLine 0: no token since headStart
	var open *Unit
	for i, c := range s {
		switch {
		case c == '\n':
			line++
		case depth == 0 && c == ';':
			headStart, headLine = i+1, 0
		case c == '{':
			if depth == 0 {
				if name, ok := funcHead(string(s[headStart:i])); ok {
					open = &Unit{Name: rel + ":" + name, Lines: headLine, Func: true}
				}
			}
			depth++
		case c == '}':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("%s:%d: unbalanced '}'", rel, line)
			}
			if depth == 0 {
				if open != nil {
					open.Lines = line - open.Lines + 1
					out = append(out, *open)
					open = nil
				}
				headStart, headLine = i+1, 0
			}
		case depth == 0 && headLine == 0 && c != ' ' && c != '\t':
			headLine = line
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%s: unbalanced '{'", rel)
	}
	return out, nil
}

// funcHead reports whether head opens a function body, and names it.
func funcHead(head string) (string, bool) {
	h := strings.TrimSpace(head)
	if strings.Contains(h, "=") || !strings.HasSuffix(h, ")") {
		return "", false
	}
	// The name is before the first parenthesis that is not an attribute's
	// or a macro's such as SEC("xdp") or __attribute__((...)): the
	// identifier directly before the outermost parameter list, which is
	// the last top-level parenthesis group.
	depth, start := 0, -1
	for i := len(h) - 1; i >= 0; i-- {
		switch h[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				start = i
			}
		}
		if start >= 0 {
			break
		}
	}
	if start < 0 {
		return "", false
	}
	m := cIdent.FindStringSubmatch(h[:start+1])
	if m == nil {
		return "", false
	}
	return m[1], true
}

// blankC returns src with comments, string and character literals and
// preprocessor lines (with their continuations) replaced by spaces, line
// breaks kept.
func blankC(src []byte) []byte {
	s := bytes.Clone(src)
	blank := func(from, to int) {
		for j := from; j < to && j < len(s); j++ {
			if s[j] != '\n' {
				s[j] = ' '
			}
		}
	}
	lineStart := true
	for i := 0; i < len(s); {
		switch {
		case lineStart && firstNonBlank(s, i) == '#':
			j := i
			for j < len(s) && !(s[j] == '\n' && (j == 0 || s[j-1] != '\\')) {
				j++
			}
			blank(i, j)
			i = j
		case bytes.HasPrefix(s[i:], []byte("//")):
			j := bytes.IndexByte(s[i:], '\n')
			if j < 0 {
				j = len(s) - i
			}
			blank(i, i+j)
			i += j
		case bytes.HasPrefix(s[i:], []byte("/*")):
			j := bytes.Index(s[i+2:], []byte("*/"))
			end := len(s)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			blank(i, end)
			i = end
		case s[i] == '"' || s[i] == '\'':
			q, j := s[i], i+1
			for j < len(s) && s[j] != q && s[j] != '\n' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			blank(i+1, j)
			i = j + 1
		default:
			lineStart = s[i] == '\n'
			i++
			continue
		}
		lineStart = false
	}
	return s
}

// firstNonBlank is the first byte from i on that is not a space or tab.
func firstNonBlank(s []byte, i int) byte {
	for ; i < len(s); i++ {
		if s[i] != ' ' && s[i] != '\t' {
			return s[i]
		}
	}
	return 0
}
