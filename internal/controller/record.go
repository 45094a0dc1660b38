package controller

// The commit record: which config the data plane holds, and whether the
// commit that wrote it finished. It is kept with the pins
// (datapath.SaveCommitRecord), written "pending" before a commit's first
// write to the maps and "done" once the maps and, for an API apply, the
// config file hold the new config. A start that finds "pending" knows the
// previous xlbd was stopped in the middle of a commit: the maps may hold
// parts of two configs. Its first commit makes them hold exactly the
// config it starts with, whatever the killed commit left: every part of
// the maps is read back (datapath.Open), and what no published VIP
// reaches is cleared. The config a start commits is the config file; an
// API apply saves it before its record says "done", so the record's
// config after that first commit is the file's.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/crashpoint"
	"github.com/xlbproject/xlb/internal/datapath"
)

// Phases of a commit record.
const (
	PhasePending = "pending"
	PhaseDone    = "done"
)

// CommitRecord is the commit record's document (JSON, at most 4 KiB).
type CommitRecord struct {
	Phase   string `json:"phase"`
	Config  string `json:"config"` // ConfigDigest of the config committed
	Trigger string `json:"trigger"`
	// Cluster is the config's ClusterVersion (what sync peers compare).
	Cluster string    `json:"cluster"`
	At      time.Time `json:"at"`
}

// ConfigDigest names a config by its canonical form (config.Marshal):
// "sha256:" and 16 hex digits. Unlike ClusterVersion it covers the node
// and bgp sections too.
func ConfigDigest(c *config.Config) string {
	b, err := c.Marshal()
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// ReadCommitRecord returns the commit record pinned under pinDir (nil
// when none was saved).
func ReadCommitRecord(pinDir string) (*CommitRecord, error) {
	b, err := datapath.ReadCommitRecord(pinDir)
	if err != nil || b == nil {
		return nil, err
	}
	var r CommitRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("commit record: %w", err)
	}
	return &r, nil
}

// record saves the commit record: phase of config digest, by trigger.
// A failure is logged; the commit goes on (the record only tells a later
// start what this one did).
func (c *Controller) record(phase, digest, trigger string) {
	b, err := json.Marshal(CommitRecord{Phase: phase, Config: digest, Trigger: trigger, Cluster: c.version, At: time.Now()})
	if err == nil {
		err = c.dp.SaveCommitRecord(b)
	}
	if err != nil {
		c.log.Error("commit record not saved", "phase", phase, "error", err)
	}
}

// restoreRecord reads the previous xlbd's record, and says when it was
// stopped in the middle of a commit.
func (c *Controller) restoreRecord() {
	b, err := c.dp.CommitRecord()
	if err != nil || b == nil {
		if err != nil {
			c.log.Error("commit record of the previous xlbd not read", "error", err)
		}
		return
	}
	var r CommitRecord
	if err := json.Unmarshal(b, &r); err != nil {
		c.log.Warn("commit record of the previous xlbd unreadable", "error", err)
		return
	}
	c.recorded, c.recordedPhase = r.Config, r.Phase
	if r.Phase == PhasePending {
		c.log.Warn("the previous xlbd was stopped in the middle of a commit: the maps may hold parts of two configs until the first commit, which makes them hold this start's config in full",
			"config", r.Config, "trigger", r.Trigger, "at", r.At)
	}
}

// committing brackets one commit to the maps with the record: pending
// before write, then, once write succeeded and the config file is saved
// (an API apply), done. A failed write (undone) puts the previous record
// back: done, or still pending when no commit of this process has
// finished what a killed one left.
func (c *Controller) committing(trigger string, write func() error) error {
	digest := c.digest
	c.record(PhasePending, digest, trigger)
	crashpoint.At("controller: after the pending record")
	if err := write(); err != nil {
		phase := PhaseDone
		if c.recordedPhase == PhasePending {
			phase = PhasePending
		}
		c.record(phase, c.recorded, trigger)
		return err
	}
	crashpoint.At("controller: after the maps")
	if c.saveYAML != nil && c.path != "" {
		if err := writeFileAtomic(c.path, c.saveYAML); err != nil {
			c.log.Error("config committed but not saved to its file: a restart would load the old one", "config", c.path, "error", err)
		}
		crashpoint.At("controller: after the config file")
	}
	c.record(PhaseDone, digest, trigger)
	c.recorded, c.recordedPhase = digest, PhaseDone
	crashpoint.At("controller: after the done record")
	return nil
}

// CrashPoints are the controller's crash points around a commit, in
// order; datapath.CommitSteps are between the first two. "after the
// config file" is reached by API applies only.
var CrashPoints = []string{
	"controller: after the pending record", "controller: after the maps",
	"controller: after the config file", "controller: after the done record",
}
