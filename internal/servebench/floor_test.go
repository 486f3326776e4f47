package servebench

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// The fsync-floor row: the least a durable lease server behind net/http
// must do for an acquire+release pair, and nothing else. The acquisition's
// answer carries a token, which must be durable before it is sent (I1
// across crashes): the handler writes a record and waits for an fdatasync
// that covers it, shared with every acquisition that arrived meanwhile
// (group commit). A release needs no durability (lost in a crash, the lease
// is held until its TTL), so its handler answers at once. No JSON is
// decoded, no lease state kept, no goroutine hand-off, no timer: whatever
// lease serve adds to this row is its own cost, and a target this row
// misses is out of reach for any server on this HTTP stack and disk.

const (
	floorRecord = 64      // bytes per acquisition: about a lease record (key, token, expiry, ID, owner)
	floorRegion = 1 << 20 // the log's preallocated size: records overwrite it, so a sync changes no metadata
)

// groupSync makes records durable in groups. The first caller to find no
// sync in flight writes every record appended so far and fdatasyncs them;
// callers arriving meanwhile wait for the next sync, which one of them runs.
type groupSync struct {
	f *os.File

	mu       sync.Mutex
	cond     sync.Cond
	appended uint64 // records appended
	durable  uint64 // records covered by a completed fdatasync
	syncing  bool
	off      int64 // where the next group is written
	buf      []byte

	syncs atomic.Int64 // fdatasyncs done; tests read it
}

// newGroupSync creates the log in dir, preallocated and synced.
func newGroupSync(dir string) (*groupSync, error) {
	f, err := os.OpenFile(filepath.Join(dir, "floor.log"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteAt(make([]byte, floorRegion), 0); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	g := &groupSync{f: f}
	g.cond.L = &g.mu
	return g, nil
}

// commit appends one record and returns once an fdatasync covers it.
func (g *groupSync) commit() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.appended++
	mine := g.appended
	for g.durable < mine {
		if g.syncing {
			g.cond.Wait()
			continue
		}
		g.syncing = true
		upto := g.appended
		n := int(upto-g.durable) * floorRecord
		if g.off+int64(n) > floorRegion {
			g.off = 0
		}
		off := g.off
		g.off += int64(n)
		if cap(g.buf) < n {
			g.buf = make([]byte, n)
		}
		buf := g.buf[:n]
		g.mu.Unlock()
		for i := range buf {
			buf[i] = byte(upto)
		}
		_, err := g.f.WriteAt(buf, off)
		if err == nil {
			err = syscall.Fdatasync(int(g.f.Fd()))
		}
		g.mu.Lock()
		g.syncing = false
		g.cond.Broadcast()
		if err != nil {
			return err
		}
		g.syncs.Add(1)
		g.durable = upto
	}
	return nil
}

func (g *groupSync) close() error { return g.f.Close() }

// floorServer is the fsync-floor row's server: POST …/acquire commits a
// record, anything else answers at once; both answer {} as http-noop does.
func floorServer(tb testing.TB) (*httptest.Server, *groupSync) {
	tb.Helper()
	g, err := newGroupSync(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			if err := g.commit(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	tb.Cleanup(func() {
		srv.Close()
		if err := g.close(); err != nil {
			tb.Error(err)
		}
	})
	return srv, g
}

// TestGroupSyncShares: concurrent commits all return, share fdatasyncs,
// and never grow the log (an fdatasync that has to commit a new file size
// is a slower one, and the floor would not be a floor).
func TestGroupSyncShares(t *testing.T) {
	g, err := newGroupSync(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	const clients, each = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			for range each {
				if err := g.commit(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if g.durable != clients*each {
		t.Fatalf("%d records durable, want %d", g.durable, clients*each)
	}
	if n := g.syncs.Load(); n >= clients*each/2 {
		t.Errorf("%d fdatasyncs for %d commits from %d clients: commits do not share them", n, clients*each, clients)
	}
	if fi, err := g.f.Stat(); err != nil || fi.Size() != floorRegion {
		t.Errorf("log size %v (%v), want %d: it grew", fi.Size(), err, floorRegion)
	}
}

// TestFloorServerAnswers: the floor row's acquire waits for a sync and its
// release does not.
func TestFloorServerAnswers(t *testing.T) {
	srv, g := floorServer(t)
	post := func(path string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	for i := range 3 {
		post("/v1/leases/k/acquire")
		post("/v1/leases/k/release")
		if got := g.syncs.Load(); got != int64(i+1) {
			t.Fatalf("after %d pairs %d fdatasyncs, want %d", i+1, got, i+1)
		}
	}
}
