// Command docgen writes the files the package ships that are derived from
// the binaries' own help, so they cannot drift from it:
//
//	docgen man NAME SECTION SUMMARY VERSION < help.txt > NAME.SECTION
//	docgen bash-completion > xlbctl
//
// `man` turns a command's help text (Go flag defaults, or a usage text)
// into a man page; `bash-completion` completes xlbctl's commands and flags
// as its usage text lists them. Run by `make dist`.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "docgen: %v\n", err)
		os.Exit(2)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	switch {
	case len(args) == 5 && args[0] == "man":
		help, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		_, err = io.WriteString(out, manPage(args[1], args[2], args[3], args[4], string(help)))
		return err
	case len(args) == 1 && args[0] == "bash-completion":
		_, err := io.WriteString(out, bashCompletion())
		return err
	}
	return fmt.Errorf("usage: docgen man NAME SECTION SUMMARY VERSION < HELP | docgen bash-completion")
}
