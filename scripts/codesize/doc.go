// Package codesize holds the repository's size rule for product code, as
// a test that plain `go test ./...` runs: no function over MaxFuncLines
// lines and no file over MaxFileLines, in the Go of cmd/, internal/ and
// lab/ (tests and generated files aside) and the C of bpf/. A function
// that grows past the limit is split where it has a seam, not cut.
package codesize

// The limits, in lines. A function counts from the line of its head
// (Go: the func keyword; C: its first token) to the line of its closing
// brace; a file counts all its lines.
const (
	MaxFuncLines = 80
	MaxFileLines = 700
)
