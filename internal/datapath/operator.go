package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// The operator's runtime state (overrides, node drain: the controller's
// document) is kept with the pins, so it lives exactly as long as the
// forwarder it steers: across xlbd restarts and upgrades, gone with
// 'xlbd --cleanup' (and a reboot). bpffs holds no regular files, so the
// document is the one value of a pinned array map, a 4-byte length and the
// bytes. A map update is one system call that copies the whole value: a
// crash leaves the old document or the new one, never a mix.
const (
	operatorPin   = "xlbd_operator"
	operatorValue = 256 << 10 // the document's room, length included
)

// ErrOperatorTooLarge: the document does not fit the operator map.
var ErrOperatorTooLarge = errors.New("operator state too large")

func operatorSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: operatorPin, Type: ebpf.Array, KeySize: 4, ValueSize: operatorValue, MaxEntries: 1}
}

// openOperator opens the operator map pinned in dir, or creates and pins
// it. A pin of another layout (not written by this format) is replaced.
func openOperator(dir string, log func(msg string, args ...any)) (*ebpf.Map, error) {
	path := filepath.Join(dir, operatorPin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err == nil {
		if operatorSpec().Compatible(m) == nil {
			return m, nil
		}
		m.Close()
		log("the pinned operator state has another layout: replaced by an empty one", "pin", path)
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	m, err = ebpf.NewMap(operatorSpec())
	if err != nil {
		return nil, fmt.Errorf("create the operator state map: %w", err)
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	return m, nil
}

// OperatorState returns the document last saved with SaveOperatorState
// (nil when none was).
func (d *Datapath) OperatorState() ([]byte, error) {
	buf := make([]byte, operatorValue)
	if err := d.operator.Lookup(uint32(0), &buf); err != nil {
		return nil, fmt.Errorf("read the operator state: %w", err)
	}
	n := binary.LittleEndian.Uint32(buf)
	if n == 0 {
		return nil, nil
	}
	if n > operatorValue-4 {
		return nil, fmt.Errorf("the operator state says it has %d bytes, more than its map holds", n)
	}
	return buf[4 : 4+n], nil
}

// SaveOperatorState replaces the saved document with doc, in one update.
func (d *Datapath) SaveOperatorState(doc []byte) error {
	if len(doc) > operatorValue-4 {
		return fmt.Errorf("%w: %d bytes, room for %d", ErrOperatorTooLarge, len(doc), operatorValue-4)
	}
	buf := make([]byte, operatorValue)
	binary.LittleEndian.PutUint32(buf, uint32(len(doc)))
	copy(buf[4:], doc)
	if err := d.operator.Update(uint32(0), buf, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("save the operator state: %w", err)
	}
	return nil
}
