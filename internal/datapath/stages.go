package datapath

// The forwarder's stages (bpf/maps.h, xlb_stages): XDP programs the entry
// tail-calls for ICMP, fragments and self-check probes. The object's
// initializer fills the program array when it is loaded. The array is
// never adopted from a pin, as it holds the programs of its own build;
// each build pins its own once its entry is attached, replacing the
// previous build's pin. A program array whose last user reference goes
// is emptied by the kernel, so the pin is what keeps an attached entry's
// stages while no xlbd runs (a restart, an upgrade).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
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

// pinStages pins this build's stage maps under the pin directory,
// replacing the previous build's. Called once the entry that tail-calls
// through them is attached (Open) or loaded (Load).
func (d *Datapath) pinStages() error {
	for name, m := range d.stageMaps() {
		path := filepath.Join(d.opts.PinDir, name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unpin the previous %s: %w", name, err)
		}
		if err := m.Pin(path); err != nil {
			return fmt.Errorf("pin %s: %w", name, err)
		}
	}
	return nil
}
