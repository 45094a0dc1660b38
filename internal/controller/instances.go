package controller

import (
	"path/filepath"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/state"
)

// CheckInstances refuses d when one of its VIPs is forwarded by another
// xlb instance of this host (network namespace): the instances pinned
// beside pinDir (datapath.OtherInstances). xlbd calls it before it opens
// the data plane, and Commit before every reload.
func CheckInstances(pinDir string, d *config.Desired) error {
	others, err := datapath.OtherInstances(filepath.Dir(pinDir), pinDir)
	if err != nil || len(others) == 0 {
		return err
	}
	keys := make([]state.VIPKey, len(d.Services))
	for i, s := range d.Services {
		keys[i] = state.VIPKey{Addr: s.VIP, Port: s.Port, Proto: uint8(s.Proto)}
	}
	return datapath.CheckOverlap(keys, others)
}
