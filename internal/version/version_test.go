package version

import (
	"bytes"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
)

func TestStringFallbacks(t *testing.T) {
	for _, c := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{nil, false, "unknown (no build information)"},
		{&debug.BuildInfo{}, true, "unknown (not built by make from a git checkout: no version stamped, no commit recorded)"},
		{&debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true,
			"g0123456789ab-dirty (commit recorded by go build; not stamped by make)"},
	} {
		if got := fromBuildInfo(c.bi, c.ok); got != c.want {
			t.Errorf("fromBuildInfo: %q, want %q", got, c.want)
		}
	}
	Version = "v1.2.3-4-gabcdef0"
	defer func() { Version = "" }()
	if String() != Version {
		t.Errorf("String() = %q with a stamped version", String())
	}
}

func TestPrint(t *testing.T) {
	Version = "v1.0.0"
	defer func() { Version = "" }()
	var b bytes.Buffer
	Print(&b, "xlbd", Program{Name: "xlb_forward", Tag: "0123456789abcdef"}, Program{Name: "other", Err: errors.New("load: operation not permitted")})
	out := b.String()
	for _, want := range []string{"xlbd v1.0.0 (go", "bpf program xlb_forward: tag 0123456789abcdef\n", "bpf program other: tag unknown: load: operation not permitted\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	b.Reset()
	Print(&b, "xlbctl")
	if !strings.Contains(b.String(), "bpf: xlbctl embeds no BPF program") {
		t.Errorf("xlbctl: %s", b.String())
	}
}
