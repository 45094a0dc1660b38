package main

import (
	"fmt"
	"strings"
)

// manPage renders help, the text `NAME -h` or `NAME help` prints, as a
// roff man page. Go flag defaults ("  -name type" then "    \tusage") become
// an OPTIONS list; any other text is kept as written, preformatted.
func manPage(name, section, summary, version, help string) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH %s %s \"\" \"xlb %s\" \"xlb manual\"\n", strings.ToUpper(name), section, escape(version))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", escape(name), escape(summary))
	text, opts := splitFlags(help, name)
	if len(opts) > 0 {
		// The heading of the flag list is the OPTIONS section's.
		text = strings.TrimSuffix(strings.TrimRight(text, "\n"), "flags:")
	}
	if strings.TrimSpace(text) != "" {
		b.WriteString(".SH DESCRIPTION\n.nf\n")
		for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			b.WriteString(line(l))
		}
		b.WriteString(".fi\n")
	}
	if len(opts) > 0 {
		b.WriteString(".SH OPTIONS\n")
		for _, o := range opts {
			fmt.Fprintf(&b, ".TP\n\\fB\\-\\-%s\\fR", escape(o.name))
			if o.arg != "" {
				fmt.Fprintf(&b, " \\fI%s\\fR", escape(o.arg))
			}
			fmt.Fprintf(&b, "\n%s\n", escape(o.usage))
		}
	}
	b.WriteString(".SH SEE ALSO\n")
	var see []string
	for _, other := range []string{"xlbd", "xlbctl", "xlb-decap"} {
		if other != name {
			see = append(see, fmt.Sprintf("\\fB%s\\fR(8)", escape(other)))
		}
	}
	b.WriteString(strings.Join(see, ", ") + "\n.PP\n/usr/share/doc/xlb/\n")
	return b.String()
}

type option struct{ name, arg, usage string }

// splitFlags takes Go's flag.PrintDefaults lines out of help.
func splitFlags(help, name string) (string, []option) {
	var text strings.Builder
	var opts []option
	for _, l := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(l, "  -"):
			f := strings.Fields(strings.TrimPrefix(l, "  -"))
			o := option{name: f[0]}
			if len(f) > 1 {
				o.arg = f[1]
			}
			opts = append(opts, o)
		case strings.HasPrefix(l, "    \t") && len(opts) > 0:
			o := &opts[len(opts)-1]
			o.usage = strings.TrimSpace(o.usage + " " + strings.TrimSpace(l))
		case strings.HasPrefix(l, "Usage of "):
			fmt.Fprintf(&text, "usage: %s [OPTIONS]\n", name)
		default:
			text.WriteString(l + "\n")
		}
	}
	return text.String(), opts
}

// line is one preformatted line: a leading dot or quote would be a roff
// request.
func line(l string) string {
	l = escape(l)
	if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
		l = `\&` + l
	}
	return l + "\n"
}

func escape(s string) string {
	return strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
}
