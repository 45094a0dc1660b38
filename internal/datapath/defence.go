package datapath

// The defence modes (bpf/defence.h). After each sweep, xlbd's sweeper
// switches them by the fill of the fullest CPU's slice of the connection
// table: a mode goes on when the fill reaches its threshold and off when
// the fill has stayed below the threshold less the hysteresis
// (state.Defence) for defenceCalm sweeps in a row, and the sweeper writes
// xlb_defence, which the forwarder reads on its new-flow path and the
// sweep in its next run. The wait is what keeps a mode on through a flood:
// drop_entry and secure_tcp free the flood's entries and drop_packet
// stops adding them, so the fill falls under the mode itself while the
// flood goes on.

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/xlbproject/xlb/internal/state"
)

// DefenceMode names a defence mode.
type DefenceMode string

// The defence modes, analogues of IPVS's.
const (
	// SecureTCP: SYN and CLOSING entries get shorter timeouts.
	SecureTCP DefenceMode = "secure_tcp"
	// DropEntry: the sweep frees idle entries (unestablished ones idle
	// half a second) and full buckets give up unestablished entries first.
	DropEntry DefenceMode = "drop_entry"
	// DropPacket: a share of new flows, rising with the fill, is
	// forwarded untracked.
	DropPacket DefenceMode = "drop_packet"
)

// DefenceModes are the modes in the order they escalate.
var DefenceModes = [...]DefenceMode{SecureTCP, DropEntry, DropPacket}

// defenceCalm is how many sweeps in a row (one a second) the fill must
// stay below a mode's off level for it to go off.
const defenceCalm = 5

// minUntrack is the share of new flows drop_packet leaves untracked while
// on with the fill below its threshold (within the hysteresis).
const minUntrack = 1.0 / 64

// Defence is what the sweeper decided after a sweep.
type Defence struct {
	// Fill is the fill of the fullest CPU's slice of the connection
	// table, 0..1.
	Fill float64
	// On tells which modes are on, in the order of DefenceModes.
	On [len(DefenceModes)]bool
	// Untracked is the share of new flows drop_packet leaves untracked
	// (0 while it is off).
	Untracked float64
}

// Active reports whether mode m is on.
func (d *Defence) Active(m DefenceMode) bool {
	for i, x := range DefenceModes {
		if x == m {
			return d.On[i]
		}
	}
	return false
}

// modeState is the modes on, and for each the sweeps in a row whose fill
// was below its off level.
type modeState struct {
	on   [len(DefenceModes)]bool
	calm [len(DefenceModes)]int
}

// defenceSettings is what the sweeper switches the modes by: the last
// commit's node settings.
type defenceSettings struct {
	def      state.Defence
	timeouts state.Timeouts
}

// defenceStep returns the modes after a sweep that found fill, from s.
func defenceStep(def state.Defence, s modeState, fill float64) modeState {
	at := [...]float64{def.SecureTCP, def.DropEntry, def.DropPacket}
	for i := range s.on {
		switch {
		case at[i] <= 0:
			s.on[i], s.calm[i] = false, 0
		case fill >= at[i]:
			s.on[i], s.calm[i] = true, 0
		case fill < at[i]-def.Hysteresis && s.on[i]:
			if s.calm[i]++; s.calm[i] >= defenceCalm {
				s.on[i], s.calm[i] = false, 0
			}
		default:
			s.calm[i] = 0
		}
	}
	return s
}

// untrackShare is drop_packet's share of new flows left untracked at
// fill: rising in a straight line from the fill at which the mode goes
// off to all of them at a full table (IPVS's drop rate rises likewise as
// free memory runs out), at least minUntrack.
func untrackShare(def state.Defence, fill float64) float64 {
	off := def.DropPacket - def.Hysteresis
	if off >= 1 {
		return 1
	}
	return min(1, max(minUntrack, (fill-off)/(1-off)))
}

// defenceValue is xlb_defence's value for d.
func defenceValue(s defenceSettings, d Defence) xlbDefenceState {
	var v xlbDefenceState
	shorter := func(mode, normal time.Duration) uint16 {
		if mode > 0 && mode < normal {
			return Ticks(mode)
		}
		return Ticks(normal)
	}
	if d.On[0] {
		v.Modes |= xlbXlbDefenceModeXLB_DEFENCE_SECURE_TCP
		v.SynTimeout = shorter(s.def.SynTimeout, s.timeouts.TCPSyn)
		v.FinTimeout = shorter(s.def.FinTimeout, s.timeouts.TCPFin)
	}
	if d.On[1] {
		v.Modes |= xlbXlbDefenceModeXLB_DEFENCE_DROP_ENTRY
		v.Idle = shorter(s.def.EntryIdle, max(s.timeouts.TCP, s.timeouts.UDP))
	}
	if d.On[2] {
		v.Modes |= xlbXlbDefenceModeXLB_DEFENCE_DROP_PACKET
		v.Untrack = uint32(min(math.MaxUint32, d.Untracked*(1<<32)))
	}
	return v
}

// defenceFrom reads the modes a value of xlb_defence has on.
func defenceFrom(v xlbDefenceState) (on [len(DefenceModes)]bool) {
	on[0] = v.Modes&xlbXlbDefenceModeXLB_DEFENCE_SECURE_TCP != 0
	on[1] = v.Modes&xlbXlbDefenceModeXLB_DEFENCE_DROP_ENTRY != 0
	on[2] = v.Modes&xlbXlbDefenceModeXLB_DEFENCE_DROP_PACKET != 0
	return on
}

// setDefenceSettings records the settings of a commit for the sweeper.
func (d *Datapath) setDefenceSettings(n *state.Node) {
	d.defenceSet.Store(&defenceSettings{def: n.Defence, timeouts: n.Timeouts})
}

// defend switches the modes for fill from ms, writes xlb_defence and
// logs each switch; it returns what it decided and the modes' state for
// the next sweep. Before the first commit it leaves the map alone.
func (d *Datapath) defend(ms modeState, fill float64, log *slog.Logger) (Defence, modeState, error) {
	s, prev := d.defenceSet.Load(), ms.on
	if s == nil {
		return Defence{Fill: fill, On: prev}, ms, nil
	}
	next := defenceStep(s.def, ms, fill)
	out := Defence{Fill: fill, On: next.on}
	if out.On[2] {
		out.Untracked = untrackShare(s.def, fill)
	}
	v := defenceValue(*s, out)
	if err := d.objs.XlbDefence.Put(uint32(0), &v); err != nil {
		return Defence{Fill: fill, On: prev}, ms, fmt.Errorf("write defence modes: %w", err)
	}
	for i, m := range DefenceModes {
		switch {
		case out.On[i] && !prev[i]:
			log.Warn("defence mode on", "mode", string(m), "fill", round3(fill), "untracked", round3(out.Untracked))
		case !out.On[i] && prev[i]:
			log.Info("defence mode off", "mode", string(m), "fill", round3(fill))
		}
	}
	return out, next, nil
}

// defenceNow reads the modes xlb_defence has on (a restarted daemon's
// starting point).
func (d *Datapath) defenceNow() modeState {
	var v xlbDefenceState
	if err := d.objs.XlbDefence.Lookup(uint32(0), &v); err != nil {
		return modeState{}
	}
	return modeState{on: defenceFrom(v)}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
