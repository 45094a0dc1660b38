// Command keydoc writes the reference of the configuration keys
// (config.KeyReference) to the file named by its argument; go generate
// runs it in internal/config to write docs/CONFIG.md.
package main

import (
	"fmt"
	"os"

	"github.com/xlbproject/xlb/internal/config"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: keydoc FILE")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], config.KeyReference(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "keydoc:", err)
		os.Exit(1)
	}
}
