package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// Documents kept with the pins: the operator's runtime state (overrides,
// node drain) and the commit record (the controller's documents). They
// live exactly as long as the forwarder they describe: across xlbd
// restarts and upgrades, gone with 'xlbd --cleanup' (and a reboot). bpffs
// holds no regular files, so a document is the one value of a pinned
// array map, a 4-byte length and the bytes. A map update is one system
// call that copies the whole value: a crash leaves the old document or
// the new one, never a mix.
const (
	operatorPin   = "xlbd_operator"
	operatorValue = 256 << 10 // the document's room, length included
	recordPin     = "xlbd_commit"
	recordValue   = 4 << 10
)

// ErrOperatorTooLarge: the document does not fit the operator map.
var ErrOperatorTooLarge = errors.New("operator state too large")

func docSpec(pin string, size uint32) *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: pin, Type: ebpf.Array, KeySize: 4, ValueSize: size, MaxEntries: 1}
}

// openDoc opens the document map pinned in dir as pin, or creates and
// pins it. A pin of another layout (not written by this format) is
// replaced.
func openDoc(dir, pin string, size uint32, log func(msg string, args ...any)) (*ebpf.Map, error) {
	path := filepath.Join(dir, pin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err == nil {
		if docSpec(pin, size).Compatible(m) == nil {
			return m, nil
		}
		m.Close()
		log("a pinned document has another layout: replaced by an empty one", "pin", path)
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	m, err = ebpf.NewMap(docSpec(pin, size))
	if err != nil {
		return nil, fmt.Errorf("create the map of %s: %w", pin, err)
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	return m, nil
}

// errNoDoc: the datapath was not opened with its documents (Open, Load).
var errNoDoc = errors.New("no document map: the datapath was not opened by Open or Load")

// readDoc returns the document m holds (nil when none was saved).
func readDoc(m *ebpf.Map) ([]byte, error) {
	if m == nil {
		return nil, errNoDoc
	}
	buf := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(0), &buf); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(buf)
	if n == 0 {
		return nil, nil
	}
	if n > uint32(len(buf))-4 {
		return nil, fmt.Errorf("the document says it has %d bytes, more than its map holds", n)
	}
	return buf[4 : 4+n], nil
}

// writeDoc replaces m's document with doc, in one update.
func writeDoc(m *ebpf.Map, doc []byte) error {
	if m == nil {
		return errNoDoc
	}
	buf := make([]byte, m.ValueSize())
	if len(doc) > len(buf)-4 {
		return fmt.Errorf("%d bytes, room for %d", len(doc), len(buf)-4)
	}
	binary.LittleEndian.PutUint32(buf, uint32(len(doc)))
	copy(buf[4:], doc)
	return m.Update(uint32(0), buf, ebpf.UpdateAny)
}

// OperatorState returns the document last saved with SaveOperatorState
// (nil when none was).
func (d *Datapath) OperatorState() ([]byte, error) {
	doc, err := readDoc(d.operator)
	if err != nil {
		return nil, fmt.Errorf("read the operator state: %w", err)
	}
	return doc, nil
}

// SaveOperatorState replaces the saved document with doc, in one update.
func (d *Datapath) SaveOperatorState(doc []byte) error {
	if len(doc) > operatorValue-4 {
		return fmt.Errorf("%w: %d bytes, room for %d", ErrOperatorTooLarge, len(doc), operatorValue-4)
	}
	if err := writeDoc(d.operator, doc); err != nil {
		return fmt.Errorf("save the operator state: %w", err)
	}
	return nil
}

// CommitRecord returns the document last saved with SaveCommitRecord
// (nil when none was: a first start, or pins of a build without it).
func (d *Datapath) CommitRecord() ([]byte, error) {
	doc, err := readDoc(d.record)
	if err != nil {
		return nil, fmt.Errorf("read the commit record: %w", err)
	}
	return doc, nil
}

// SaveCommitRecord replaces the commit record with doc (at most 4 KiB),
// in one update.
func (d *Datapath) SaveCommitRecord(doc []byte) error {
	if err := writeDoc(d.record, doc); err != nil {
		return fmt.Errorf("save the commit record: %w", err)
	}
	return nil
}

// ReadCommitRecord returns the commit record pinned under pinDir, for
// tools that do not own the data plane (nil when none was saved).
func ReadCommitRecord(pinDir string) ([]byte, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, recordPin), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open the commit record: %w", err)
	}
	defer m.Close()
	return readDoc(m)
}
