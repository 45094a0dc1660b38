package config

import (
	"strconv"
	"strings"
)

// The fast reader's tags: what yaml.v3 resolves a plain scalar to.

// plainTag returns the tag yaml.v3 resolves the plain scalar s to (its
// resolve.go): the YAML 1.1 booleans and nulls it knows, merge keys, and
// for what starts like a number, an integer in any base Go's strconv reads
// (underscores ignored), a float, or else a string. Plain scalars that may
// be timestamps are declined.
func plainTag(s string) string {
	switch s {
	case "true", "True", "TRUE", "false", "False", "FALSE":
		return "!!bool"
	case "~", "null", "Null", "NULL":
		return "!!null"
	case ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF":
		return "!!float"
	case "<<":
		return "!!merge"
	}
	switch c := s[0]; {
	case c == '.':
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return "!!float"
		}
	case c == '+' || c == '-' || c >= '0' && c <= '9':
		return numberTag(s)
	}
	return "!!str"
}

// numberTag is plainTag for a scalar starting with a sign or a digit.
func numberTag(s string) string {
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	if digits == 4 && len(s) > 4 && s[4] == '-' {
		decline() // perhaps a timestamp
	}
	// No integer or float syntax has a ':' or two points: addresses are
	// strings, without the cost of failed parses.
	if strings.IndexByte(s, ':') >= 0 || strings.Count(s, ".") > 1 {
		return "!!str"
	}
	plain := s
	if strings.IndexByte(s, '_') >= 0 {
		plain = strings.ReplaceAll(s, "_", "")
	}
	if isInt(plain, 0) {
		return "!!int"
	}
	if isYAMLFloat(plain) {
		if _, err := strconv.ParseFloat(plain, 64); err == nil {
			return "!!float"
		}
	}
	for _, b := range [...]struct {
		prefix string
		base   int
	}{{"0b", 2}, {"0o", 8}} {
		if rest, ok := strings.CutPrefix(plain, b.prefix); ok && isInt(rest, b.base) {
			return "!!int"
		}
		if rest, ok := strings.CutPrefix(plain, "-"+b.prefix); ok {
			if _, err := strconv.ParseInt("-"+rest, b.base, 64); err == nil {
				return "!!int"
			}
		}
	}
	return "!!str"
}

// isInt reports whether s is a signed or an unsigned 64-bit integer in
// base (0: Go's prefixes).
func isInt(s string, base int) bool {
	if _, err := strconv.ParseInt(s, base, 64); err == nil {
		return true
	}
	_, err := strconv.ParseUint(s, base, 64)
	return err == nil
}

// isYAMLFloat reports whether s is [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
func isYAMLFloat(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	} else {
		if digits() == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits()
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
