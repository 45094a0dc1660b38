package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where the xlb binaries pin their objects. xlbd pins a node's data plane
// under PinDir/<node name>, and lab node names start with the lab prefix;
// xlb-decap pins under DecapPinDir/netns-<netns inode>/<interface>. Cleanup
// finds both.
const (
	PinDir      = "/sys/fs/bpf/xlb"
	DecapPinDir = "/sys/fs/bpf/xlb-decap"
)

// Leftovers returns the names of the namespaces under NetnsDir that start
// with prefix. An empty prefix means every generated lab prefix
// (PrefixPattern).
func Leftovers(prefix string) ([]string, error) {
	ents, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", NetnsDir, err)
	}
	var names []string
	for _, e := range ents {
		if matchPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func matchPrefix(name, prefix string) bool {
	if prefix == "" {
		return PrefixPattern.MatchString(name)
	}
	return strings.HasPrefix(name, prefix)
}

// Cleanup removes what labs with the prefix (empty: any generated prefix)
// left behind: it stops every process inside their namespaces (SIGTERM, then
// SIGKILL after 3 s; never this process), deletes the namespaces and removes
// the pins of xlbd (PinDir/<prefix>*) and of xlb-decap in those namespaces.
// It returns the namespaces deleted. Run it only for labs that are no
// longer in use.
func Cleanup(prefix string) ([]string, error) {
	names, err := Leftovers(prefix)
	if err != nil {
		return nil, err
	}
	var errs []error
	inodes := map[uint64]bool{}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(NetnsDir, n), &st); err == nil {
			inodes[st.Ino] = true
		}
	}
	if len(inodes) > 0 {
		errs = append(errs, killInNetns(inodes, 3*time.Second))
	}
	var deleted []string
	for _, n := range names {
		if err := deleteNS(n); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, n)
	}
	errs = append(errs, removePins(prefix))
	for ino := range inodes {
		if err := os.RemoveAll(filepath.Join(DecapPinDir, fmt.Sprintf("netns-%d", ino))); err != nil {
			errs = append(errs, fmt.Errorf("remove xlb-decap pins: %w", err))
		}
	}
	return deleted, errors.Join(errs...)
}

// removePins removes PinDir/<name> for names matching prefix. Unlinking a
// pin drops the reference it holds; the kernel frees the program or map when
// nothing else uses it.
func removePins(prefix string) error {
	ents, err := os.ReadDir(PinDir)
	if err != nil {
		return nil // no bpffs or nothing pinned
	}
	var errs []error
	for _, e := range ents {
		if matchPrefix(e.Name(), prefix) {
			if err := os.RemoveAll(filepath.Join(PinDir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("remove pins: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// pidsInNetns returns the processes (other than this one) whose network
// namespace is one of inodes, and which are not zombies.
func pidsInNetns(inodes map[uint64]bool) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			continue
		}
		// "net:[4026532281]"
		s, ok := strings.CutPrefix(link, "net:[")
		if !ok {
			continue
		}
		ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
		if err != nil || !inodes[ino] || zombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

func killInNetns(inodes map[uint64]bool, grace time.Duration) error {
	pids := pidsInNetns(inodes)
	if len(pids) == 0 {
		return nil
	}
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		left := pidsInNetns(inodes)
		if len(left) == 0 {
			return nil
		}
		pids = left
	}
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	time.Sleep(100 * time.Millisecond)
	if left := pidsInNetns(inodes); len(left) > 0 {
		slices.Sort(left)
		return fmt.Errorf("processes %v survive SIGKILL in lab namespaces", left)
	}
	return nil
}
