package clusterconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Node states in the status.
const (
	StateRunning     = "running"     // runs the key's latest value
	StateRefused     = "refused"     // the latest value failed here: runs the previous one (Refused says why)
	StateUnreachable = "unreachable" // etcd cannot be reached: runs the last committed value
)

// Status is one node's status under the status prefix (JSON).
type Status struct {
	Node     string    `json:"node"`
	State    string    `json:"state"`
	Revision int64     `json:"revision"` // etcd revision of the value it runs
	Version  string    `json:"version"`  // config.Config.ClusterVersion of it
	Refused  *Refusal  `json:"refused,omitempty"`
	Updated  time.Time `json:"updated"`
}

// Refusal is a value a node did not commit.
type Refusal struct {
	Revision int64  `json:"revision"`
	Reason   string `json:"reason"`
}

// Options configure Open.
type Options struct {
	Location Location
	NodeFile string // the node's own sections (node, bgp)
	// Cache keeps the last committed cluster document, read at start
	// when etcd cannot be reached.
	Cache string
	Log   *slog.Logger
	// Timeout bounds each etcd request (default 3 s).
	Timeout time.Duration
}

// Source is the cluster's config in etcd, as one node sees it.
type Source struct {
	o   Options
	cli *clientv3.Client
	mu  sync.Mutex
	st  Status
	doc []byte // the committed cluster document
	// pubMu orders the status writes; published is the Updated time of
	// the status last written (a write that failed is retried by the
	// probe every second, so a node never stays absent from the cluster's
	// view because etcd was slow once).
	pubMu     sync.Mutex
	published time.Time
}

// Open connects to etcd (lazily: an unreachable etcd is found by Load).
func Open(o Options) (*Source, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: o.Location.Endpoints, DialTimeout: o.Timeout,
		Logger: nil, DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: o.Timeout})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", o.Location, err)
	}
	return &Source{o: o, cli: cli}, nil
}

// Close ends the connection.
func (s *Source) Close() error { return s.cli.Close() }

// Load reads the key and composes this node's config. When etcd cannot be
// reached it uses the cached copy of the last committed value, and says
// so (state unreachable).
func (s *Source) Load(ctx context.Context) (*config.Config, error) {
	doc, rev, err := s.get(ctx)
	if err != nil {
		cached, crev, cerr := s.readCache()
		if cerr != nil {
			return nil, fmt.Errorf("etcd %s: %w; and no cached copy of the cluster config (%v)", s.o.Location, err, cerr)
		}
		s.o.Log.Warn("etcd unreachable: starting on the cached copy of the last committed cluster config",
			"location", s.o.Location.String(), "revision", crev, "cache", s.o.Cache, "error", err)
		cfg, cerr := s.compose(cached)
		if cerr != nil {
			return nil, cerr
		}
		s.set(func(st *Status) { st.State, st.Revision, st.Version = StateUnreachable, crev, cfg.ClusterVersion() })
		s.doc = cached
		return cfg, nil
	}
	cfg, err := s.compose(doc)
	if err != nil {
		return nil, err
	}
	s.set(func(st *Status) { st.Revision = rev })
	s.doc = doc
	return cfg, nil
}

// get reads the key's value and revision.
func (s *Source) get(ctx context.Context) ([]byte, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.o.Location.Key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, fmt.Errorf("key %s is not set: write the cluster config there (xlbctl apply --cluster)", s.o.Location.Key)
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

func (s *Source) compose(doc []byte) (*config.Config, error) {
	node, err := os.ReadFile(s.o.NodeFile)
	if err != nil {
		return nil, fmt.Errorf("node file: %w", err)
	}
	return Compose(node, s.o.NodeFile, doc, "etcd:"+s.o.Location.Key)
}

// Committed records that the value of revision rev (the one Load or
// Run handed out) is running: the cache and the status follow.
func (s *Source) Committed(ctx context.Context, cfg *config.Config, rev int64) {
	s.set(func(st *Status) {
		st.Node, st.Version = cfg.Node.Name, cfg.ClusterVersion()
		if st.State != StateUnreachable {
			st.State, st.Revision, st.Refused = StateRunning, rev, nil
		}
	})
	if err := s.writeCache(s.doc, rev); err != nil {
		s.o.Log.Warn("cluster config not cached", "cache", s.o.Cache, "error", err)
	}
	s.publish(ctx)
}

// Status returns this node's status.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *Source) set(fn func(*Status)) {
	s.mu.Lock()
	fn(&s.st)
	s.st.Updated = time.Now().UTC()
	s.mu.Unlock()
}

// publish writes this node's status under the status prefix.
func (s *Source) publish(ctx context.Context) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	st := s.Status()
	if st.Node == "" || st.Updated.Equal(s.published) {
		return
	}
	b, _ := json.Marshal(st)
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	if _, err := s.cli.Put(ctx, s.o.Location.StatusPrefix()+st.Node, string(b)); err != nil {
		s.o.Log.Warn("node status not written to etcd; retried every second", "error", err)
		return
	}
	s.published = st.Updated
}

// cache file: a comment line with the revision, then the document.
func (s *Source) writeCache(doc []byte, rev int64) error {
	if s.o.Cache == "" || doc == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.o.Cache), 0o700); err != nil {
		return err
	}
	tmp := s.o.Cache + ".tmp"
	data := append([]byte("# etcd revision "+strconv.FormatInt(rev, 10)+" of "+s.o.Location.String()+"\n"), doc...)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.o.Cache)
}

func (s *Source) readCache() ([]byte, int64, error) {
	if s.o.Cache == "" {
		return nil, 0, errors.New("no cache file configured")
	}
	data, err := os.ReadFile(s.o.Cache)
	if err != nil {
		return nil, 0, err
	}
	first, _, _ := strings.Cut(string(data), "\n")
	var rev int64
	if f := strings.Fields(first); len(f) >= 4 && f[1] == "etcd" {
		rev, _ = strconv.ParseInt(f[3], 10, 64)
	}
	return data, rev, nil
}

// Statuses reads every node's status under the location's prefix.
func Statuses(ctx context.Context, cli *clientv3.Client, loc Location) ([]Status, error) {
	resp, err := cli.Get(ctx, loc.StatusPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var st Status
		if err := json.Unmarshal(kv.Value, &st); err != nil {
			st = Status{Node: strings.TrimPrefix(string(kv.Key), loc.StatusPrefix()), State: "unreadable status: " + err.Error()}
		}
		out = append(out, st)
	}
	return out, nil
}
