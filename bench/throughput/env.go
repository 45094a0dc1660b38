package throughput

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// onPrivateThread runs fn on a fresh OS thread pinned to cpu, inside a new
// network namespace and a new mount namespace private to that thread, with
// that network namespace's sysfs mounted on a temporary directory (the
// host's /sys shows the host's devices; the "threaded" switch of a device's
// NAPI lives there). The thread is never unlocked: Go discards it, and the
// namespaces with their devices and the mount go with it.
func onPrivateThread(cpu int, fn func(sysfs string) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := pinThread(cpu); err != nil {
			errc <- err
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("new network and mount namespaces: %w", err)
			return
		}
		// Nothing mounted from here on propagates to the host.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- fmt.Errorf("make mounts private: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "xlb-tput-sysfs-")
		if err != nil {
			errc <- err
			return
		}
		defer os.Remove(dir)
		if err := unix.Mount("sysfs", dir, "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			errc <- fmt.Errorf("mount the namespace's sysfs: %w", err)
			return
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
		errc <- fn(dir)
	}()
	return <-errc
}

// pinThread pins the calling OS thread (locked by the caller) to cpu.
func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin thread to cpu %d: %w", cpu, err)
	}
	return nil
}

// setThreaded switches dev's NAPI instances to kernel threads (the sysfs
// "threaded" attribute; the device must have NAPI, i.e. an XDP program or
// GRO on a veth) and returns the thread's pid.
func setThreaded(sysfs, dev string) (int, error) {
	p := filepath.Join(sysfs, "class/net", dev, "threaded")
	if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
		return 0, fmt.Errorf("threaded NAPI on %s: %w", dev, err)
	}
	return napiThread(dev)
}

// napiThread finds the kernel thread of dev's (only) NAPI instance:
// "napi/<dev>-<napi id>" (names are unique: they carry a random tag).
func napiThread(dev string) (int, error) {
	return kernelThread("napi/" + dev + "-")
}

// kernelThread finds the one task whose name starts with prefix (at most 15
// bytes: the kernel truncates task names to 15).
func kernelThread(name string) (int, error) {
	prefix := []byte(name)
	if len(prefix) > 15 {
		return 0, fmt.Errorf("task name %q too long to search", name)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && bytes.HasPrefix(comm, prefix) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%d tasks named %s*, want 1", len(found), prefix)
	}
	return found[0], nil
}

// pinTask pins another task (a kernel thread) to cpu.
func pinTask(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		return fmt.Errorf("pin task %d to cpu %d: %w", pid, cpu, err)
	}
	return nil
}

// taskRuntime is the CPU time task pid has had (ns, /proc/<pid>/schedstat).
func taskRuntime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, fmt.Errorf("schedstat of %d: %q", pid, b)
	}
	return strconv.ParseUint(f[0], 10, 64)
}

// ethtoolK runs `ethtool -K dev args...` (ethtool is a project dependency,
// scripts/deps.sh). The child is forked from the calling thread, so it runs
// in that thread's network namespace: call it from the namespace's thread.
func ethtoolK(dev string, args ...string) error {
	out, err := exec.Command("ethtool", append([]string{"-K", dev}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ethtool -K %s %s: %v: %s", dev, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// machine describes where the figures were taken.
func machine() (cpuModel, kernel string) {
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	return cpuModel, kernel
}

var errNoCPU = errors.New("throughput: no such cpu")

// setFIFO makes task pid SCHED_FIFO at priority prio.
func setFIFO(pid, prio int) error {
	if err := unix.SchedSetAttr(pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}, 0); err != nil {
		return fmt.Errorf("SCHED_FIFO for task %d: %w", pid, err)
	}
	return nil
}
