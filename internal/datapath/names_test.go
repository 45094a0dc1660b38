package datapath

import "github.com/xlbproject/xlb/internal/state"

// The state model's names, as this package's tests use them.
type (
	State        = state.State
	Service      = state.Service
	Real         = state.Real
	VIPKey       = state.VIPKey
	Node         = state.Node
	Timeouts     = state.Timeouts
	FragPool     = state.FragPool
	FragPeer     = state.FragPeer
	NextHopCache = state.NextHop
	Encap        = state.Encap
)

const (
	EncapGRE  = state.EncapGRE
	EncapIPIP = state.EncapIPIP
)
