package datapath

// The forwarder's stages (bpf/maps.h, xlb_stages): XDP programs the entry
// tail-calls for ICMP, fragments and self-check probes. The object's
// initializer fills the program array when it is loaded. The array is
// never adopted from a pin, as it holds the programs of its own build;
// each build pins its own before its entry is attached, under a second
// name, and renames the pin over the previous build's once the entry is
// attached. A program array whose last user reference goes is emptied by
// the kernel, so the pin is what keeps an attached entry's stages while
// no xlbd runs (a restart, an upgrade, and a process killed between its
// attach and the rename: pinned only after the attach, as it was, its
// entry then ran with no stages until the next start).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// stageMaps are the maps of a build's own stages that its pin keeps
// filled: the program array.
func (d *Datapath) stageMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{"xlb_stages": d.objs.XlbStages}
}

// BuildOwnMaps are the forwarder's maps that each build has for itself,
// never shared through a pin with another build's programs: the stages'
// program array.
var BuildOwnMaps = []string{"xlb_stages"}

// unpinStages keeps spec's stage maps (BuildOwnMaps) out of the pinned
// maps the load adopts.
func unpinStages(spec *ebpf.CollectionSpec) {
	for _, name := range BuildOwnMaps {
		if ms := spec.Maps[name]; ms != nil {
			ms.Pinning = ebpf.PinNone
		}
	}
}

// stagesNext is the suffix of a build's stage pins between the load and
// the attach of its entry: the stages are held by a pin from before the
// entry runs, so a process killed between its attach and the final pin
// leaves an entry whose stages the kernel keeps filled.
const stagesNext = "_next" // bpffs refuses names with a dot

// pinStages pins this build's stage maps under the pin directory at their
// names with stagesNext, before the entry that tail-calls through them is
// attached (Open) or used (Load); promoteStages then gives them their
// names, replacing the previous build's. A pin left at the next name by
// a killed process is settled first (settleStagePins).
func (d *Datapath) pinStages() error {
	for name, m := range d.stageMaps() {
		path := filepath.Join(d.opts.PinDir, name)
		if err := d.settleStagePins(path); err != nil {
			return err
		}
		if err := m.Pin(path + stagesNext); err != nil {
			return fmt.Errorf("pin %s: %w", name, err)
		}
	}
	return nil
}

// dropNextStages removes the pins pinStages made (a start that failed
// before its entry was attached).
func (d *Datapath) dropNextStages() {
	for name := range d.stageMaps() {
		os.Remove(filepath.Join(d.opts.PinDir, name) + stagesNext)
	}
}

// promoteStages renames this build's stage pins to their names, in one
// step each: the previous build's pin is replaced, never missing.
func (d *Datapath) promoteStages() error {
	for name := range d.stageMaps() {
		path := filepath.Join(d.opts.PinDir, name)
		if err := os.Rename(path+stagesNext, path); err != nil {
			return fmt.Errorf("pin %s: %w", name, err)
		}
	}
	return nil
}

// settleStagePins handles a stage pin at path's next name, left by a
// process killed between pinStages and promoteStages: when the attached
// entry (the pinned link's program) uses that map, it is renamed to path,
// which was the pin of stages no longer attached; otherwise it is removed.
func (d *Datapath) settleStagePins(path string) error {
	m, err := ebpf.LoadPinnedMap(path+stagesNext, &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path+stagesNext, err)
	}
	defer m.Close()
	if attachedUses(d.linkPin(), m) {
		d.log.Info("the stages of the attached entry were pinned by a process stopped before it named them: named now", "pin", path)
		return os.Rename(path+stagesNext, path)
	}
	return os.Remove(path + stagesNext)
}

// attachedUses reports whether the program attached through the link
// pinned at linkPin uses m.
func attachedUses(linkPin string, m *ebpf.Map) bool {
	l, err := link.LoadPinnedLink(linkPin, nil)
	if err != nil {
		return false
	}
	defer l.Close()
	li, err := l.Info()
	if err != nil {
		return false
	}
	p, err := ebpf.NewProgramFromID(li.Program)
	if err != nil {
		return false
	}
	defer p.Close()
	pi, err := p.Info()
	if err != nil {
		return false
	}
	ids, _ := pi.MapIDs()
	mi, err := m.Info()
	if err != nil {
		return false
	}
	id, _ := mi.ID()
	return slices.Contains(ids, id)
}
