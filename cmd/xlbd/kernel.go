package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/kernelcheck"
)

// kernelFeatures is what the embedded forwarder and the control plane
// need of the kernel.
func kernelFeatures() ([]kernelcheck.Feature, error) {
	spec, err := datapath.EmbeddedSpec()
	if err != nil {
		return nil, fmt.Errorf("read the embedded forwarder: %w", err)
	}
	return kernelcheck.Forwarder(spec), nil
}

// checkKernel stops xlbd on a kernel that lacks a feature, naming each
// missing one and the Linux version that has it; probes that could not
// tell are logged and the forwarder's load has the last word.
func checkKernel(log *slog.Logger) error {
	fs, err := kernelFeatures()
	if err != nil {
		return err
	}
	return kernelcheck.Require(fs, log)
}

// printKernel is `xlbd --check-kernel`: every feature and its probe's
// answer; false when one is missing or could not be probed.
func printKernel(w io.Writer) bool {
	fs, err := kernelFeatures()
	if err != nil {
		fmt.Fprintf(w, "xlbd: %v\n", err)
		return false
	}
	ok := true
	fmt.Fprintf(w, "kernel %s; xlb needs Linux %s or later\n", kernelcheck.Release(), kernelcheck.Minimum(fs))
	for _, r := range kernelcheck.Run(fs) {
		verdict := "ok"
		if r.Err != nil {
			verdict, ok = "MISSING: "+r.Err.Error(), false
			if !r.Missing() {
				verdict = "could not probe: " + r.Err.Error()
			}
		}
		fmt.Fprintf(w, "  %-60s Linux %-5s %s\n", r.Name, r.Since, verdict)
	}
	return ok
}

// programTag is the kernel's tag of the running forwarder (as bpftool prog
// show lists it, and xlbd --version prints it for this build).
func programTag(dp *datapath.Datapath) string {
	info, err := dp.Program().Info()
	if err != nil {
		return "unknown: " + err.Error()
	}
	return info.Tag
}
