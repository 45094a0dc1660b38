package main

import (
	"fmt"
	"log/slog"

	"github.com/xlbproject/xlb/internal/decap"
	"github.com/xlbproject/xlb/internal/kernelcheck"
)

// checkKernel refuses to attach on a kernel that lacks a feature of the
// decapsulator, naming each missing one and the Linux version that has it.
func checkKernel() error {
	spec, err := decap.EmbeddedSpec()
	if err != nil {
		return fmt.Errorf("read the embedded decapsulator: %w", err)
	}
	return kernelcheck.Require(kernelcheck.Decap(spec), slog.Default())
}
