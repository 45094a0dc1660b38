package lab

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/testenv/kubeenv"
)

// The demo and the benchmark run the tests' API server (kubeenv), whose
// Start takes a testing.TB: tb is the little of one that Start uses,
// outside a test.
type tb struct {
	testing.TB // nil: a method Start does not use panics
	dir        string
	cleanups   []func()
	err        error
}

func (t *tb) Helper()                   {}
func (t *tb) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *tb) Failed() bool              { return t.err != nil }
func (t *tb) Name() string              { return "xlb-bench kube" }
func (t *tb) Log(args ...any)           {}
func (t *tb) Logf(string, ...any)       {}
func (t *tb) Errorf(f string, a ...any) { t.err = fmt.Errorf(f, a...) }
func (t *tb) Error(args ...any)         { t.err = fmt.Errorf("%s", fmt.Sprint(args...)) }
func (t *tb) Fatalf(f string, a ...any) { t.err = fmt.Errorf(f, a...); runtime.Goexit() }
func (t *tb) Fatal(args ...any)         { t.err = fmt.Errorf("%s", fmt.Sprint(args...)); runtime.Goexit() }
func (t *tb) Skipf(f string, a ...any) {
	t.err = fmt.Errorf("%w: %s", ErrNoAPIServer, fmt.Sprintf(f, a...))
	runtime.Goexit()
}
func (t *tb) Skip(args ...any) {
	t.err = fmt.Errorf("%w: %s", ErrNoAPIServer, fmt.Sprint(args...))
	runtime.Goexit()
}

func (t *tb) TempDir() string {
	if t.dir == "" {
		d, err := os.MkdirTemp("", "xlb-bench-kube-")
		if err != nil {
			t.Fatalf("temporary directory: %v", err)
		}
		t.dir = d
	}
	return t.dir
}

// close runs the cleanups, last first, and removes the directory.
func (t *tb) close() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
	if t.dir != "" {
		os.RemoveAll(t.dir)
	}
}

// ErrNoAPIServer is wrapped when StartAPIServer cannot run one (the
// binaries of make kube-bin are missing).
var ErrNoAPIServer = errors.New("no API server")

// StartAPIServer starts etcd and an API server on loopback (kubeenv);
// stop ends them and removes their files.
func StartAPIServer() (env *kubeenv.Env, stop func(), err error) {
	if _, _, err := kubeenv.Binaries(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoAPIServer, err)
	}
	testing.Init() // Start asks testing.Short, which wants parsed flags
	if !flag.Parsed() {
		flag.CommandLine.Parse(nil) // a command of its own flag sets (xlb-lab)
	}
	t := &tb{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		env = kubeenv.Start(t)
	}()
	<-done
	if t.err != nil {
		t.close()
		return nil, nil, t.err
	}
	return env, t.close, nil
}
