// Package version names the build every xlb binary comes from: the
// output of `git describe` that the Makefile stamps in with -ldflags
// (-X github.com/xlbproject/xlb/internal/version.Version=...), and the tag
// of the BPF program a binary embeds, for `--version`.
package version

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
)

// Version is set at build time by the Makefile from `git describe --tags
// --always --dirty`. Empty when the binary was built without it (plain
// `go build`), then String falls back to what the Go toolchain recorded.
var Version string

// String is the build's version: the stamped one; else the commit the Go
// toolchain recorded from the work tree (`go build` inside a git checkout);
// else a plain statement that the build carries none.
func String() string {
	if Version != "" {
		return Version
	}
	return fromBuildInfo(debug.ReadBuildInfo())
}

func fromBuildInfo(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "unknown (no build information)"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown (not built by make from a git checkout: no version stamped, no commit recorded)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return "g" + rev + " (commit recorded by go build; not stamped by make)"
}

// Program is one BPF program a binary embeds and the tag the kernel will
// show for it (bpftool prog show, ProgramInfo.Tag).
type Program struct {
	Name string
	Tag  string
	Err  error // the tag could not be computed
}

// Print writes the --version text of the binary name: its version, Go
// toolchain, and each embedded program's tag (or that it embeds none).
func Print(w io.Writer, name string, progs ...Program) {
	fmt.Fprintf(w, "%s %s (%s, %s/%s)\n", name, String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if len(progs) == 0 {
		fmt.Fprintf(w, "bpf: %s embeds no BPF program\n", name)
	}
	for _, p := range progs {
		if p.Err != nil {
			fmt.Fprintf(w, "bpf program %s: tag unknown: %v\n", p.Name, p.Err)
			continue
		}
		fmt.Fprintf(w, "bpf program %s: tag %s\n", p.Name, p.Tag)
	}
}

// Tags loads every program of spec into the kernel, without attaching it
// or pinning anything, and returns the tag the kernel gives it (the one
// `bpftool prog show` lists), by name. The tag is the kernel's: SHA-1 of the
// instructions as the verifier leaves them (SHA-256 on kernels after 6.18),
// so it is read back after loading, not computed from the object file.
// Loading needs root (CAP_BPF) and a kernel with the program's features;
// without them the error says so.
func Tags(spec *ebpf.CollectionSpec, err error) []Program {
	if err != nil {
		return []Program{{Name: "(embedded object)", Err: err}}
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	names := slices.Sorted(maps.Keys(spec.Programs))
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return []Program{{Name: strings.Join(names, ","), Err: loadHint(fmt.Errorf("load to read the kernel's tag: %w", err))}}
	}
	defer coll.Close()
	var out []Program
	for _, name := range names {
		p := Program{Name: name}
		if info, err := coll.Programs[name].Info(); err != nil {
			p.Err = err
		} else {
			p.Tag = info.Tag
		}
		out = append(out, p)
	}
	return out
}

func loadHint(err error) error {
	if errors.Is(err, os.ErrPermission) {
		return errors.New("loading a program needs root (CAP_BPF), and the tag is the kernel's, read back after loading")
	}
	return err
}

// CheckTag returns an error unless tags (ProgramTags of a package) hold
// the program name, without error, with the tag the kernel reports for
// prog: what --version prints is the tag of the program as the product
// loads it.
func CheckTag(tags []Program, name string, prog *ebpf.Program) (string, error) {
	info, err := prog.Info()
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(tags, func(p Program) bool { return p.Name == name })
	if i < 0 || tags[i].Err != nil {
		return "", fmt.Errorf("embedded programs %+v: no tag for %s", tags, name)
	}
	if tags[i].Tag != info.Tag {
		return "", fmt.Errorf("--version tag %s, running program's tag %s", tags[i].Tag, info.Tag)
	}
	return info.Tag, nil
}
