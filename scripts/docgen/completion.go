package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/xlbproject/xlb/internal/ctl"
)

// flagRE finds a flag and, when it takes one, its value's placeholder in
// xlbctl's usage text: "--node NAME", "-o table|json", "--dry-run".
var flagRE = regexp.MustCompile(`(?:^|[\s\[/|])(--?[a-z][a-z-]*)((?: [A-Z][A-Z0-9:_]*\b(?:\[[^\]]*\])?)| [a-z]+(?:\|[a-z]+)+| N\b)?`)

type usage struct {
	global   []string            // flags before the command
	valued   map[string][]string // flags that take a value -> its choices (nil: any)
	commands map[string][]string // command -> its flags (node: its subcommands)
}

// parseUsage reads the commands and flags of xlbctl's usage text.
func parseUsage(text string) usage {
	u := usage{valued: map[string][]string{}, commands: map[string][]string{}}
	lines := strings.Split(text, "\n")
	u.global = u.flags(lines[0])
	var cmd string
	inCommands := false
	for _, l := range lines[1:] {
		switch {
		case l == "commands:":
			inCommands = true
		case !inCommands || strings.TrimSpace(l) == "":
			if strings.TrimSpace(l) == "" {
				inCommands = inCommands && cmd == ""
			}
		case strings.HasPrefix(l, "  ") && l[2] != ' ':
			f := strings.Fields(l)
			cmd = f[0]
			if cmd == "node" {
				u.commands[cmd] = []string{"drain", "undrain"}
				continue
			}
			u.commands[cmd] = append(u.commands[cmd], u.flags(l)...)
		default:
			u.commands[cmd] = append(u.commands[cmd], u.flags(l)...)
		}
	}
	return u
}

// aliasRE finds a short flag written as another name of a long one.
var aliasRE = regexp.MustCompile(`(-[a-z])/(--[a-z-]+)`)

func (u *usage) flags(l string) []string {
	var out []string
	defer func() {
		for _, m := range aliasRE.FindAllStringSubmatch(l, -1) {
			if v, ok := u.valued[m[2]]; ok {
				u.valued[m[1]] = v
			}
		}
	}()
	for _, m := range flagRE.FindAllStringSubmatch(l, -1) {
		out = append(out, m[1])
		switch v := strings.TrimSpace(m[2]); {
		case strings.Contains(v, "|"):
			u.valued[m[1]] = strings.Split(v, "|")
		case v != "":
			u.valued[m[1]] = nil
		}
	}
	return out
}

// bashCompletion is the completion script of xlbctl.
func bashCompletion() string {
	u := parseUsage(ctl.Usage)
	var b strings.Builder
	b.WriteString("# bash completion for xlbctl, generated from `xlbctl help` by scripts/docgen.\n")
	b.WriteString("_xlbctl() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= sub= i w\n")
	b.WriteString("\tfor ((i = 1; i < COMP_CWORD; i++)); do\n\t\tw=${COMP_WORDS[i]}\n\t\tcase $w in\n")
	var valued []string
	for f := range u.valued {
		valued = append(valued, f)
	}
	slices.Sort(valued)
	fmt.Fprintf(&b, "\t\t%s) ((i++)) ;;\n", strings.Join(valued, "|"))
	b.WriteString("\t\t-*) ;;\n\t\t*) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;\n\t\tesac\n\tdone\n")
	b.WriteString("\tcase $prev in\n")
	for _, f := range valued {
		switch choices := u.valued[f]; {
		case choices != nil:
			fmt.Fprintf(&b, "\t%s) COMPREPLY=($(compgen -W '%s' -- \"$cur\")); return ;;\n", f, strings.Join(choices, " "))
		case f == "-f" || f == "-s" || f == "--socket" || strings.HasPrefix(f, "--tls-") && f != "--tls-server-name":
			fmt.Fprintf(&b, "\t%s) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", f)
		default:
			fmt.Fprintf(&b, "\t%s) return ;;\n", f)
		}
	}
	b.WriteString("\tesac\n\tcase $cmd in\n")
	names := slices.Sorted(maps.Keys(u.commands))
	fmt.Fprintf(&b, "\t'') COMPREPLY=($(compgen -W '%s %s help --version' -- \"$cur\")) ;;\n", strings.Join(names, " "), strings.Join(u.global, " "))
	for _, c := range names {
		words := strings.Join(slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(u.commands[c]), u.global...)))), " ")
		if c == "node" {
			fmt.Fprintf(&b, "\tnode) [[ -z $sub ]] && COMPREPLY=($(compgen -W '%s' -- \"$cur\")) ;;\n", strings.Join(u.commands[c], " "))
			continue
		}
		fmt.Fprintf(&b, "\t%s) COMPREPLY=($(compgen -W '%s' -- \"$cur\")) ;;\n", c, words)
	}
	b.WriteString("\tesac\n}\ncomplete -F _xlbctl xlbctl\n")
	return b.String()
}
