package main

import (
	"strings"
	"testing"
)

func TestManPage(t *testing.T) {
	help := "usage: xlbd [flags]\n.starts with a dot\nback\\slash\n\nflags:\n" +
		"  -check-config\n    \tvalidate the config and exit\n" +
		"  -config string\n    \tconfig file (default \"/etc/xlb/xlb.yaml\")\n"
	page := manPage("xlbd", "8", "the daemon", "v1.0-2-gabc", help)
	for _, want := range []string{
		".TH XLBD 8 \"\" \"xlb v1.0\\-2\\-gabc\" \"xlb manual\"\n",
		".SH NAME\nxlbd \\- the daemon\n",
		"\\&.starts with a dot\n",
		"back\\eslash\n",
		".TP\n\\fB\\-\\-check\\-config\\fR\nvalidate the config and exit\n",
		".TP\n\\fB\\-\\-config\\fR \\fIstring\\fR\nconfig file (default \"/etc/xlb/xlb.yaml\")\n",
		"\\fBxlbctl\\fR(8), \\fBxlb\\-decap\\fR(8)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "flags:") {
		t.Errorf("the flags heading stayed in the description:\n%s", page)
	}
}

func TestParseUsage(t *testing.T) {
	u := parseUsage("usage: x [--node NAME | -s/--socket PATH] [-o table|json] COMMAND\n\ncommands:\n" +
		"  status          node\n  apply -f FILE [--dry-run]\n                  validate\n  node drain | node undrain\n\nfooter --not-a-flag\n")
	if got := strings.Join(u.global, " "); got != "--node -s --socket -o" {
		t.Errorf("global flags %q", got)
	}
	if got := strings.Join(u.commands["apply"], " "); got != "-f --dry-run" {
		t.Errorf("apply flags %q", got)
	}
	if got := strings.Join(u.commands["node"], " "); got != "drain undrain" {
		t.Errorf("node subcommands %q", got)
	}
	if _, ok := u.valued["-s"]; !ok {
		t.Errorf("-s (another name of --socket) takes no value: %v", u.valued)
	}
	if got := strings.Join(u.valued["-o"], " "); got != "table json" {
		t.Errorf("-o choices %q", got)
	}
	if _, ok := u.valued["--dry-run"]; ok || len(u.commands) != 3 {
		t.Errorf("valued %v, commands %v", u.valued, u.commands)
	}
}
