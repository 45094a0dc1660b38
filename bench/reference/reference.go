// Package reference holds a fixed earlier build of the forwarder, which
// make bench measures side by side with this build's (the pkt part's
// vs_reference figures), so that a regression of the default path shows
// in every report, not only in an A/B someone thought to run.
//
// xlb-8fe1ecc.o is internal/datapath/xlb_bpfel.o as committed at 8fe1ecc
// (2026-11-21), the last forwarder before the IPVS features (NAT,
// schedulers, persistence, lblc, connection counts, sync): byte for byte
// `git show 8fe1ecc:internal/datapath/xlb_bpfel.o`. It is committed rather
// than rebuilt from history, so that the reference does not move with the
// compiler and a clone without that history (shallow, or a source
// archive) has it too. The harness loads it on this build's maps
// (harness.MeasureBuilds): the maps it has are shared, the ones it lacks
// are not its concern.
package reference

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// Name names the reference build in reports.
const Name = "8fe1ecc"

// SHA256 is the object's digest, checked before each use.
const SHA256 = "f1778b16acf88f3fb8fcf9bc81550e1a51fbc1c4583126c0b761de8577f4efcf"

//go:embed xlb-8fe1ecc.o
var object []byte

// Object returns the reference forwarder's ELF object, or an error when
// the embedded bytes are not the ones committed.
func Object() ([]byte, error) {
	sum := sha256.Sum256(object)
	if got := hex.EncodeToString(sum[:]); got != SHA256 {
		return nil, fmt.Errorf("reference forwarder %s: sha256 %s, want %s", Name, got, SHA256)
	}
	return object, nil
}

// WriteFile writes the reference object into dir (the harness loads an
// object file by path) and returns its path.
func WriteFile(dir string) (string, error) {
	b, err := Object()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "xlb-"+Name+".o")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("write reference forwarder: %w", err)
	}
	return path, nil
}
